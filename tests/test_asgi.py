"""The ASGI entry: /v1 served by its views directly, with what the API needs from Django's chain;
everything else through Django's full handler."""
from __future__ import annotations

import asyncio
import socket

import pytest

from tests.conftest import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def test_api_answers_carry_request_id_and_security_headers(gateway: Gateway) -> None:
    with gateway.http() as http:
        r = http.get("/v1/models", headers={"x-request-id": "trace-42"})
        unknown = http.get("/v1/nothing-here")
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "trace-42"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "same-origin"
    assert r.headers["content-type"] == "application/json"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_url"
    assert unknown.headers["x-request-id"].startswith("req_")


def test_admin_still_runs_through_djangos_middleware(gateway: Gateway, settings) -> None:  # type: ignore[no-untyped-def]
    # No collectstatic in tests: plain static storage instead of the manifest.
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    with gateway.http() as http:
        login = http.get("/admin/login/")
    assert login.status_code == 200
    assert "csrftoken" in login.cookies  # CsrfViewMiddleware ran
    assert login.headers["x-request-id"].startswith("req_")


def test_a_host_outside_allowed_hosts_is_a_protocol_error(gateway: Gateway) -> None:
    with gateway.http() as http:
        r = http.get("/v1/models", headers={"host": "evil.example"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_host"


def test_a_body_over_the_limit_is_413_and_nothing_is_stored(gateway: Gateway, settings) -> None:  # type: ignore[no-untyped-def]
    from responses_api.models import Response

    settings.GATEWAY_MAX_REQUEST_BYTES = 2000
    big = {"model": MODEL, "input": "x" * 5000}
    with gateway.http() as http:
        declared = http.post("/v1/responses", json=big)

        def chunked():  # no Content-Length: the limit is enforced while reading
            yield b'{"model": "' + MODEL.encode() + b'", "input": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        streamed = http.post("/v1/responses", content=chunked(), headers={"content-type": "application/json"})
    for r in (declared, streamed):
        assert r.status_code == 413 and r.headers["x-request-id"].startswith("req_")
        error = r.json()["error"]
        assert error["code"] == "request_too_large" and "2000 bytes" in error["message"]
    assert not Response.objects.exists()


def test_a_client_gone_before_its_body_arrived_costs_nothing(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Response

    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + gateway.key.encode() + b"\r\nContent-Length: 1000\r\n\r\n{\"model\""
        )
    scripted.enqueue(MODEL, Reply(text="still serving"))
    with gateway.http() as http:
        assert http.post("/v1/responses", json={"model": MODEL, "input": "hi"}).status_code == 200
    assert Response.objects.count() == 1
    assert len(scripted.requests) == 1


@pytest.mark.django_db(transaction=True)
async def test_lifespan_shutdown_closes_the_upstream_session_and_the_async_pool() -> None:
    from project.asgi import application
    from responses_api import db
    from responses_api.upstreams.http import get_session

    session = get_session()
    if db.native_async():
        assert await db.fetch_one("SELECT 1", {}) == (1,)
        pool = db._pools[asyncio.get_running_loop()]
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict] = []

    async def receive() -> dict:
        return inbox.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    await asyncio.wait_for(application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send), 5)
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    assert session.closed
    if db.native_async():
        assert pool.closed and asyncio.get_running_loop() not in db._pools
