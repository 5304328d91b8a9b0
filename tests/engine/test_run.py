"""The engine on its own, basics: `ResponseRun` driven with stand-in persistence, upstream and
tool runner (tests/engine/standins.py: no HTTP, no database), so its rules can be checked in
milliseconds. The same engine is exercised end to end, over real servers, by tests/responses_api/."""

from __future__ import annotations

import asyncio

import pytest

from responses_api.domain import Target
from responses_api.engine.run import ResponseRun
from responses_api.protocol.deltas import Finish, TextDelta, ToolCallDelta, Usage
from responses_api.protocol.errors import UpstreamUnavailable
from responses_api.store import router_health
from responses_api.upstreams import UpstreamRequest
from tests.engine.standins import LOOKUP, Call, Stored, Tools, Upstream, drive, make_job, make_target, to_end
from tests.support.stream_validator import validate_events

pytestmark = pytest.mark.embedded


def test_a_streamed_answer_is_valid_protocol_and_stored_once() -> None:
    upstream = Upstream([TextDelta("Hel"), TextDelta("lo"), Usage(5, 2), Finish("stop")])
    stored = Stored()
    run = ResponseRun(make_job({"input": "hi", "stream": True}), stored, Tools(), open_upstream=upstream)
    events = drive(run)
    validate_events(events)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert stored.opened == 1 and len(stored.finished) == 1
    final = stored.finished[0]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens"] == 2


def test_a_server_tool_runs_between_model_calls_and_its_output_goes_back() -> None:
    upstream = Upstream(
        [ToolCallDelta(0, call_id="call_1", name="lookup", arguments='{"q": '), ToolCallDelta(0, arguments="1}")]
        + [Finish("tool_calls")],
        [TextDelta("It is 42."), Finish("stop")],
    )
    tools, stored = Tools(), Stored()
    run = ResponseRun(
        make_job({"input": "look it up", "tools": [LOOKUP], "stream": True}), stored, tools, open_upstream=upstream
    )
    events = drive(run)
    validate_events(events)
    assert [c["arguments"] for c in tools.calls] == ['{"q": 1}']
    second = upstream.requests[1][1].items
    assert [i["type"] for i in second][-2:] == ["function_call", "function_call_output"]
    assert second[-1] == {**second[-1], "call_id": "call_1", "output": "42"}
    output = stored.finished[0]["output"]
    assert [i["type"] for i in output] == ["function_call", "function_call_output", "message"]
    assert run.tool_calls_made == 1


def test_the_router_falls_back_before_the_first_byte() -> None:
    upstream = Upstream([TextDelta("from b"), Finish("stop")], failing=("a",))
    stored = Stored()
    job = make_job({"input": "hi"}, make_target("a"), Target(make_target("b").provider, "m", 1, priority=1))
    run = ResponseRun(job, stored, Tools(), open_upstream=upstream)
    result = asyncio.run(to_end(run))
    assert [name for name, _ in upstream.requests] == ["a", "b"]
    assert result["status"] == "completed"
    assert result["output"][0]["content"][0]["text"] == "from b"


def test_every_target_failing_stores_a_failed_response_and_raises() -> None:
    upstream = Upstream(failing=("a",))
    stored = Stored()
    run = ResponseRun(make_job({"input": "hi", "stream": True}), stored, Tools(), open_upstream=upstream)
    with pytest.raises(UpstreamUnavailable):
        asyncio.run(run.connect())
    assert stored.finished[-1]["status"] == "failed"
    assert stored.finished[-1]["error"]["code"] == "upstream_unavailable"
    assert run.failure_events[-1]["type"] == "response.failed"


def test_a_worker_run_continues_the_event_log_and_streams_from_the_upstream() -> None:
    upstream = Upstream([TextDelta("ok"), Finish("stop")])
    run = ResponseRun(
        make_job({"input": "hi"}),  # the client did not stream
        Stored(),
        Tools(),
        stream_upstream=True,
        first_sequence_number=2,  # the worker's log already holds created and in_progress
        open_upstream=upstream,
    )
    events = drive(run, opening="none")  # as worker.run_claimed: the log holds the opening
    validate_events(events, starting_after=1)
    assert upstream.requests[0][1].stream is True
    assert events[0]["sequence_number"] == 2


def test_a_streams_row_is_written_after_its_upstream_request_went_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp sends a request from a task of its own, queued behind whatever is ready on the
    loop (Python 3.11): a row insert started at the same moment went first and delayed the
    upstream request (bench/README.md, performance round 4). Target health as between two
    reads of the shared store (in memory, or Redis within the router's cache time)."""
    monkeypatch.setattr(router_health.health_store, "instance", router_health.MemoryHealthStore())
    order: list[str] = []

    class SendsFromATask(Upstream):
        async def __call__(self, target: Target, request: UpstreamRequest) -> Call:
            async def write() -> None:
                order.append("upstream request sent")

            sent = asyncio.ensure_future(write())  # as aiohttp's ClientRequest.send
            await sent
            return await super().__call__(target, request)

    class RecordsTheInsert(Stored):
        async def open(self) -> None:
            order.append("row inserted")
            await super().open()

    upstream = SendsFromATask([TextDelta("hi"), Finish("stop")])
    stored = RecordsTheInsert()
    run = ResponseRun(make_job({"input": "hi", "stream": True}), stored, Tools(), open_upstream=upstream)
    events = drive(run)
    validate_events(events)
    assert order == ["upstream request sent", "row inserted"]


class BatchedCall:
    """A model call whose deltas come in batches (a network read each), as ChatCompletionCall's."""

    def __init__(self, batches: list[list[object]]) -> None:
        self._batches = batches

    async def delta_batches(self):
        for batch in self._batches:
            await asyncio.sleep(0)
            yield batch

    async def deltas(self):
        raise AssertionError("the engine reads a call's batches when it has them")
        yield

    async def aclose(self) -> None:
        pass


def test_a_burst_of_deltas_is_one_batch_of_events_in_order() -> None:
    """Deltas that came together become one list of events (what the SSE writer sends in one
    write), numbered on without a gap; `events()` gives the same events one by one."""
    burst: list[list[object]] = [
        [TextDelta("a"), TextDelta("b"), TextDelta("c")],
        [TextDelta("d")],
        [Usage(3, 4), Finish("stop")],
    ]

    async def go(batched: bool) -> list[list[dict]]:
        async def opener(target: Target, request: UpstreamRequest) -> BatchedCall:
            return BatchedCall(burst)

        run = ResponseRun(make_job({"input": "hi", "stream": True}), Stored(), Tools(), open_upstream=opener)
        await run.connect()
        if batched:
            return [batch async for batch in run.event_batches()]
        return [[event] async for event in run.events()]

    batches = asyncio.run(go(batched=True))
    kinds = [[e["type"] for e in batch] for batch in batches]
    assert kinds[0] == ["response.created", "response.in_progress"]
    assert kinds[1] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
    ]
    assert [e["delta"] for e in batches[1][2:]] == ["a", "b", "c"]
    assert kinds[2] == ["response.output_text.delta"] and batches[2][0]["delta"] == "d"
    assert kinds[-1][-1] == "response.completed"
    assert all(batches)  # no empty batch: each is a write
    events = [e for batch in batches for e in batch]
    validate_events(events)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    one_by_one = [e for batch in asyncio.run(go(batched=False)) for e in batch]
    assert [(e["type"], e["sequence_number"]) for e in one_by_one] == [
        (e["type"], e["sequence_number"]) for e in events
    ]
