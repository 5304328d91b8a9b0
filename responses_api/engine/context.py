"""What a run sends the model at each step: its context as model items (MCP items as the
function calls the model understands, compactions opened, a served hosted tool's call as the
function call it made), a compaction's summary request, and the fit to the route's context
window (truncation "auto" drops the oldest items; otherwise an over-long context is a 400
before the upstream is called); and a compaction's summary, sealed into its item."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..protocol.compaction import WHOLE_CONTEXT_INSTRUCTIONS, InputSpans, expand_compactions, summary_request_item
from ..protocol.deltas import TextDelta, Usage
from ..protocol.errors import InvalidRequest, UpstreamError
from ..protocol.mcp_tools import as_model_items
from ..protocol.request import CreateRequest
from ..protocol.tokens import DEFAULT_OUTPUT_RESERVE, estimate_request, truncate
from ..sealing import sealer

OpenCompaction = Callable[[str], dict[str, Any]]


def compaction_opener(tenant_id: int) -> OpenCompaction:
    """A compaction item's sealed payload, opened (its seal was checked when the request came in)."""
    return lambda sealed: sealer().unseal(sealed, tenant_id=tenant_id, purpose="compaction")


def model_items(
    context: list[dict[str, Any]],
    inputs: InputSpans,
    output: list[dict[str, Any]],
    hosted_outputs: dict[str, dict[str, Any]],
    mcp_names: dict[tuple[str, str], str],
    open_compaction: OpenCompaction,
) -> list[dict[str, Any]]:
    """The context (`inputs`: where each request's input lies in it) and what this response
    produced so far (later steps of a tool loop see it); a served hosted tool's call is shown to
    the model as the function call it made, with its output."""
    produced: list[dict[str, Any]] = []
    for item in output:
        served = hosted_outputs.get(item["id"])
        if served is not None and "output" in served:
            produced += [
                {
                    "type": "function_call",
                    "id": item["id"],
                    "call_id": served["call_id"],
                    "name": served["name"],
                    "arguments": served.get("arguments") or "{}",
                },
                {"type": "function_call_output", "call_id": served["call_id"], "output": served["output"]},
            ]
        else:
            produced.append(item)
    # Compactions first: MCP items change the item count, the spans count the context's items.
    return as_model_items(expand_compactions(context + produced, open_compaction, inputs), mcp_names)


def compaction_request(
    req: CreateRequest,
    context: list[dict[str, Any]],
    inputs: InputSpans,
    open_compaction: OpenCompaction,
    items: list[dict[str, Any]] | None = None,
) -> tuple[CreateRequest, list[dict[str, Any]]]:
    """The model call of a compaction: the context (or `items`, already the model's: an automatic
    compaction's, output so far included), then a request to summarise it, with the summariser's
    instructions and no tools; the oldest items give way if it does not fit."""
    instructions = (
        f"{req.instructions}\n\n{WHOLE_CONTEXT_INSTRUCTIONS}" if req.instructions else WHOLE_CONTEXT_INSTRUCTIONS
    )
    summarise = dataclasses.replace(
        req,
        instructions=instructions,
        tools=[],
        tool_choice="none",
        text={"format": {"type": "text"}, "verbosity": "medium"},
        truncation="auto",
        max_output_tokens=None,
    )
    if items is None:
        items = as_model_items(expand_compactions(context, open_compaction, inputs), {})
    return summarise, [*items, summary_request_item()]


ExactCount = Callable[[list[dict[str, Any]]], Awaitable[int | None]]


async def fit_context(
    items: list[dict[str, Any]],
    tools: list[Any],
    window: int,
    req: CreateRequest,
    exact_count: ExactCount | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The context within the model's window, and how many of the oldest items were dropped: with
    truncation "auto" the oldest items give way; with "disabled" an over-long context is a 400.

    The estimate (protocol/tokens.py) is on the high side, so a context it fits is sent as it is
    without asking anyone. Only one it does not fit is counted by the upstream's tokenizer
    (`exact_count`, where the upstream has one; None: it has not): what fits by that count is
    sent whole, and truncation drops items by their estimates scaled to that count."""
    budget = window - (req.max_output_tokens or min(DEFAULT_OUTPUT_RESERVE, window // 4))
    tool_dicts = [t.schema() for t in tools]
    estimate = estimate_request(items, req.instructions, tool_dicts)
    if estimate <= budget:
        return items, 0
    exact = await exact_count(items) if exact_count is not None else None
    if exact is not None and exact <= budget:
        return items, 0
    if req.truncation == "auto":
        # In the estimate's units: the budget times how far the estimate overshot the real count.
        scaled = budget if not exact else int(budget * estimate / exact)
        fitted = truncate(items, budget=scaled, instructions=req.instructions, tools=tool_dicts)
        if fitted is not None:
            return fitted
    counted = f"{exact} tokens by the model's tokenizer" if exact is not None else f"about {estimate} tokens"
    raise InvalidRequest(
        f"The input is longer than the model's context window ({counted}; the window is {window} tokens, "
        f"{budget} for the input after room for the answer)"
        + (
            "; even its newest item alone does not fit."
            if req.truncation == "auto"
            else "; send 'truncation': 'auto' to drop the oldest items."
        ),
        param="input",
        code="context_length_exceeded",
    )


async def collect_summary(deltas: AsyncIterator[Any], on_usage: Callable[[Usage], object]) -> str:
    """A compaction's summary: the text the model wrote (its usage counted through `on_usage`)."""
    text: list[str] = []
    async for delta in deltas:
        if isinstance(delta, TextDelta):
            text.append(delta.text)
        elif isinstance(delta, Usage):
            on_usage(delta)
    summary = "".join(text).strip()
    if not summary:
        raise UpstreamError("The model returned no summary for the compaction.", code="upstream_empty")
    return summary
