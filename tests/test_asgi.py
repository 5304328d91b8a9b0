"""The ASGI entry: /v1 served by its views directly, with what the API needs from Django's chain;
everything else through Django's full handler."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from tests.support.harness import MODEL, Gateway
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


def test_admin_still_runs_through_djangos_middleware(gateway: Gateway, settings) -> None:
    # No collectstatic in tests: plain static storage instead of the manifest.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
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


def test_a_body_over_the_limit_is_413_and_nothing_is_stored(gateway: Gateway, settings) -> None:
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
            b"Authorization: Bearer " + gateway.key.encode() + b'\r\nContent-Length: 1000\r\n\r\n{"model"'
        )
    scripted.enqueue(MODEL, Reply(text="still serving"))
    with gateway.http() as http:
        assert http.post("/v1/responses", json={"model": MODEL, "input": "hi"}).status_code == 200
    assert Response.objects.count() == 1
    # One model call (a process's first request may also look up the model's context window).
    assert [r.path for r in scripted.requests if r.path != "/v1/models"] == ["/v1/chat/completions"]


@pytest.mark.django_db(transaction=True)
async def test_lifespan_shutdown_closes_the_upstream_session_and_the_async_pool() -> None:
    from project.asgi import application
    from responses_api.store import db
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


# What settings.MIDDLEWARE does, as the API lane (responses_api/api/asgi.py) sees it: applied inline,
# or not wanted by a bearer-key JSON API. A middleware added to the settings fails this test
# until the lane decides which it is, so the two cannot drift apart silently.
APPLIED_BY_THE_API_LANE = {
    "responses_api.api.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
}
NOT_WANTED_BY_THE_API = {
    "responses_api.api.static.AsyncStaticFilesMiddleware",  # static files are not under /v1
    "django.contrib.sessions.middleware.SessionMiddleware",  # no cookies: bearer keys
    "django.middleware.csrf.CsrfViewMiddleware",  # the API views are CSRF-exempt
    "django.contrib.auth.middleware.AuthenticationMiddleware",  # no Django users: API keys
    "django.contrib.messages.middleware.MessageMiddleware",  # no templates
}


def test_every_middleware_is_applied_by_the_api_lane_or_not_wanted_by_the_api(settings) -> None:
    assert set(settings.MIDDLEWARE) == APPLIED_BY_THE_API_LANE | NOT_WANTED_BY_THE_API


async def _call(app, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[bytes, bytes], bytes]:
    inbox = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        await asyncio.sleep(3600)  # no disconnect while the answer is written
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    await asyncio.wait_for(app(scope, receive, send), 10)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    answered = dict(start["headers"])
    if answered.get(b"x-request-id", b"").startswith(b"req_"):
        answered[b"x-request-id"] = b"req_(generated)"
    return start["status"], answered, body


@pytest.mark.django_db(transaction=True)
async def test_the_api_lane_answers_with_the_headers_djangos_full_chain_gives(settings) -> None:
    from asgiref.sync import sync_to_async

    from project.asgi import application
    from responses_api.store.services import api_key_create

    settings.ALLOWED_HOSTS = ["testserver"]
    _, raw = await sync_to_async(api_key_create)(tenant_name="drift", name="drift")
    auth = [(b"authorization", f"Bearer {raw}".encode()), (b"x-request-id", b"drift-1")]
    for path, headers in (("/v1/models", auth), ("/v1/models", []), ("/v1/no-such-endpoint", auth)):
        lane = await _call(application, path, headers)
        full = await _call(application.django, path, headers)  # Django's handler, every middleware
        assert lane[0] == full[0], path
        assert lane[2] == full[2], path
        assert lane[1] == full[1], (path, set(lane[1].items()) ^ set(full[1].items()))


def test_the_open_file_limit_is_raised_to_the_hard_limit(settings) -> None:
    """Two sockets per stream: a soft limit of 1024, common in containers, would refuse
    connections at about 500 streams. Below what the upstream pool needs, a warning says so."""
    import logging
    import resource

    from project.asgi import _raise_open_file_limit

    class Warnings(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    warnings = Warnings()
    logger = logging.getLogger("gateway")
    logger.addHandler(warnings)
    level = logger.level
    logger.setLevel(logging.WARNING)  # whatever LOG_LEVEL the run has
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Lowered only to a little above what this process (and its server threads) has open.
    lowered = len(os.listdir("/proc/self/fd")) + 512
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS = 64
        _raise_open_file_limit()
        raised = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raised == (65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)) > lowered
        assert not [m for m in warnings.messages if "open-file limit" in m]

        settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS = raised  # two sockets each: more than the limit
        _raise_open_file_limit()
        assert [m for m in warnings.messages if "open-file limit" in m]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        logger.setLevel(level)
        logger.removeHandler(warnings)
