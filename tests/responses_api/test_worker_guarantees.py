"""Guarantees of a worker process holding many background runs (Celery's threads pool waiting on
the process's one event loop) that test_worker_capacity.py does not show: a tenant's concurrency
limit holds while one process runs many tenants' runs, and a cancel of a run stuck in a tool that
ignores cancellation ends it `cancelled`, uses none of the tool's later result, runs nothing twice
and frees its slot. Real processes: a Celery worker, Redis, PostgreSQL, the scripted upstream."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.responses_api.test_worker_capacity import TERMINAL, _read_log, statuses, wait_for
from tests.support.harness import MODEL, CeleryWorker, Gateway, call, make_key, make_route
from tests.support.stream_validator import parse_sse, validate_events
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.skipif(
    "os.environ.get('GATEWAY_TEST_DB') == 'sqlite'", reason="needs Celery worker processes and Redis"
)

OTHER = "other-model"  # the other tenant's runs call this model, so the upstream counts them apart


def logged(response_id: str) -> list[dict]:
    """Every event in a response's log, as stored (a reader stops at the first terminal one)."""
    import json

    import redis
    from django.conf import settings

    from responses_api.store.eventlog import EVENTS_PREFIX, key

    with redis.Redis.from_url(settings.REDIS_URL) as client:
        return [json.loads(fields[b"e"]) for _, fields in client.xrange(key(EVENTS_PREFIX, response_id))]


def stubborn_tool() -> None:
    """tests/tool_registry/pytools.py's `stubborn`, which ignores cancellation, offered with the
    test model (the worker process imports it: GATEWAY_PYTHON_TOOL_MODULES)."""
    from responses_api.models import ModelRoute
    from tool_registry.models import Tool

    tool = Tool(
        name="stubborn",
        description="a tool that ignores cancellation",
        executor="python",
        python_callable="tests.tool_registry.pytools:stubborn",
        parameters={"type": "object", "properties": {"path": {"type": "string"}, "seconds": {"type": "number"}}},
        timeout=300,
    )
    tool.full_clean()
    tool.save()
    tool.routes.add(ModelRoute.objects.get(name=MODEL))


def wait_until(what: str, condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)


def test_a_tenants_concurrency_limit_holds_on_a_worker_holding_many_runs(
    fresh_limits, gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """The README: a background run holds its tenant's concurrency slot from its create until
    its worker ends it, and a create over the limit is refused with a 429 before any upstream
    call. With one worker process able to hold 20 runs, a tenant limited to 3 that submits 8 at
    once (from two keys) never has more than 3 upstream; another tenant's 6, submitted at the same
    moment to the same process, all run at once; the slots come back when the runs end."""
    from responses_api.api import auth
    from responses_api.models import Tenant

    limit, submitted, others = 3, 8, 6
    make_route(scripted.base_url, name=OTHER)
    second_key, _ = make_key(name="second")  # the same tenant ("acme"): its keys share the limit
    other_key, other_tenant = make_key(tenant="globex", name="other")
    assert other_tenant != gateway.tenant_id
    Tenant.objects.filter(pk=gateway.tenant_id).update(max_concurrent_requests=limit)
    auth.clear_cache()
    # About 12 s each: long enough that every admitted run is upstream at once.
    scripted.set_default(MODEL, Reply(text="word " * 24, chunk_chars=5, interval=0.5))
    scripted.set_default(OTHER, Reply(text="other " * 24, chunk_chars=6, interval=0.5))

    def create(job: tuple[str, str]) -> httpx.Response:
        key, model = job
        with gateway.http(key) as http:
            return http.post("/v1/responses", json={"model": model, "input": "go", "background": True})

    worker = CeleryWorker(concurrency=20)
    try:
        worker.wait_ready()
        jobs = [(gateway.key if i % 2 else second_key, MODEL) for i in range(submitted)]
        jobs += [(other_key, OTHER)] * others
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(create, jobs))
        limited, other = answers[:submitted], answers[submitted:]
        admitted = [r.json()["id"] for r in limited if r.status_code == 200]
        refused = [r for r in limited if r.status_code != 200]
        assert len(admitted) == limit, [r.status_code for r in limited]
        for r in refused:
            assert r.status_code == 429
            error = r.json()["error"]
            assert error["code"] == "rate_limit_exceeded" and "concurrent requests" in error["message"], error
        assert [r.status_code for r in other] == [200] * others
        other_ids = [r.json()["id"] for r in other]
        # The other tenant is not held back: all its runs are upstream at once, in the same
        # process, while the limited tenant's runs hold their slots.
        wait_until(
            f"{others} runs of the other tenant upstream at once", lambda: scripted.peak_streams_of(OTHER) == others, 60
        )
        bodies = wait_for(gateway, admitted, TERMINAL, timeout=120)
        assert {b["status"] for b in bodies.values()} == {"completed"}
        assert scripted.peak_streams_of(MODEL) <= limit
        assert len([c for c in scripted.model_calls if c.body.get("model") == MODEL]) == limit
        with gateway.http(other_key) as http:
            assert {http.get(f"/v1/responses/{rid}").json()["status"] for rid in other_ids} <= TERMINAL | {
                "in_progress"
            }
        # The worker gave the slots back as the runs ended: as many again are admitted.
        with ThreadPoolExecutor(limit) as pool:
            again = list(pool.map(create, [(gateway.key, MODEL)] * limit))
        assert [r.status_code for r in again] == [200] * limit
        wait_for(gateway, [r.json()["id"] for r in again], TERMINAL, timeout=120)
        assert scripted.peak_streams_of(MODEL) <= limit
    finally:
        worker.stop()


