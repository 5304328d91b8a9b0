"""The Response object: every field present, unknown values null, never missing."""

from __future__ import annotations

from typing import Any

from .request import CreateRequest

OPEN_STATUSES = frozenset({"queued", "in_progress"})
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "incomplete"})


def request_params(req: CreateRequest) -> dict[str, Any]:
    """The request-derived fields of the Response, as stored with it."""
    return {
        "instructions": req.instructions,
        "tools": [t.as_dict() for t in req.tools if t.reported]
        + [m.as_dict() for m in req.mcp_tools]
        + [dict(h) for h in req.upstream_hosted_tools],
        "tool_choice": req.tool_choice,
        "truncation": req.truncation,
        "parallel_tool_calls": req.parallel_tool_calls,
        "text": req.text,
        "top_p": req.top_p if req.top_p is not None else 1.0,
        "presence_penalty": req.presence_penalty if req.presence_penalty is not None else 0.0,
        "frequency_penalty": req.frequency_penalty if req.frequency_penalty is not None else 0.0,
        "top_logprobs": req.top_logprobs if req.top_logprobs is not None else 0,
        "temperature": req.temperature if req.temperature is not None else 1.0,
        "reasoning": req.reasoning,
        "max_output_tokens": req.max_output_tokens,
        "max_tool_calls": req.max_tool_calls,
        "store": req.store,
        "background": req.background,
        "service_tier": req.service_tier or "default",
        "metadata": req.metadata or {},
        "safety_identifier": req.safety_identifier,
        "prompt_cache_key": req.prompt_cache_key,
        "user": req.user,
        "conversation": {"id": req.conversation} if req.conversation else None,
        "prompt": req.prompt,
    }


def response_object(
    *,
    response_id: str,
    created_at: int,
    status: str,
    model: str,
    previous_response_id: str | None,
    params: dict[str, Any],
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
    completed_at: int | None = None,
) -> dict[str, Any]:
    """Assemble the full Response; field order follows the OpenAI reference."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": completed_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete_details,
        "model": model,
        "previous_response_id": previous_response_id,
        "instructions": params.get("instructions"),
        "output": output,
        "tools": params.get("tools", []),
        "tool_choice": params.get("tool_choice", "auto"),
        "truncation": params.get("truncation", "disabled"),
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "text": params.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "top_p": params.get("top_p", 1.0),
        "presence_penalty": params.get("presence_penalty", 0.0),
        "frequency_penalty": params.get("frequency_penalty", 0.0),
        "top_logprobs": params.get("top_logprobs", 0),
        "temperature": params.get("temperature", 1.0),
        "reasoning": params.get("reasoning"),
        "usage": usage,
        "max_output_tokens": params.get("max_output_tokens"),
        "max_tool_calls": params.get("max_tool_calls"),
        "store": params.get("store", True),
        "background": params.get("background", False),
        "service_tier": params.get("service_tier", "default"),
        "metadata": params.get("metadata") or {},
        "safety_identifier": params.get("safety_identifier"),
        "prompt_cache_key": params.get("prompt_cache_key"),
        "conversation": params.get("conversation"),
        "user": params.get("user"),
        "prompt": params.get("prompt"),
    }
