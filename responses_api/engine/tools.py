"""One step's server-side tool calls: registry function calls, MCP calls and the registry tools
serving hosted tools, run concurrently when the request allows parallel tool calls, each traced
when tracing is on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..protocol.ids import new_id
from . import tracing
from .interfaces import ToolRunner


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