def test_cancel_of_a_run_stuck_in_a_tool_that_ignores_cancellation(
    fresh_limits, tools_env, gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path
) -> None:
    """POST /cancel asks the run to stop; its worker cancels the tool, which goes on regardless.
    The response ends `cancelled` (the web process ends it itself when the worker has not within
    3 s) keeping what its log showed, the tool's later result is used nowhere, nothing runs twice,
    and the worker's slot is freed without waiting for the tool (the run is cancelled outright
    STOP_GRACE_SECONDS after it was asked to stop): the one-slot worker then completes another run
    while the tool still blocks. The tenant's concurrency slot (a limit of 1) is back when the
    cancel answers."""
    from responses_api.api import auth
    from responses_api.models import ResponseItem, Tenant

    stubborn_tool()
    Tenant.objects.filter(pk=gateway.tenant_id).update(max_concurrent_requests=1)
    auth.clear_cache()
    note = tmp_path / "stubborn.log"
    release = Path(f"{note}.release")
    scripted.enqueue(
        MODEL,
        Reply(text="Checking. ", tool_calls=[call("stubborn", {"path": str(note), "seconds": 240}, "k1")]),
    )
    worker = CeleryWorker(concurrency=1)  # one slot: the next run needs the stuck run's
    try:
        worker.wait_ready()
        client = gateway.openai()
        stuck = client.responses.create(model=MODEL, input="use the tool", background=True)
        wait_until("the tool started", lambda: note.exists() and "started" in note.read_text(), 60)
        with gateway.http() as http:
            cancelled = http.post(f"/v1/responses/{stuck.id}/cancel").json()
        assert cancelled["status"] == "cancelled", cancelled
        # What its log showed is kept: the text and the tool's call (never its output).
        assert cancelled["output"], cancelled
        assert [item["type"] for item in cancelled["output"]] == ["message", "function_call"], cancelled["output"]
        assert cancelled["output"][0]["content"][0]["text"] == "Checking. "
        # The slot is freed while the tool still runs: the next run completes.
        assert "returned" not in note.read_text()
        scripted.enqueue(MODEL, Reply(text="next run"))
        after = client.responses.create(model=MODEL, input="next", background=True)  # a 429 if the slot were held
        done = wait_for(gateway, [after.id], TERMINAL, timeout=60)[after.id]
        assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "next run"
        assert "returned" not in note.read_text(), "the tool's own end freed the slot, not the cancel"
        release.touch()  # the tool returns now: its result must go nowhere
        wait_until("the tool returned", lambda: "returned" in note.read_text(), 30)
        time.sleep(2)  # what a late result would do happens in milliseconds
        final = statuses(gateway, [stuck.id])[stuck.id]
    finally:
        release.touch()
        worker.stop()
    assert final == cancelled, "the response changed after it was cancelled"
    assert "late result" not in str(final)
    assert note.read_text().count("started") == 1, "the tool ran once"
    assert len(scripted.model_calls) == 2, "one model call for each run: none after the tool"
    items = ResponseItem.objects.filter(response_id=stuck.id)
    assert items.count() == items.values("item_id").distinct().count()
    events = parse_sse(_read_log(gateway, stuck.id))
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
    validate_events(events, background=True)
    stored = logged(stuck.id)  # the whole log: nothing after its end, once
    assert stored == events, [e["type"] for e in stored]
    assert "late result" not in str(stored)


