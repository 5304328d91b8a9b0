"""The tool loop of one run: server tools between model calls, in parallel or one by one, the
`max_tool_calls` budget and the iteration limit, client tools left to the client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from responses_api.engine.run import ResponseRun
from responses_api.protocol.deltas import Finish, TextDelta, ToolCallDelta, Usage
from tests.engine.standins import LOOKUP, Stored, Tools, Upstream, drive, make_job
from tests.support.stream_validator import validate_events

pytestmark = pytest.mark.embedded

CLIENT_FN = {"type": "function", "name": "ask_user", "parameters": {"type": "object", "properties": {}}}


def two_lookups() -> list[Any]:
    return [
        ToolCallDelta(0, call_id="c1", name="lookup", arguments="{}"),
        ToolCallDelta(1, call_id="c2", name="lookup", arguments="{}"),
        Finish("tool_calls"),
    ]


class SlowTools(Tools):
    """Each call takes two loop turns; the log shows whether calls overlapped."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    async def execute(self, call: dict[str, Any]) -> str:
        self.log.append(f"start {call['call_id']}")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.log.append(f"end {call['call_id']}")
        return await super().execute(call)


def test_parallel_tool_calls_run_together() -> None:
    tools = SlowTools()
    upstream = Upstream(two_lookups(), [TextDelta("done"), Finish("stop")])
    run = ResponseRun(
        make_job({"input": "x", "tools": [LOOKUP], "stream": True}), Stored(), tools, open_upstream=upstream
    )
    validate_events(drive(run))
    assert tools.log[:2] == ["start c1", "start c2"]


def test_without_parallel_tool_calls_they_run_one_after_the_other() -> None:
    tools = SlowTools()
    upstream = Upstream(two_lookups(), [TextDelta("done"), Finish("stop")])
    body = {"input": "x", "tools": [LOOKUP], "stream": True, "parallel_tool_calls": False}
    run = ResponseRun(make_job(body), Stored(), tools, open_upstream=upstream)
    validate_events(drive(run))
    assert tools.log == ["start c1", "end c1", "start c2", "end c2"]


def test_each_output_answers_its_call_in_order() -> None:
    upstream = Upstream(two_lookups(), [TextDelta("done"), Finish("stop")])
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "x", "tools": [LOOKUP], "stream": True}), stored, Tools(), open_upstream=upstream
    )
    drive(run)
    output = stored.finished[0]["output"]
    outputs = [i for i in output if i["type"] == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["c1", "c2"]
    assert all(o["status"] == "completed" and o["output"] == "42" for o in outputs)
    second = upstream.requests[1][1].items
    assert [i.get("call_id") for i in second if i["type"] == "function_call_output"] == ["c1", "c2"]


def test_max_tool_calls_runs_what_fits_and_ends_incomplete() -> None:
    tools = Tools()
    upstream = Upstream(two_lookups())
    stored = Stored()
    body = {"input": "x", "tools": [LOOKUP], "stream": True, "max_tool_calls": 1}
    run = ResponseRun(make_job(body), stored, tools, open_upstream=upstream)
    events = drive(run)
    validate_events(events)
    assert len(tools.calls) == 1 and len(upstream.requests) == 1  # no further model call
    final = stored.finished[0]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_tool_calls"}


def test_the_iteration_limit_ends_a_loop_that_never_answers() -> None:
    upstream = Upstream(
        *[[ToolCallDelta(0, call_id=f"c{n}", name="lookup", arguments="{}"), Finish("tool_calls")] for n in range(3)]
    )
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "x", "tools": [LOOKUP], "stream": True}),
        stored,
        Tools(),
        max_iterations=2,
        open_upstream=upstream,
    )
    validate_events(drive(run))
    assert len(upstream.requests) == 2
    assert stored.finished[0]["status"] == "incomplete"


def test_a_client_tool_call_ends_the_response_for_the_client_to_answer() -> None:
    tools = Tools()
    upstream = Upstream([ToolCallDelta(0, call_id="u1", name="ask_user", arguments="{}"), Finish("tool_calls")])
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "x", "tools": [CLIENT_FN], "stream": True}), stored, tools, open_upstream=upstream
    )
    validate_events(drive(run))
    assert tools.calls == [] and len(upstream.requests) == 1
    final = stored.finished[0]
    assert final["status"] == "completed" and [i["type"] for i in final["output"]] == ["function_call"]


def test_server_calls_run_but_a_client_call_beside_them_still_ends_the_response() -> None:
    tools = Tools()
    upstream = Upstream(
        [
            ToolCallDelta(0, call_id="c1", name="lookup", arguments="{}"),
            ToolCallDelta(1, call_id="u1", name="ask_user", arguments="{}"),
            Finish("tool_calls"),
        ]
    )
    stored = Stored()
    body = {"input": "x", "tools": [LOOKUP, CLIENT_FN], "stream": True}
    run = ResponseRun(make_job(body), stored, tools, open_upstream=upstream)
    validate_events(drive(run))
    assert [c["call_id"] for c in tools.calls] == ["c1"] and len(upstream.requests) == 1
    types = [i["type"] for i in stored.finished[0]["output"]]
    assert types == ["function_call", "function_call", "function_call_output"]


def test_usage_adds_up_over_the_model_calls_of_a_loop() -> None:
    upstream = Upstream(
        [ToolCallDelta(0, call_id="c1", name="lookup", arguments="{}"), Usage(5, 2), Finish("tool_calls")],
        [TextDelta("42"), Usage(7, 3), Finish("stop")],
    )
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "x", "tools": [LOOKUP], "stream": True}), stored, Tools(), open_upstream=upstream
    )
    drive(run)
    usage = stored.finished[0]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (12, 5)
