"""How a run ends other than with an answer: cancelled (by request, during a tool, by a client
that went away), stopped with an error, an upstream failing before or after the first byte,
a bug, a store that refuses the end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from responses_api.domain import Target
from responses_api.engine.run import ResponseRun
from responses_api.protocol.deltas import Finish, TextDelta, ToolCallDelta
from responses_api.protocol.errors import InvalidRequest, ServerError, UpstreamError
from tests.engine.standins import LOOKUP, Stored, Tools, Upstream, drive, make_job, make_target, to_end

pytestmark = pytest.mark.embedded


def fallback(name: str) -> Target:
    """A target tried after "a" (a lower priority), never before it."""
    return Target(make_target(name).provider, "m", 1, priority=1)


def words(n: int) -> list[Any]:
    return [TextDelta(f"w{i} ") for i in range(n)] + [Finish("stop")]


def test_a_cancel_request_stops_the_stream_and_stores_it_cancelled() -> None:
    upstream = Upstream(words(50))
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "stream": True}), stored, Tools(), open_upstream=upstream)

    async def go() -> list[dict[str, Any]]:
        await run.connect()
        seen = []
        async for event in run.events():
            seen.append(event)
            if event["type"] == "response.output_text.delta":
                run.request_cancel()
        return seen

    events = asyncio.run(go())
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
    assert sum(e["type"] == "response.output_text.delta" for e in events) < 50
    assert stored.finished[-1]["status"] == "cancelled" and run.ended


def test_a_cancel_during_a_tool_stops_the_tool_at_once() -> None:
    class Hangs(Tools):
        def __init__(self) -> None:
            super().__init__()
            self.started = asyncio.Event()

        async def execute(self, call: dict[str, Any]) -> str:
            self.started.set()
            await asyncio.sleep(30)
            return "late"

    tools = Hangs()
    upstream = Upstream([ToolCallDelta(0, call_id="c1", name="lookup", arguments="{}"), Finish("tool_calls")])
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "tools": [LOOKUP]}), stored, tools, open_upstream=upstream)

    async def go() -> float:
        task = asyncio.ensure_future(to_end(run))
        await tools.started.wait()
        began = time.monotonic()
        run.request_cancel()
        await task
        return time.monotonic() - began

    assert asyncio.run(go()) < 1.0
    final = stored.finished[-1]
    assert final["status"] == "cancelled" and [i["type"] for i in final["output"]] == ["function_call"]
    assert len(upstream.requests) == 1


def test_a_stop_with_an_error_ends_the_run_failed_with_it() -> None:
    upstream = Upstream(words(50))
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "stream": True}), stored, Tools(), open_upstream=upstream)
    shutdown = ServerError("The gateway is shutting down; retry.", code="server_shutting_down")

    async def go() -> list[dict[str, Any]]:
        await run.connect()
        seen = []
        async for event in run.events():
            seen.append(event)
            if event["type"] == "response.output_text.delta":
                run.request_stop(shutdown)
        return seen

    events = asyncio.run(go())
    assert events[-1]["type"] == "response.failed"
    assert stored.finished[-1]["status"] == "failed"
    assert stored.finished[-1]["error"]["code"] == "server_shutting_down" and run.error is shutdown


def test_a_client_that_goes_away_closes_the_upstream_and_keeps_what_was_said() -> None:
    upstream = Upstream(words(50))
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "stream": True}), stored, Tools(), open_upstream=upstream)

    async def go() -> None:
        await run.connect()
        events = run.events()
        assert isinstance(events, AsyncGenerator)  # events() is an async generator: it can be closed
        seen = 0
        async for event in events:
            seen += event["type"] == "response.output_text.delta"
            if seen == 3:
                break
        await events.aclose()

    asyncio.run(go())
    assert upstream.calls[0].closed
    final = stored.finished[-1]
    assert final["status"] == "cancelled"
    assert final["output"][0]["content"][0]["text"].startswith("w0 w1 ")


def test_an_upstream_failing_after_the_first_byte_fails_the_response_without_fallback() -> None:
    broken = UpstreamError("The upstream closed the stream.", code="upstream_disconnected")
    upstream = Upstream([TextDelta("half an "), broken])
    stored = Stored()
    job = make_job({"input": "x", "stream": True}, make_target("a"), fallback("b"))
    run = ResponseRun(job, stored, Tools(), open_upstream=upstream)
    events = drive(run)
    assert events[-1]["type"] == "response.failed"
    assert len(upstream.requests) == 1  # failover only before the first byte
    final = stored.finished[-1]
    assert final["status"] == "failed" and final["error"]["code"] == "upstream_disconnected"


def test_a_request_error_from_the_upstream_is_not_tried_on_another_target() -> None:
    refused = InvalidRequest("The upstream refused the request.", param="input")
    upstream = Upstream([TextDelta("never"), Finish("stop")], failing=("a",), error=refused)
    stored = Stored()
    job = make_job({"input": "x"}, make_target("a"), fallback("b"))
    run = ResponseRun(job, stored, Tools(), open_upstream=upstream)
    with pytest.raises(InvalidRequest):
        asyncio.run(run.connect())
    assert [name for name, _ in upstream.requests] == ["a"]
    assert stored.finished[-1]["status"] == "failed"


def test_a_bug_inside_the_run_still_ends_it_failed_and_stored() -> None:
    upstream = Upstream([TextDelta("so far "), RuntimeError("a bug")])
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "stream": True}), stored, Tools(), open_upstream=upstream)
    events = drive(run)
    assert events[-1]["type"] == "response.failed"
    assert stored.finished[-1]["status"] == "failed" and stored.finished[-1]["error"]["code"] == "server_error"


def test_a_store_that_refuses_the_end_still_ends_the_response_failed() -> None:
    class Refuses(Stored):
        async def finish(
            self, response: dict[str, Any], *, upstream: str, latency_ms: int, cache_write_1h_tokens: int = 0
        ) -> None:
            if response["status"] == "completed":
                raise RuntimeError("a value the column cannot hold")
            await super().finish(response, upstream=upstream, latency_ms=latency_ms)

    stored = Refuses()
    run = ResponseRun(make_job({"input": "x", "stream": True}), stored, Tools(), open_upstream=Upstream(words(2)))
    events = drive(run)
    assert events[-1]["type"] == "response.failed"
    assert stored.finished[-1]["status"] == "failed" and stored.finished[-1]["output"] == []  # finish_failed
