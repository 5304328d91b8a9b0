"""One step's server-side tool calls: registry function calls, MCP calls and the registry tools
serving hosted tools (`ToolRound`: which the max_tool_calls budget lets run), run concurrently
when the request allows parallel tool calls, each traced when tracing is on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..protocol.errors import InvalidRequest
from ..protocol.events import Event, EventBuilder
from ..protocol.ids import new_id
from . import tracing
from .ending import Ending
from .interfaces import McpSession, ToolRunner


def check_approvals(unknown: list[str], *, approved: bool, mcp: McpSession | None) -> None:
    """Refuse approval answers the run cannot act on: one for no request of the chain
    (`unknown`: their ids), an approved call whose server the request does not name."""
    if unknown:
        raise InvalidRequest(
            f"'mcp_approval_response' answers {unknown[0]!r}, which is not an "
            "mcp_approval_request of the previous response chain.",
            param="input.approval_request_id",
        )
    if approved and mcp is None:
        raise InvalidRequest(
            "An approved MCP call needs its server: send the 'mcp' tool again in 'tools'.",
            param="tools",
        )


@dataclass(slots=True)
class ToolRound:
    """The calls of a step the gateway runs or answers, and those the budget lets run."""

    calls: list[dict[str, Any]]  # every function call of the step, the client's too
    server: list[dict[str, Any]]  # registry function calls
    mcp: list[dict[str, Any]]
    hosted: list[dict[str, Any]]  # hosted calls a registry tool serves
    searches: list[dict[str, Any]]  # tool searches (tool_search.py)
    run_server: list[dict[str, Any]]
    run_mcp: list[dict[str, Any]]
    run_hosted: list[dict[str, Any]]

    @classmethod
    def of_step(cls, builder: EventBuilder, tools: ToolRunner, budget: int | None, made: int) -> ToolRound:
        """The step's calls; `budget`: max_tool_calls, of which `made` are spent."""
        calls = builder.step_calls
        server = [
            c
            for c in calls
            if c["type"] == "function_call" and "namespace" not in c and tools.is_server_tool(c["name"])
        ]
        mcp, hosted = builder.step_mcp_calls, builder.step_hosted_calls
        wanted = len(server) + len(mcp) + len(hosted)
        room = wanted if budget is None else max(budget - made, 0)
        run_hosted = hosted[:room]
        run_mcp = mcp[: max(room - len(run_hosted), 0)]
        run_server = server[: max(room - len(run_hosted) - len(run_mcp), 0)]
        searches = builder.step_search_calls
        return cls(calls, server, mcp, hosted, searches, run_server, run_mcp, run_hosted)

    @property
    def wanted(self) -> int:
        return len(self.server) + len(self.mcp) + len(self.hosted)

    @property
    def running(self) -> int:
        return len(self.run_server) + len(self.run_mcp) + len(self.run_hosted)

    def run(
        self,
        tools: ToolRunner,
        mcp: McpSession | None,
        response_id: str,
        builder: EventBuilder,
        *,
        span: Any,
        parallel: bool,
    ) -> Awaitable[tuple[list[dict[str, Any]], list[Any]]]:
        """The calls the budget lets run (`run_tool_step`), the hosted ones as their tools serve
        them, an MCP call keyed by the response and its item."""

        def mcp_call(item: dict[str, Any]) -> Awaitable[Any]:
            assert mcp is not None  # a step has MCP calls only when the run has MCP servers
            return mcp.call(item["server_label"], item["name"], item["arguments"], key=(response_id, item["id"]))

        hosted = [(builder.hosted_outputs[item["id"]], item["id"]) for item in self.run_hosted]
        return run_tool_step(tools, mcp_call, self.run_server, self.run_mcp, hosted, span=span, parallel=parallel)

    def ending(self, builder: EventBuilder, iteration: int, max_iterations: int) -> Ending | None:
        """The end the run comes to after this round, its `iteration`th, if the round decides it:
        the budget ran out, the client has calls to answer, or the loop its iterations."""
        if self.running < self.wanted:
            return Ending("max_tool_calls")
        if len(self.server) < len(self.calls) or builder.step_approvals:
            return Ending()  # client tools or approval requests remain: the client answers them
        if iteration >= max_iterations:
            return Ending("max_tool_calls")
        return None

    def skipped(self, builder: EventBuilder) -> list[Event]:
        """The round run not at all (the model's output was cut short): open calls closed."""
        events = builder.skip_mcp_calls("not run: the model's output was cut short")
        for item in self.hosted:
            events += builder.finish_hosted_call(item, None)
        return events

    def outcome_events(self, builder: EventBuilder, outputs: list[dict[str, Any]], outcomes: list[Any]) -> list[Event]:
        """What `run_tool_step` gave, as events: MCP and hosted calls closed (those past the
        budget without output), the registry calls' output items added."""
        events: list[Event] = []
        for item, outcome in zip(self.run_mcp, outcomes[: len(self.run_mcp)]):
            events += builder.finish_mcp_call(item, output=outcome.output, error=outcome.error)
        for item, output in zip(self.hosted, [*outcomes[len(self.run_mcp) :], *[None] * len(self.hosted)]):
            events += builder.finish_hosted_call(item, output)
        events += builder.skip_mcp_calls("not run: max_tool_calls was reached")
        for item in outputs:
            events += builder.add_item(item)
        return events


async def run_tool_step(
    tools: ToolRunner,
    mcp_call: Callable[[dict[str, Any]], Awaitable[Any]],
    calls: list[dict[str, Any]],
    mcp_calls: list[dict[str, Any]],
    hosted: list[tuple[dict[str, Any], str]],
    *,
    span: Any,
    parallel: bool,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Registry calls, MCP calls and served hosted calls (the call as served, its item id) of one
    step. Returns the registry calls' output items, then the MCP outcomes followed by the hosted
    calls' outputs."""
    jobs = (
        [tools.execute(c) for c in calls]
        + [mcp_call(i) for i in mcp_calls]
        + [
            tools.execute(
                {
                    "name": served["name"],
                    "call_id": served["call_id"],
                    "arguments": served.get("arguments") or "{}",
                    "type": "function_call",
                    "id": item_id,
                }
            )
            for served, item_id in hosted
        ]
    )
    if span is not None:
        named = (
            [(c["name"], c["call_id"], "function") for c in calls]
            + [(i["name"], i["id"], "extension") for i in mcp_calls]
            + [(served["name"], served["call_id"], "function") for served, _ in hosted]
        )
        jobs = [tracing.traced_tool(span, job, name=n, call_id=c, tool_type=t) for job, (n, c, t) in zip(jobs, named)]
    results = await asyncio.gather(*jobs) if parallel else [await job for job in jobs]
    fco = [
        {
            "id": new_id("fco"),
            "type": "function_call_output",
            "call_id": call["call_id"],
            "output": output,
            "status": "completed",
        }
        for call, output in zip(calls, results[: len(calls)])
    ]
    return fco, list(results[len(calls) :])
