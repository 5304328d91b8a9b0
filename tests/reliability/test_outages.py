"""PostgreSQL and Redis stopped and started again under a deployed gateway (real processes):
503 with Retry-After within a bounded time, never a 500, no response left open, and
recovery by itself."""

from __future__ import annotations

import concurrent.futures
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.deployment import Deployment
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.stream_validator import validate_response_object
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - the embedded suite on a machine without servers: nothing to stop
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)

POOL_TIMEOUT = 2.0  # DB_POOL_TIMEOUT for this deployment: the bound on a request's wait
BOUND = POOL_TIMEOUT + 3.0  # plus connect and scheduling slack on a loaded 2-core machine


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        server.set_default("m", Reply(echo=True))
        yield server


@pytest.fixture(scope="module")
def deployment(upstream: ScriptedUpstream) -> Iterator[Deployment]:
    base = Path(tempfile.mkdtemp(prefix="gateway-outage-"))
    deployed = Deployment(
        base,
        upstream.base_url,
        env={
            "DB_POOL_TIMEOUT": str(POOL_TIMEOUT),
            "DB_RECONNECT_TIMEOUT": "2",
            # The reaper's limit for a row no worker took (its task lost with the broker): longer
            # than a worker takes to reconnect to a restarted broker on a loaded machine, or the
            # reaper fails rows whose tasks are there and about to run (CI: one of six creates made
            # right after Redis returned ended `queue_timeout` at 3 s). Reaped every 2 s here.
            "GATEWAY_QUEUED_MAX_SECONDS": "15",
            "GATEWAY_REAPER_INTERVAL_SECONDS": "2",
            # The reaper's backstop for a foreground row its own request could not end (see the
            # assertion on open rows): short here, an hour by default.
            "GATEWAY_FOREGROUND_MAX_SECONDS": "15",
        },
    )
    try:
        deployed.start_web(workers=2)
        deployed.start_worker()
        yield deployed
    finally:
        deployed.stop()
        shutil.rmtree(base, ignore_errors=True)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def settled(client: httpx.Client, response_id: str) -> dict | None:
    body = client.get(f"/v1/responses/{response_id}").json()
    return body if body.get("status") not in ("queued", "in_progress") else None


def test_postgres_restarted_under_load(deployment: Deployment) -> None:
    outcomes: list[tuple[int, float, str | None, str]] = []
    stop = threading.Event()

    def load(worker: int) -> None:
        with deployment.client(timeout=30) as client:
            n = 0
            while not stop.is_set():
                n += 1
                body = {"model": "m", "input": f"load {worker}-{n}", "stream": n % 3 == 0}
                started = time.monotonic()
                try:
                    resp = client.post("/v1/responses", json=body)
                    text = resp.text
                except httpx.HTTPError as exc:
                    outcomes.append((-1, time.monotonic() - started, None, repr(exc)))
                    continue
                outcomes.append((resp.status_code, time.monotonic() - started, resp.headers.get("retry-after"), text))

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(load, i) for i in range(6)]
        time.sleep(1.0)
        deployment.postgres.halt()
        time.sleep(4.0)
        deployment.postgres.resume()
        time.sleep(1.0)
        recovered_at = time.monotonic()
        # Recovery by itself: requests succeed again soon after the database is back.
        with deployment.client() as probe:
            wait_for(
                lambda: probe.post("/v1/responses", json={"model": "m", "input": "back?"}).status_code == 200,
                15,
                "the gateway to answer 200 again",
            )
        recovery = time.monotonic() - recovered_at
        stop.set()
        for future in futures:
            future.result()

    statuses = {code for code, *_ in outcomes}
    assert statuses <= {200, 503}, [(c, t[:200]) for c, _, _, t in outcomes if c not in (200, 503)]
    unavailable = [o for o in outcomes if o[0] == 503]
    assert unavailable, "the outage was not seen"
    assert all(retry == "2" for _, _, retry, _ in unavailable)
    assert all('"service_unavailable"' in text for *_, text in unavailable)
    assert max(elapsed for _, elapsed, _, _ in unavailable) < BOUND
    assert recovery < 15
    # A stream that began before the outage and could not be stored ended, with a terminal event.
    for code, _, _, text in outcomes:
        if code == 200 and text.startswith("event:"):
            assert "event: response.completed" in text or "event: response.failed" in text, text[-300:]
    # Nothing is left open: a stream whose end could not be stored during the outage is
    # stored failed once the database is back (by its own request, in the background; for a
    # rare row created at the very moment of the halt, by the reaper's foreground backstop).
    open_rows = (
        "SELECT id, status, created_at, now() FROM responses_api_response "
        "WHERE status IN ('queued', 'in_progress') AND NOT on_worker"
    )
    try:
        wait_for(lambda: deployment.rows(open_rows) == [], 45, "no open rows")
    except AssertionError:
        ids = [row[0] for row in deployment.rows(open_rows)]
        log = (deployment.base_dir / "web.log").read_text(errors="replace").splitlines()
        mentions = [
            line
            for line in log
            if any(i in line for i in ids) or ("psycopg.pool" not in line and "gateway.outages" not in line)
        ]
        raise AssertionError(f"open rows: {deployment.rows(open_rows)}\n" + "\n".join(mentions)) from None


