"""SIGTERM (a rolling deploy's stop) drains a web process instead of cutting its streams:
/readyz and new requests answer a retryable 503, an idle WebSocket is told to reconnect, a
stream that ends within GATEWAY_DRAIN_SECONDS completes, one that does not ends `failed`
(`server_shutting_down`, stored so), and then the process exits. Real processes: uvicorn,
PostgreSQL, Redis, the scripted upstream."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from tests.reliability.deployment import Deployment, temporary_deployment
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.stream_validator import validate_events
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - the embedded suite on a machine without servers
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)

DRAIN = 3.0


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture
def deployment(upstream: ScriptedUpstream) -> Iterator[Deployment]:
    env = {"GATEWAY_DRAIN_SECONDS": str(DRAIN)}
    with temporary_deployment(upstream.base_url, prefix="gateway-drain-", env=env) as deployed:
        deployed.start_web(workers=1)
        yield deployed


def stream_in_background(deployment: Deployment, text: str, events: list[dict]) -> threading.Thread:
    def run() -> None:
        with (
            deployment.client(timeout=60) as client,
            client.stream("POST", "/v1/responses", json={"model": "m", "input": text, "stream": True}) as answer,
        ):
            for line in answer.iter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_sigterm_drains_then_exits(deployment: Deployment, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(
        "m",
        Reply(text="long " * 60, chunk_chars=5, interval=0.2),  # 12 s: longer than the drain
        Reply(text="short " * 5, chunk_chars=6, interval=0.2),  # 1 s: ends within it
    )
    long_events: list[dict] = []
    short_events: list[dict] = []
    long_stream = stream_in_background(deployment, "long", long_events)
    wait_until(lambda: any(e["type"] == "response.output_text.delta" for e in long_events), 20, "the long stream")
    short_stream = stream_in_background(deployment, "short", short_events)
    wait_until(lambda: any(e["type"] == "response.output_text.delta" for e in short_events), 20, "the short stream")
    url = deployment.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {deployment.key}"}, open_timeout=10) as idle:
        (web,) = deployment.processes
        web.send_signal(signal.SIGTERM)
        time.sleep(0.3)

        # A load balancer sees it go, and a new request is told to retry elsewhere.
        assert httpx.get(f"{deployment.url}/readyz", timeout=5).status_code == 503
        with deployment.client(timeout=10) as client:
            refused = client.post("/v1/responses", json={"model": "m", "input": "new"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "server_shutting_down"
        assert refused.headers["retry-after"] == "1"

        # The idle WebSocket client is told to reconnect.
        frame = json.loads(idle.recv(timeout=10))
        assert frame["type"] == "error" and frame["error"]["code"] == "websocket_connection_limit_reached"

    short_stream.join(15)
    assert short_events[-1]["type"] == "response.completed"
    validate_events(short_events)
    long_stream.join(DRAIN + 15)
    assert [e["type"] for e in long_events[-2:]] == ["error", "response.failed"]
    validate_events(long_events)
    failed = long_events[-1]["response"]
    assert failed["error"]["code"] == "server_shutting_down"
    web.wait(DRAIN + 15)  # then the process exits by itself
    # A readiness probe's 503 during a drain is expected: not an ERROR of django.request.
    assert "/readyz" not in deployment.log("web.log"), deployment.log("web.log")
    rows = deployment.rows("SELECT status, error->>'code' FROM responses_api_response ORDER BY created_at")
    assert rows == [("failed", "server_shutting_down"), ("completed", None)]
