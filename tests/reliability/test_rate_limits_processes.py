"""Rate limits and budgets with two uvicorn worker processes on one PostgreSQL and one Redis:
the counters are shared, so concurrent load across both processes never gets more than the
limit."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.deployment import Deployment
from tests.reliability.test_metrics import value
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.webhook import Route, WebhookServer

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)


@pytest.fixture(scope="module")
def deployed() -> Iterator[tuple[Deployment, ScriptedUpstream, Path]]:
    base = Path(tempfile.mkdtemp(prefix="gateway-limits-"))
    multiproc = base / "prometheus"
    multiproc.mkdir()
    with ScriptedUpstream() as upstream:
        deployment = Deployment(
            base,
            upstream.base_url,
            env={"PROMETHEUS_MULTIPROC_DIR": str(multiproc), "GATEWAY_METRICS_TOKEN": "scrape-token-limits"},
        )
        try:
            # Set before the processes start, so their key caches hold the limits from the start.
            deployment.rows("UPDATE responses_api_apikey SET requests_per_minute = 20 RETURNING id")
            deployment.start_web(workers=2)
            yield deployment, upstream, multiproc
        finally:
            deployment.stop()
            shutil.rmtree(base, ignore_errors=True)


def _fire(
    deployment: Deployment, n: int, body: dict, streams: list[bytes] | None = None, key: str | None = None
) -> list[int]:
    """n requests at once (with `key`, else the deployment's); the bodies of answered streams go
    to `streams`."""
    streams = [] if streams is None else streams
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        with deployment.client() as client:  # a connection each: the kernel spreads them over both workers
            if key is not None:
                client.headers["Authorization"] = f"Bearer {key}"
            if body.get("stream"):
                with client.stream("POST", "/v1/responses", json=body) as response:
                    raw = response.read()
                    status = response.status_code
                if status == 200:
                    with lock:
                        streams.append(raw)
            else:
                status = client.post("/v1/responses", json=body).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def test_requests_per_minute_hold_across_two_processes(deployed) -> None:
    deployment, upstream, multiproc = deployed
    upstream.set_default("m", Reply(text="ok"))
    started = time.monotonic()
    statuses = _fire(deployment, 60, {"model": "m", "input": "hi"})
    elapsed = time.monotonic() - started
    assert set(statuses) <= {200, 429}, statuses
    refill = int(elapsed * 20 / 60)  # the bucket refills at 20 a minute while the burst runs
    assert 20 <= statuses.count(200) <= 20 + refill, (statuses.count(200), elapsed)
    upstream_calls = len([r for r in upstream.requests if r.path == "/v1/chat/completions"])
    assert upstream_calls == statuses.count(200)
    text = httpx.get(f"{deployment.url}/metrics", headers={"Authorization": "Bearer scrape-token-limits"}).text
    pids = {p.name.rsplit("_", 1)[-1] for p in multiproc.iterdir() if p.name.startswith("counter_")}
    assert len(pids) == 2, "both web processes took requests"
    assert value(text, "gateway_rate_limited_total", limit="requests per minute") == statuses.count(429), text


def test_concurrent_streams_hold_across_two_processes(deployed) -> None:
    deployment, upstream, _ = deployed
    deployment.rows("UPDATE responses_api_apikey SET requests_per_minute = NULL RETURNING id")
    deployment.rows("UPDATE responses_api_tenant SET max_concurrent_requests = 4 RETURNING id")
    time.sleep(5.5)  # GATEWAY_CACHE_SECONDS: both processes read the key again
    upstream.set_default("m", Reply(text="slow " * 30, chunk_chars=5, interval=0.1))  # about 3 s each
    streams: list[bytes] = []
    statuses = _fire(deployment, 12, {"model": "m", "input": "hi", "stream": True}, streams)
    assert sorted(statuses) == [200] * 4 + [429] * 8, statuses
    for raw in streams:
        validate_sse(raw)
    upstream.set_default("m", Reply(text="ok"))
    with deployment.client() as client:  # every lease was given back
        assert [client.post("/v1/responses", json={"model": "m", "input": "x"}).status_code for _ in range(4)] == [
            200
        ] * 4


@pytest.fixture(scope="module")
def alerts(deployed) -> Iterator[WebhookServer]:
    """A webhook receiver on loopback for budget alerts, and the Celery worker that sends them."""
    deployment, _, _ = deployed
    server = WebhookServer().start()
    server.routes["/alerts"] = Route(status=200)
    deployment.rows(
        "INSERT INTO responses_api_alertwebhook (name, url, secret_encrypted, enabled, config_managed, created_at) "
        "VALUES ('ops', %s, '', true, '[]', now()) RETURNING id",
        server.url + "/alerts",
    )
    deployment.start_worker()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("scope", ["tenant", "key"])
def test_a_budget_holds_exactly_across_two_processes(deployed, alerts: WebhookServer, scope: str) -> None:
    """A tenant's budget and a key's (the same counters, another scope) under a burst spread over
    both processes: when each request reserves what it then spends, exactly the budget is spent
    (1.0x), never one request more, and every refusal is a 429 budget_exceeded. Its 80% and 100%
    alerts reach the webhook once each, whichever process settled the crossing request."""
    from responses_api.protocol.request import parse_create_request
    from responses_api.protocol.tokens import estimate_request

    deployment, upstream, _ = deployed
    tenant = f"budget-{scope}"
    key = deployment.manage("create_api_key", f"{scope}-budgeted", "--tenant", tenant).strip().splitlines()[-1]
    body = {"model": "m", "input": "How much may this key spend?", "max_output_tokens": 40}
    req = parse_create_request(body)
    reserve = estimate_request(req.input_items, req.instructions, []) + 40  # what admission reserves
    usage = {"prompt_tokens": reserve - 40, "completion_tokens": 40, "total_tokens": reserve}
    upstream.set_default("m", Reply(text="ok", usage=usage, delay=0.2))
    budget = 10 * reserve
    # Set before the key's first use: no process has it cached yet.
    if scope == "tenant":
        deployment.rows(
            "UPDATE responses_api_tenant SET budget_period = 'day', budget_tokens = %s WHERE name = %s RETURNING id",
            budget,
            tenant,
        )
    else:
        deployment.rows(
            "UPDATE responses_api_apikey SET budget_period = 'day', budget_tokens = %s, requests_per_minute = NULL "
            "WHERE name = %s RETURNING id",
            budget,
            f"{scope}-budgeted",
        )
    statuses = _fire(deployment, 30, body, key=key)
    assert sorted(statuses) == [200] * 10 + [429] * 20, statuses
    assert _fire(deployment, 1, body, key=key) == [429]  # spent: nothing more, from either process
    with deployment.client() as client:
        client.headers["Authorization"] = f"Bearer {key}"
        refused = client.post("/v1/responses", json=body).json()["error"]
        (limit,) = [e for e in client.get("/v1/usage").json()["limits"] if e["limit"] == "daily budget"]
    assert refused["code"] == "budget_exceeded"
    assert limit["used"] == budget == limit["value"]  # 1.0x
    (spent,) = deployment.rows(
        "SELECT SUM(r.input_tokens + r.output_tokens) FROM responses_api_response r "
        "JOIN responses_api_tenant t ON t.id = r.tenant_id WHERE t.name = %s",
        tenant,
    )
    assert spent[0] == budget
    deadline = time.monotonic() + 60
    while len(mine := [c.json for c in alerts.calls_to("/alerts") if c.json["tenant"]["name"] == tenant]) < 2:
        assert time.monotonic() < deadline, f"alerts for {tenant}: {mine}"
        time.sleep(0.2)
    time.sleep(1)  # a duplicate would come now
    mine = [c.json for c in alerts.calls_to("/alerts") if c.json["tenant"]["name"] == tenant]
    assert sorted(e["threshold_percent"] for e in mine) == [80, 100], mine
    assert {e["scope"] for e in mine} == {scope}
    assert [e["spent"]["tokens"] for e in sorted(mine, key=lambda e: e["threshold_percent"])][1] == budget
