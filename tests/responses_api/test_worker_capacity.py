"""Many background runs in one worker process (Celery's threads pool waiting on the process's
one event loop): they run at once, a kill -9 of the process ends every one `worker_lost` and
runs no tool call twice, SIGTERM drains (nothing new claimed, the running ones end or are ended
`server_shutting_down`), and the gateway's own time limit ends a run `time_limit_exceeded`.
Real processes: a Celery worker, Redis, PostgreSQL, the scripted upstream."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.harness import MODEL, CeleryWorker, Gateway, call
from tests.support.stream_validator import parse_sse, validate_events
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.skipif(
    "os.environ.get('GATEWAY_TEST_DB') == 'sqlite'", reason="needs Celery worker processes and Redis"
)

TERMINAL = {"completed", "failed", "cancelled", "incomplete"}


def statuses(gateway: Gateway, ids: list[str]) -> dict[str, dict]:
    with gateway.http() as http:
        return {rid: http.get(f"/v1/responses/{rid}").json() for rid in ids}


def wait_for(gateway: Gateway, ids: list[str], until: set[str], timeout: float) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        bodies = statuses(gateway, ids)
        if all(b["status"] in until for b in bodies.values()):
            return bodies
        if time.monotonic() > deadline:
            waiting = {rid: b["status"] for rid, b in bodies.items() if b["status"] not in until}
            raise AssertionError(f"{len(waiting)} responses not yet {until}: {waiting}")
        time.sleep(0.25)


def create_many(gateway: Gateway, n: int, **kwargs) -> list[str]:
    client = gateway.openai()

    def create(i: int) -> str:
        return client.responses.create(model=MODEL, input=f"run {i}", background=True, **kwargs).id

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(create, range(n)))


def child_processes(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def test_one_worker_process_runs_fifty_background_responses_at_once(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    # Each answer streams for about 4 s; one after another they would take 200 s.
    scripted.enqueue(MODEL, *[Reply(text="tick " * 8, chunk_chars=5, interval=0.5) for _ in range(50)])
    worker = CeleryWorker(concurrency=50)
    try:
        worker.wait_ready()
        assert child_processes(worker.process.pid) == [], "one process, no prefork children"
        started = time.monotonic()
        ids = create_many(gateway, 50)
        bodies = wait_for(gateway, ids, TERMINAL, timeout=120)
        took = time.monotonic() - started
        assert child_processes(worker.process.pid) == []
    finally:
        worker.stop()
    assert {b["status"] for b in bodies.values()} == {"completed"}
    assert all(b["output"][0]["content"][0]["text"] == "tick " * 8 for b in bodies.values())
    assert took < 100, f"50 runs of 4 s took {took:.0f} s: they did not run at once"
    # they overlapped: the last run began before the first one ended
    assert max(b["created_at"] for b in bodies.values()) < min(b["completed_at"] for b in bodies.values())


def test_kill_9_of_a_worker_holding_many_runs(tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook) -> None:
    from project.celery import app
    from responses_api.models import ResponseItem
    from tests.support.webhook import Route

    n = 20
    tools_env("slow_tool", "/slow", timeout=30)
    webhook.routes["/slow"] = Route(delay=4.0, body={"done": True})
    scripted.enqueue(MODEL, *[Reply(tool_calls=[call("slow_tool", {"city": f"c{i}"}, f"k{i}")]) for i in range(n)])
    doomed = CeleryWorker(concurrency=n)
    survivor: CeleryWorker | None = None
    try:
        doomed.wait_ready()
        assert child_processes(doomed.process.pid) == []
        ids = create_many(gateway, n, tools=[{"type": "function", "name": "slow_tool"}])
        deadline = time.monotonic() + 60
        while len(webhook.calls_to("/slow")) < n:
            assert time.monotonic() < deadline, (
                f"{len(webhook.calls_to('/slow'))} of {n} tools called; the runs: "
                f"{[(b['status'], b.get('error')) for b in statuses(gateway, ids).values()]}"
            )
            time.sleep(0.05)
        doomed.kill()  # SIGKILL: the one process, every run in it mid tool call
        survivor = CeleryWorker(beat=True)
        survivor.wait_ready()
        bodies = wait_for(gateway, ids, TERMINAL, timeout=60)
        assert {b["status"] for b in bodies.values()} == {"failed"}
        assert {b["error"]["code"] for b in bodies.values()} == {"worker_lost"}
        # The broker delivers the killed worker's tasks again (after the visibility timeout; here
        # at once): each finds its response taken and ends, nothing run again.
        for rid in ids:
            app.send_task("responses_api.run_response", args=[rid])
        time.sleep(3)
        assert {b["status"] for b in statuses(gateway, ids).values()} == {"failed"}
        cities = [c.json["city"] for c in webhook.calls_to("/slow")]
        assert sorted(cities) == sorted(f"c{i}" for i in range(n)), "every tool call once, none twice"
        assert len(scripted.model_calls) == n
        for rid in ids:
            items = ResponseItem.objects.filter(response_id=rid)
            assert items.count() == items.values("item_id").distinct().count()
        events = parse_sse(_read_log(gateway, ids[0]))
        assert events[-1]["type"] == "response.failed"
        validate_events(events, background=True)
    finally:
        if survivor is not None:
            survivor.stop()
        doomed.kill()


def _read_log(gateway: Gateway, response_id: str) -> bytes:
    with gateway.http() as http, http.stream("GET", f"/v1/responses/{response_id}", params={"stream": "true"}) as r:
        assert r.status_code == 200
        return r.read()


def test_sigterm_drains_the_runs_and_claims_no_new_one(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    drain = 10.0  # the short runs need far less, even on a busy machine
    short = [Reply(text="short " * 4, chunk_chars=6, interval=0.5) for _ in range(5)]  # about 2 s
    long = [Reply(text="long " * 120, chunk_chars=5, interval=0.5) for _ in range(5)]  # about 60 s
    scripted.enqueue(MODEL, *long)
    worker = CeleryWorker(concurrency=10, extra_env={"GATEWAY_WORKER_DRAIN_SECONDS": str(drain)})
    later: CeleryWorker | None = None
    try:
        worker.wait_ready()
        long_ids = create_many(gateway, 5)
        wait_for(gateway, long_ids, {"in_progress"}, timeout=30)
        while len(scripted.model_calls) < 5:  # every long run is streaming
            time.sleep(0.05)
        scripted.enqueue(MODEL, *short)
        short_ids = create_many(gateway, 5)
        wait_for(gateway, short_ids, {"in_progress", "completed"}, timeout=30)
        worker.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        scripted.enqueue(MODEL, *[Reply(text="after the deploy") for _ in range(3)])
        new_ids = create_many(gateway, 3)
        worker.process.wait(timeout=drain + 40)  # it exits by itself once its runs ended
        bodies = statuses(gateway, long_ids + short_ids + new_ids)
        assert [bodies[rid]["status"] for rid in short_ids] == ["completed"] * 5
        assert [(bodies[rid]["status"], bodies[rid]["error"]["code"]) for rid in long_ids] == [
            ("failed", "server_shutting_down")
        ] * 5
        assert [bodies[rid]["status"] for rid in new_ids] == ["queued"] * 3, "the draining worker claimed none"
        events = parse_sse(_read_log(gateway, long_ids[0]))
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        validate_events(events, background=True)
        later = CeleryWorker()  # the next worker takes what the draining one left in the queue
        later.wait_ready()
        done = wait_for(gateway, new_ids, TERMINAL, timeout=60)
        assert {b["status"] for b in done.values()} == {"completed"}
    finally:
        if later is not None:
            later.stop()
        worker.kill()


def test_a_run_past_its_time_limit_ends_failed(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="slow " * 60, chunk_chars=5, interval=0.5))  # about 30 s
    worker = CeleryWorker(extra_env={"GATEWAY_BACKGROUND_MAX_SECONDS": "2"})
    try:
        worker.wait_ready()
        (rid,) = create_many(gateway, 1)
        body = wait_for(gateway, [rid], TERMINAL, timeout=25)[rid]
    finally:
        worker.stop()
    assert body["status"] == "failed" and body["error"]["code"] == "time_limit_exceeded", body
    assert "slow" in body["output"][0]["content"][0]["text"]  # what it had said is kept
    events = parse_sse(_read_log(gateway, rid))
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "time_limit_exceeded"
    validate_events(events, background=True)


def test_a_worker_process_has_a_redis_connection_for_every_run(settings) -> None:
    """redis-py's pools default to 100 connections, and a 101st command at once fails: with
    hundreds of runs starting together (bench/background_capacity.py, 500 runs) a third of them
    failed to start."""
    import asyncio

    from responses_api.store import redis_clients

    async def sizes() -> list[int]:
        return [
            redis_clients.async_client(
                settings.REDIS_URL or "redis://127.0.0.1:1/0", use
            ).connection_pool.max_connections
            for use in (redis_clients.STREAMS, redis_clients.COMMANDS)
        ]

    assert min(asyncio.run(sizes())) >= settings.GATEWAY_WORKER_CONCURRENCY
