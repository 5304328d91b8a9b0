"""A web process killed with open streams (kill -9: no drain, no clean-up) has its work reaped
in seconds by the process that is left: its rows end `failed` (`interrupted`) and its tenant's
concurrency slots come back. On 75d8303 the rows stayed `in_progress` and the slots taken for
GATEWAY_FOREGROUND_MAX_SECONDS (an hour). Real processes: two uvicorn processes, PostgreSQL,
Redis, the scripted upstream."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.deployment import Deployment, temporary_deployment
from tests.reliability.test_metrics import value
from tests.support.servers import _free_port, find_postgres_bindir, find_redis_server
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - the embedded suite on a machine without servers
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)

BEAT, LEASE = 1.0, 4.0


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


METRICS_TOKEN = "scrape-liveness-1234"


@pytest.fixture
def deployment(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[Deployment]:
    env = {
        "GATEWAY_PROCESS_HEARTBEAT_SECONDS": str(BEAT),
        "GATEWAY_LEASE_SECONDS": str(LEASE),
        "GATEWAY_CACHE_SECONDS": "0",
        # Both processes count into one directory, as a deployment's containers do.
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
        "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
    }
    with temporary_deployment(upstream.base_url, prefix="gateway-liveness-", env=env) as deployed:
        yield deployed


def test_a_killed_web_process_is_reaped_by_the_live_one(deployment: Deployment, upstream: ScriptedUpstream) -> None:
    deployment.rows("UPDATE responses_api_tenant SET max_concurrent_requests = 3 RETURNING id")
    doomed = deployment.start_web(workers=1)
    survivor_port = _free_port()
    deployment.start_web(workers=1, port=survivor_port)
    upstream.set_default("m", Reply(text="slow " * 200, chunk_chars=5, interval=0.2))  # 40 s

    started = threading.Barrier(4)
    seen: list[int] = []

    def hold_a_stream() -> None:
        try:
            with (
                deployment.client(timeout=60) as client,
                client.stream("POST", "/v1/responses", json={"model": "m", "input": "x", "stream": True}) as answer,
            ):
                lines = answer.iter_lines()
                seen.append(answer.status_code)
                for line in lines:
                    if "output_text.delta" in line:
                        break
                started.wait(20)
                for _ in lines:
                    pass
        except (httpx.HTTPError, threading.BrokenBarrierError):
            pass  # the process is killed under it

    threads = [threading.Thread(target=hold_a_stream, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    started.wait(30)  # three streams open on the doomed process: the tenant's three slots

    survivor = httpx.Client(
        base_url=f"http://127.0.0.1:{survivor_port}",
        headers={"Authorization": f"Bearer {deployment.key}"},
        timeout=30,
    )
    refused = survivor.post("/v1/responses", json={"model": "m", "input": "y", "max_output_tokens": 16})
    assert seen == [200, 200, 200], deployment.log("web.log")
    assert refused.status_code == 429, refused.text  # the slots are taken
    # Retry-After: when the first lease runs out if its process stopped (at most one lease).
    assert 1 <= int(refused.headers["retry-after"]) <= LEASE, refused.headers
    assert open_streams(survivor) == 3

    doomed.kill()  # SIGKILL: nothing of it runs again
    doomed.wait(10)
    killed_at = time.monotonic()

    def open_rows() -> list[tuple]:
        return deployment.rows("SELECT id FROM responses_api_response WHERE status = 'in_progress'")

    while open_rows():
        assert time.monotonic() - killed_at < 30, "the dead process's rows are still open"
        time.sleep(0.2)
    reaped_after = time.monotonic() - killed_at
    rows = deployment.rows("SELECT status, error->>'code' FROM responses_api_response")
    assert rows == [("failed", "interrupted")] * 3, rows
    # The dead process's live gauge left the sums with it (the sweep that failed its rows).
    assert open_streams(survivor) == 0

    upstream.set_default("m", Reply(text="ok"))
    while True:
        answer = survivor.post("/v1/responses", json={"model": "m", "input": "z", "max_output_tokens": 16})
        if answer.status_code == 200:
            break
        assert answer.status_code == 429, answer.text
        assert time.monotonic() - killed_at < 30, "the dead process's slots did not come back"
        time.sleep(0.2)
    slots_after = time.monotonic() - killed_at
    # The bounds the README states, at this test's beat and lease: 4 beats, one lease (+ slack).
    assert reaped_after < 4 * BEAT + 3 and slots_after < LEASE + 3, (reaped_after, slots_after)
    survivor.close()


def open_streams(client: httpx.Client) -> float:
    scrape = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scrape.status_code == 200, scrape.text
    return value(scrape.text, "gateway_open_streams")


def test_worker_runs_are_reaped_with_no_worker_and_no_beat(deployment: Deployment) -> None:
    """Celery beat schedules the worker runs' reaper on a worker: with both gone (here: never
    started), a background response nobody will run must still end, reaped by the web process's
    liveness beat. On e2dc33d it stayed `queued` for as long as nothing else reaped it."""
    deployment.env["GATEWAY_QUEUED_MAX_SECONDS"] = "2"
    deployment.start_web(workers=1)
    with deployment.client() as client:
        created = client.post("/v1/responses", json={"model": "m", "input": "x", "background": True})
        assert created.status_code == 200, created.text
        response_id = created.json()["id"]
        deadline = time.monotonic() + 20
        while (body := client.get(f"/v1/responses/{response_id}").json())["status"] == "queued":
            assert time.monotonic() < deadline, "the queued response was never reaped"
            time.sleep(0.2)
    assert body["status"] == "failed" and body["error"]["code"] == "queue_timeout", body
