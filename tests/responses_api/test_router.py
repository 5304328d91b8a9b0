"""The resilient router through the gateway: retries with backoff (and a 429's Retry-After),
cooldown of a failing target and its recovery, priorities, per-target concurrency, health in
the admin; for /v1/responses and the passed-through /v1/chat/completions."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


@pytest.fixture(autouse=True)
def _router(settings):
    from responses_api.engine import failover as router

    settings.GATEWAY_ROUTER_MAX_RETRIES = 2
    settings.GATEWAY_ROUTER_BACKOFF_SECONDS = 0.2
    settings.GATEWAY_ROUTER_BACKOFF_MAX_SECONDS = 0.4
    settings.GATEWAY_ROUTER_RETRY_BUDGET_SECONDS = 10.0
    settings.GATEWAY_ROUTER_COOLDOWN_FAILURES = 3
    settings.GATEWAY_ROUTER_COOLDOWN_SECONDS = 2.0
    router.reset()
    yield
    router.reset()


def two_targets(
    scripted: ScriptedUpstream, *, a: dict | None = None, b: dict | None = None, a_url: str | None = None
) -> None:
    """Route MODEL to target 'a' (upstream model "a") and 'b' (upstream model "b")."""
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    route = ModelRoute.objects.get(name=MODEL)
    route.targets.all().delete()
    pa = Provider.objects.create(name="prov-a", base_url=a_url or scripted.base_url)
    pb = Provider.objects.create(name="prov-b", base_url=scripted.base_url)
    RouteTarget.objects.create(route=route, provider=pa, upstream_model="a", **(a or {}))
    RouteTarget.objects.create(route=route, provider=pb, upstream_model="b", **(b or {}))
    routing.clear_cache()


def hits(scripted: ScriptedUpstream, model: str) -> int:
    return sum(1 for r in scripted.requests if r.path == "/v1/chat/completions" and r.body.get("model") == model)


def create(gateway: Gateway, **body: object) -> httpx.Response:
    with gateway.http() as client:
        return client.post("/v1/responses", json={"model": MODEL, "input": "hi", **body})


def test_a_failing_upstream_is_retried_with_backoff(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(status=503), Reply(status=502), Reply(text="third time lucky"))
    started = time.monotonic()
    reply = create(gateway)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][0]["content"][0]["text"] == "third time lucky"
    assert hits(scripted, MODEL) == 3
    assert time.monotonic() - started < 10  # two backoffs of at most 0.2 and 0.4 s (not seconds each)


def test_retries_stop_at_the_limit_and_the_last_error_is_answered(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default(MODEL, Reply(status=500, error_body={"error": {"message": "still broken"}}))
    reply = create(gateway)
    assert reply.status_code == 502 and "still broken" in reply.json()["error"]["message"]
    assert hits(scripted, MODEL) == 3  # the first try and GATEWAY_ROUTER_MAX_RETRIES


def test_a_client_error_is_not_retried(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(status=400, error_body={"error": {"message": "context too long"}}))
    reply = create(gateway)
    assert reply.status_code == 400 and hits(scripted, MODEL) == 1


def test_a_429_is_retried_after_its_retry_after(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(status=429, error_headers={"retry-after": "1"}), Reply(text="ok"))
    started = time.monotonic()
    reply = create(gateway)
    assert reply.status_code == 200 and hits(scripted, MODEL) == 2
    assert time.monotonic() - started >= 1.0


def test_the_retry_budget_bounds_the_wait(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    settings.GATEWAY_ROUTER_RETRY_BUDGET_SECONDS = 2.0
    scripted.enqueue(MODEL, Reply(status=429, error_headers={"retry-after": "30"}), Reply(text="ok"))
    started = time.monotonic()
    reply = create(gateway)
    assert reply.status_code == 429 and time.monotonic() - started < 15  # no 30 s wait: answered at once
    assert hits(scripted, MODEL) == 1


def test_a_failing_target_is_cooled_down_then_tried_again(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    two_targets(scripted)
    scripted.set_default("a", Reply(status=500))
    scripted.set_default("b", Reply(text="from b"))
    # Every request is answered (by b), whichever target it tried first. 'a' comes first in
    # half of them (weighted random), so count until it has failed GATEWAY_ROUTER_COOLDOWN_FAILURES
    # times: a fixed number of requests left it below that in ~2% of runs.
    for _ in range(60):
        assert create(gateway).status_code == 200
        if hits(scripted, "a") == 3:
            break
    assert hits(scripted, "a") == 3
    for _ in range(8):  # well within the 2 s cooldown
        assert create(gateway).status_code == 200
    assert hits(scripted, "a") == 3  # 'a' was cooled down and skipped
    scripted.set_default("a", Reply(text="from a"))  # 'a' recovers
    time.sleep(2.1)  # GATEWAY_ROUTER_COOLDOWN_SECONDS
    texts = {create(gateway).json()["output"][0]["content"][0]["text"] for _ in range(20)}
    assert texts == {"from a", "from b"}


def test_priorities_send_everything_to_the_first_group_while_it_is_healthy(
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    two_targets(scripted, a={"priority": 1, "weight": 5}, b={"priority": 0, "weight": 1})
    scripted.set_default("a", Reply(text="from a"))
    scripted.set_default("b", Reply(text="from b"))
    for _ in range(10):
        assert create(gateway).json()["output"][0]["content"][0]["text"] == "from b"
    scripted.set_default("b", Reply(status=503))
    assert create(gateway).json()["output"][0]["content"][0]["text"] == "from a"  # fell to the next group


def test_an_unreachable_target_falls_back_at_once(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # nothing listens once closed
    two_targets(scripted, a={"priority": 0}, b={"priority": 1}, a_url=dead)
    scripted.set_default("b", Reply(text="from b"))
    reply = create(gateway)
    assert reply.status_code == 200 and reply.json()["output"][0]["content"][0]["text"] == "from b"


def test_a_targets_concurrency_limit_sends_the_rest_elsewhere(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    two_targets(scripted, a={"priority": 0, "max_concurrent": 1}, b={"priority": 1, "max_concurrent": 1})
    scripted.set_default("a", Reply(text="slow a " * 20, chunk_chars=5, interval=0.05))
    scripted.set_default("b", Reply(text="slow b " * 20, chunk_chars=5, interval=0.05))
    statuses: list[tuple[int, str]] = []

    def stream() -> None:
        with (
            gateway.http() as client,
            client.stream(
                "POST",
                "/v1/responses",
                json={"model": MODEL, "input": "x", "stream": True},
            ) as response,
        ):
            body = response.read().decode()
            statuses.append((response.status_code, body))

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.2)  # in order: a, then b, then neither
    for t in threads:
        t.join()
    codes = sorted(code for code, _ in statuses)
    assert codes == [200, 200, 503], statuses
    busy = next(body for code, body in statuses if code == 503)
    assert "upstream_busy" in busy
    for code, body in statuses:
        if code == 200:
            validate_sse(body)
    assert hits(scripted, "a") == 1 and hits(scripted, "b") == 1
    assert create(gateway, stream=False).status_code == 200  # the slots were given back


def test_chat_completions_passthrough_uses_the_same_router(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(status=503), Reply(text="retried"))
    completion = gateway.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "retried" and hits(scripted, MODEL) == 2


def test_the_admin_shows_each_targets_health(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    admin_client,
    settings,
) -> None:
    from responses_api.models import ModelRoute

    settings.STORAGES = {
        **settings.STORAGES,  # as tests/admin/conftest.py: no collectstatic manifest
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    two_targets(scripted)
    scripted.set_default("a", Reply(status=500, error_body={"error": {"message": "disk on fire"}}))
    scripted.set_default("b", Reply(text="ok"))
    for _ in range(60):  # until 'a' (first in half of the requests) has failed enough to cool down
        create(gateway)
        if hits(scripted, "a") == 3:
            break
    route = ModelRoute.objects.get(name=MODEL)
    page = admin_client.get(f"/admin/responses_api/modelroute/{route.id}/change/").content.decode()
    # (The route's help text says "cooling down" too: the state is the bold one.)
    assert "<strong>cooling down</strong>" in page and "disk on fire" in page and "healthy" in page