def test_a_run_past_its_time_limit_stuck_in_a_tool_ends_failed_and_the_others_go_on(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path
) -> None:
    """test_worker_capacity.py shows a lone streaming run stopped at its limit. Here the run is in
    a tool that ignores the stop: STOP_GRACE_SECONDS later it is cancelled outright and ends
    `failed` (`time_limit_exceeded`) with what it had said, its tool run once and its result used
    nowhere, while the process's other runs (`2h` ones, whose limit is their window's) stream on
    and complete whole."""
    stubborn_tool()
    note = tmp_path / "stubborn.log"
    release = Path(f"{note}.release")
    text = "steady " * 80  # about 40 s at 2 chunks a second: past the stuck run's limit and grace
    scripted.enqueue(MODEL, *[Reply(text=text, chunk_chars=7, interval=0.5) for _ in range(3)])
    worker = CeleryWorker(concurrency=10, extra_env={"GATEWAY_BACKGROUND_MAX_SECONDS": "3"})
    try:
        worker.wait_ready()
        with gateway.http() as http:
            others = [
                http.post(
                    "/v1/responses",
                    json={
                        "model": MODEL,
                        "input": f"other {i}",
                        "background": True,
                        "background_options": {"completion_window": "2h"},
                    },
                ).json()["id"]
                for i in range(3)
            ]
        wait_until("the other runs streaming", lambda: scripted.active_streams_of(MODEL) == 3, 60)
        scripted.enqueue(
            MODEL,
            Reply(text="Looking. ", tool_calls=[call("stubborn", {"path": str(note), "seconds": 240}, "k1")]),
        )
        stuck = gateway.openai().responses.create(model=MODEL, input="use the tool", background=True)
        body = wait_for(gateway, [stuck.id], TERMINAL, timeout=90)[stuck.id]
        assert "returned" not in note.read_text(), "it ended by its tool's own end, not by the limit"
        running = statuses(gateway, others)
        release.touch()
        done = wait_for(gateway, others, TERMINAL, timeout=120)
        wait_until("the tool returned", lambda: "returned" in note.read_text(), 30)
        time.sleep(2)  # what a late result would do happens in milliseconds
        final = statuses(gateway, [stuck.id])[stuck.id]
    finally:
        release.touch()
        worker.stop()
    assert body["status"] == "failed" and body["error"]["code"] == "time_limit_exceeded", body
    assert body["output"][0]["content"][0]["text"] == "Looking. "  # what it had said is kept
    assert final == body, "the response changed after it ended"
    assert note.read_text().count("started") == 1
    assert {b["status"] for b in running.values()} == {"in_progress"}, "the others were running meanwhile"
    assert [(b["status"], b["output"][0]["content"][0]["text"]) for b in done.values()] == [("completed", text)] * 3
    events = parse_sse(_read_log(gateway, stuck.id))
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "time_limit_exceeded"
    validate_events(events, background=True)
    assert logged(stuck.id) == events
    assert "late result" not in str(events)


def test_a_tools_result_after_a_forced_cancel_goes_nowhere(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path
) -> None:
    """The tool that ignored the cancel returns after the cancel ended the response (and before
    the worker cancels the run outright): its result reaches neither the row nor the event log,
    and no model call follows it."""
    stubborn_tool()
    note = tmp_path / "stubborn.log"
    release = Path(f"{note}.release")
    scripted.enqueue(
        MODEL, Reply(text="Checking. ", tool_calls=[call("stubborn", {"path": str(note), "seconds": 240}, "k1")])
    )
    worker = CeleryWorker()
    try:
        worker.wait_ready()
        # One call at a time (no gather, whose own cancel drops a late result).
        stuck = gateway.openai().responses.create(
            model=MODEL, input="use the tool", background=True, parallel_tool_calls=False
        )
        wait_until("the tool started", lambda: note.exists() and "started" in note.read_text(), 60)
        with gateway.http() as http:
            cancelled = http.post(f"/v1/responses/{stuck.id}/cancel").json()
        assert cancelled["status"] == "cancelled", cancelled
        release.touch()  # the tool returns now, its run not yet cancelled outright
        wait_until("the tool returned", lambda: "returned" in note.read_text(), 30)
        time.sleep(2)  # what a late result would do happens in milliseconds
        final = statuses(gateway, [stuck.id])[stuck.id]
        stored = logged(stuck.id)
    finally:
        release.touch()
        worker.stop()
    assert final == cancelled, "the response changed after it was cancelled"
    assert len(scripted.model_calls) == 1
    assert "late result" not in str(stored), [e["type"] for e in stored]
    terminal = [n for n, e in enumerate(stored) if e["type"] == "response.failed"]
    assert terminal == [len(stored) - 1], [e["type"] for e in stored]
    validate_events(stored, background=True)