def test_redis_stopped_and_restarted_around_background_creates(deployment: Deployment) -> None:
    with deployment.client() as client:
        # The module's previous test ends a PostgreSQL outage; a pooled connection it broke may
        # still be replaced on first use (a 503 with Retry-After, as designed): retry as a client would.
        deadline = time.monotonic() + 15
        while True:
            warm = client.post("/v1/responses", json={"model": "m", "input": "warm", "background": True})
            if warm.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(float(warm.headers.get("retry-after", "1")))
        assert warm.status_code == 200, warm.text
        wait_for(lambda: settled(client, warm.json()["id"]), 30, "the warm-up run")

        deployment.redis.halt()
        try:
            started = time.monotonic()
            refused = client.post("/v1/responses", json={"model": "m", "input": "during", "background": True})
            assert time.monotonic() - started < BOUND
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "2"
            assert refused.json()["error"]["code"] == "service_unavailable"
            # No orphan: the row the create had written is failed with the reason, not queued.
            rows = deployment.rows(
                "SELECT status, error->>'code' FROM responses_api_response "
                "WHERE background AND created_at > now() - interval '1 minute' "
                "AND status IN ('queued', 'failed')"
            )
            assert ("queued", None) not in rows and ("failed", "service_unavailable") in rows
            # Foreground requests do not need Redis.
            plain = client.post("/v1/responses", json={"model": "m", "input": "plain"})
            assert plain.status_code == 200, plain.text
        finally:
            deployment.redis.resume()

        # After Redis returns, the very first background creates work in every web process
        # and every worker child (pooled connections to the old server are replaced).
        ids = []
        for i in range(6):
            resp = client.post("/v1/responses", json={"model": "m", "input": f"after {i}", "background": True})
            assert resp.status_code == 200, resp.text
            ids.append(resp.json()["id"])
        for response_id in ids:
            final = wait_for(lambda rid=response_id: settled(client, rid), 45, f"{response_id} to finish")
            assert final["status"] == "completed", (final.get("error"), deployment.log("worker.log"))


def test_a_queued_response_whose_task_was_lost_is_failed_by_the_reaper(deployment: Deployment) -> None:
    """A Redis restart without persistence loses the broker's queue: the reaper ends the row."""
    with deployment.client() as client:
        deployment.stop_workers()
        try:
            resp = client.post("/v1/responses", json={"model": "m", "input": "lost", "background": True})
            assert resp.status_code == 200 and resp.json()["status"] == "queued"
            deployment.redis.halt()
            deployment.redis.resume()  # no persistence: the task is gone
        finally:
            deployment.start_worker()
        final = wait_for(lambda: settled(client, resp.json()["id"]), 90, "the reaper")
        assert final["status"] == "failed" and final["error"]["code"] == "queue_timeout", final


def _sse_events(lines: Iterator[str]) -> Iterator[dict]:
    import json

    for line in lines:
        if line.startswith("data: {"):
            yield json.loads(line[6:])


def test_a_redis_outage_under_a_background_stream_decides_nothing(
    deployment: Deployment, upstream: ScriptedUpstream
) -> None:
    """On 75d8303 (2 runs of 2): the row ended `cancelled` with no output, the log stopped with no
    terminal event, a resuming reader waited forever, and the worker died in kombu. Now the run
    goes on (its events wait for the log), the resuming reader gets the rest and the end, and
    the worker takes new work."""
    text = "word " * 50  # 50 chunks, one every 0.2 s: a 10-second answer
    upstream.enqueue("m", Reply(text=text, chunk_chars=5, interval=0.2))
    with deployment.client(timeout=60) as client:
        seen: list[dict] = []
        with client.stream(
            "POST", "/v1/responses", json={"model": "m", "input": "long", "background": True, "stream": True}
        ) as stream:
            for event in _sse_events(stream.iter_lines()):
                seen.append(event)
                if event["type"] == "response.output_text.delta" and len(seen) > 8:
                    break  # this reader leaves; the work goes on
        response_id, resume_after = seen[0]["response"]["id"], seen[-1]["sequence_number"]

        deployment.redis.halt()
        time.sleep(5)
        deployment.redis.resume()

        started = time.monotonic()
        with client.stream(
            "GET", f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": resume_after}
        ) as stream:
            rest = list(_sse_events(stream.iter_lines()))
        assert time.monotonic() - started < 40
        assert rest and rest[-1]["type"] == "response.completed", [e["type"] for e in rest[-3:]]
        assert all(e["sequence_number"] > resume_after for e in rest)
        final = rest[-1]["response"]
        assert final["output"][0]["content"][0]["text"] == text
        # The test's Redis keeps nothing across a restart: events appended between this reader's
        # last one and the halt are gone, so the rest may start after a gap; its end is checked.
        validate_response_object(final)
        stored = wait_for(lambda: settled(client, response_id), 30, "the stored end")
        assert stored["status"] == "completed" and stored["output"][0]["content"][0]["text"] == text

        # The worker survived the broker's outage: it takes new work.
        after = client.post("/v1/responses", json={"model": "m", "input": "after the outage", "background": True})
        assert after.status_code == 200, after.text
        try:
            done = wait_for(lambda: settled(client, after.json()["id"]), 45, "a background run after the outage")
        except AssertionError:
            log = (deployment.base_dir / "worker.log").read_text(errors="replace")
            raise AssertionError("no background run after the outage; the worker's log:\n" + log[-6000:]) from None
        assert done["status"] == "completed", done
