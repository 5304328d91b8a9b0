"""`POST /v1/responses/compact`: the routed model summarises a conversation; the answer keeps
the user messages and adds one `compaction` item sealed for the tenant (protocol/compaction.py
says what is kept and how the item is read back)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..domain import Principal
from ..protocol.compaction import compacted_output, summary_payload, summary_request_item
from ..protocol.errors import UpstreamError
from ..protocol.request import CreateRequest
from ..sealing import sealer
from .admission import admit_request, open_sealed_reasoning, route_for
from .assembly import run_for_request
from .guardrails import guard_request
from .toolplan import ToolPlan


async def compact_conversation(principal: Principal, req: CreateRequest) -> tuple[dict[str, Any], dict[str, str]]:
    """Summarise a conversation (`req`: protocol.request.parse_compact_request) with its routed
    model: the `response.compaction` object, and the rate-limit headers of its admission
    (OpenAI's `x-ratelimit-*`, as a create has)."""
    route = await route_for(principal, req.model)
    req, _, screened = await guard_request(principal, req, {}, where="responses.compact")
    await screened.audit(principal)
    req = open_sealed_reasoning(req, principal.tenant_id)
    req = dataclasses.replace(req, input_items=[*req.input_items, summary_request_item()])
    grant = await admit_request(principal, req, route)
    answer: list[dict[str, Any]] = []
    context: list[dict[str, Any]] = []

    def compacted(response: dict[str, Any]) -> dict[str, Any]:
        """The response its row keeps, made once the summary is written: its output is the
        answer's (a chain onto it continues from it, GET shows it). Without a summary it failed,
        as the client is told: never a record a chain would continue from with nothing."""
        summary = _summary_text(response)
        if summary:
            sealed = sealer().seal(
                summary_payload(summary, whole=False), tenant_id=principal.tenant_id, purpose="compaction"
            )
            answer[:] = compacted_output(context[:-1], sealed)
            return {**response, "output": answer}
        if response["status"] != "completed":
            return {**response, "output": []}
        return {**response, "status": "failed", "error": _no_summary().as_response_error(), "output": []}

    try:
        # Usage and history record the compaction like any response; its row keeps the
        # compacted output, not the conversation again (the client may have sent it with store: false).
        plan = ToolPlan(req, specs=[], mcp=([], {}, {}))
        run = await run_for_request(principal, plan, route=route, grant=grant, compacted=compacted)
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
    context[:] = run.job.context
    await run.connect()
    result = await run.run_to_end()
    if run.error is not None:
        raise run.error
    if not answer:
        raise _no_summary()
    compacted_object = {
        "id": result["id"],
        "object": "response.compaction",
        "created_at": result["created_at"],
        "output": answer,
        "usage": result["usage"],
    }
    return compacted_object, grant.headers if grant is not None else {}


def _no_summary() -> UpstreamError:
    return UpstreamError("The model returned no summary for the compaction.", code="upstream_empty")


def _summary_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response["output"]
        if item["type"] == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    ).strip()
