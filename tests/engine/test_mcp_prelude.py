"""MCP in a run: the prelude (mcp/session.py) lists a server's tools before the first model
call, binds them to names the model can call, runs the calls a client approved; the engine
refuses approvals it cannot run."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import pytest

from responses_api.engine.run import ResponseRun
from responses_api.mcp.session import McpSession
from responses_api.protocol.deltas import Finish, TextDelta, ToolCallDelta
from responses_api.protocol.errors import InvalidRequest
from tests.engine.standins import ADD, Stored, Tools, Toolset, Upstream, drive, make_job
from tests.support.stream_validator import validate_events

if TYPE_CHECKING:
    from tool_registry.runner import McpToolset


def session(toolset: Toolset) -> McpSession:
    """The session over the stand-in, which has the McpToolset methods the session calls."""
    return McpSession(cast("McpToolset", toolset))


pytestmark = pytest.mark.embedded


def add_call() -> list:
    return [ToolCallDelta(0, call_id="c1", name="add", arguments='{"a": 1, "b": 2}'), Finish("tool_calls")]


def test_the_prelude_lists_the_tools_before_the_model_sees_them() -> None:
    toolset = Toolset()
    upstream = Upstream([TextDelta("hi"), Finish("stop")])
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "x", "stream": True}), stored, Tools(), mcp=session(toolset), open_upstream=upstream
    )
    events = drive(run)
    validate_events(events)
    first_item = next(e for e in events if e["type"] == "response.output_item.added")
    assert first_item["item"]["type"] == "mcp_list_tools"
    assert [t.name for t in upstream.requests[0][1].tools] == ["add"]
    assert [i["type"] for i in stored.finished[0]["output"]] == ["mcp_list_tools", "message"]


def test_a_model_call_of_a_listed_tool_runs_on_the_server_once() -> None:
    toolset = Toolset()
    upstream = Upstream(add_call(), [TextDelta("3"), Finish("stop")])
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "1+2?", "stream": True}), stored, Tools(), mcp=session(toolset), open_upstream=upstream
    )
    validate_events(drive(run))
    assert [(label, name) for label, name, _, _ in toolset.calls] == [("srv", "add")]
    call = next(i for i in stored.finished[0]["output"] if i["type"] == "mcp_call")
    assert call["output"] == "3" and call["server_label"] == "srv"
    second = upstream.requests[1][1].items  # the model sees the call as a function call and output
    assert [i["type"] for i in second][-2:] == ["function_call", "function_call_output"]


def test_a_chain_that_listed_the_server_already_is_not_listed_again() -> None:
    toolset = Toolset()
    listed = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "srv", "tools": [ADD]}
    job = make_job({"input": "again", "stream": True}, before=[listed])
    upstream = Upstream([TextDelta("ok"), Finish("stop")])
    run = ResponseRun(job, Stored(), Tools(), mcp=session(toolset), open_upstream=upstream)
    events = drive(run)
    assert toolset.listed == 0
    assert not any(e.get("item", {}).get("type") == "mcp_list_tools" for e in events)
    assert [t.name for t in upstream.requests[0][1].tools] == ["add"]


def test_a_server_that_cannot_be_listed_is_answered_without_its_tools() -> None:
    toolset = Toolset(down=True)
    upstream = Upstream([TextDelta("without it"), Finish("stop")])
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "x", "stream": True}), stored, Tools(), mcp=session(toolset), open_upstream=upstream
    )
    validate_events(drive(run))
    listing = stored.finished[0]["output"][0]
    assert listing["type"] == "mcp_list_tools" and "srv refused" in listing["error"]
    assert upstream.requests[0][1].tools == []


def test_a_tool_needing_approval_is_asked_for_not_run() -> None:
    toolset = Toolset(approval=True)
    upstream = Upstream(add_call())
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "1+2?", "stream": True}), stored, Tools(), mcp=session(toolset), open_upstream=upstream
    )
    validate_events(drive(run))
    assert toolset.calls == [] and len(upstream.requests) == 1
    assert [i["type"] for i in stored.finished[0]["output"]] == ["mcp_list_tools", "mcp_approval_request"]


def test_an_approved_call_runs_in_the_prelude_before_the_model_is_asked() -> None:
    toolset = Toolset(approval=True)
    request = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "srv",
        "name": "add",
        "arguments": '{"a": 1, "b": 2}',
    }
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    job = make_job({"input": [answer], "stream": True}, before=[request])
    upstream = Upstream([TextDelta("It is 3."), Finish("stop")])
    stored = Stored()
    run = ResponseRun(job, stored, Tools(), mcp=session(toolset), open_upstream=upstream)
    validate_events(drive(run))
    assert toolset.calls == [("srv", "add", '{"a": 1, "b": 2}', ("mcpr_1", "approved"))]
    assert [i["type"] for i in stored.finished[0]["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert run.tool_calls_made == 1


def test_an_approval_of_an_unknown_request_is_a_400_before_any_call() -> None:
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}
    upstream = Upstream()
    run = ResponseRun(make_job({"input": [answer]}), Stored(), Tools(), mcp=session(Toolset()), open_upstream=upstream)
    with pytest.raises(InvalidRequest) as refused:
        asyncio.run(run.connect())
    assert refused.value.param == "input.approval_request_id" and upstream.requests == []


def test_an_approved_call_without_its_server_is_a_400() -> None:
    request = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "srv", "name": "add", "arguments": "{}"}
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    run = ResponseRun(make_job({"input": [answer]}, before=[request]), Stored(), Tools(), open_upstream=Upstream())
    with pytest.raises(InvalidRequest) as refused:
        asyncio.run(run.connect())
    assert refused.value.param == "tools"


def test_a_deferred_servers_tools_wait_for_a_search() -> None:
    """A deferred server is listed, but the model is offered the gateway's search only; the
    search's answer loads `add`, which the next model call is offered and which then runs."""
    toolset = Toolset(deferred=True)
    upstream = Upstream(
        [
            ToolCallDelta(0, call_id="s1", name="tool_search", arguments='{"query": "add numbers"}'),
            Finish("tool_calls"),
        ],
        add_call(),
        [TextDelta("3"), Finish("stop")],
    )
    stored = Stored()
    run = ResponseRun(
        make_job({"input": "1+2?", "stream": True}), stored, Tools(), mcp=session(toolset), open_upstream=upstream
    )
    validate_events(drive(run))
    assert [t.name for t in upstream.requests[0][1].tools] == ["tool_search"]
    assert [t.name for t in upstream.requests[1][1].tools] == ["tool_search", "add"]
    output = stored.finished[0]["output"]
    assert [i["type"] for i in output] == [
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "message",
    ]
    assert output[2]["tools"] == [
        {"type": "mcp", "server_label": "srv", "allowed_tools": ["add"], "defer_loading": True}
    ]
    assert [(label, name) for label, name, _, _ in toolset.calls] == [("srv", "add")]
