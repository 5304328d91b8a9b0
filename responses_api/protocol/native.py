"""Native Responses upstreams (provider kind `responses`): the request the gateway sends an
upstream that itself speaks `/v1/responses`, and the upstream's answer (streamed events or
a Response object) read back as neutral deltas.

The gateway keeps owning state: the upstream gets the whole context with `store: false`,
never a `previous_response_id`, so chains, background runs, the tool registry, MCP and
history work whatever the upstream keeps. Reasoning items are not sent back (an upstream
accepts only its own `encrypted_content`); hosted tool items of the gateway's own runs are
not sent either (no upstream call produced them).
"""

from __future__ import annotations

from typing import Any

from .caching import upstream_cache_fields
from .client_tools import CALL_ITEM_KIND, HOSTED_ITEM_TYPES, OUTPUT_ITEM_TYPES, call_as_chat, output_as_text
from .deltas import (
    PASSED_RESPONSE_FIELDS,
    Delta,
    Finish,
    OutputItem,
    ReasoningDelta,
    RefusalDelta,
    ResponseFields,
    TextDelta,
    ToolCallDelta,
    UpstreamFailed,
    Usage,
)
from .prefix import ConvertedPrefix, converted
from .request import CreateRequest
from .surface import SENT_FIELDS
from .tools import Tool, chosen_upstream_name, namespaced_name

# The numbers a Responses upstream takes as the client sent them (protocol/surface.py says which).
_SENT_AS_IS = tuple(
    name
    for name in ("max_output_tokens", "temperature", "top_p", "top_logprobs", "presence_penalty", "frequency_penalty")
    if name in SENT_FIELDS["responses"]
)
_FINISH_OF_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def build_responses_request(
    req: CreateRequest,
    items: list[dict[str, Any]],
    *,
    upstream_model: str,
    stream: bool,
    tools: list[Tool] | None = None,
    extra_body: dict[str, Any] | None = None,
    prefix: ConvertedPrefix | None = None,
    scope: str = "",
) -> dict[str, Any]:
    """`prefix`: a WebSocket lane's converted input, reused when it begins these items and was
    converted for the same upstream (`scope`, the target)."""
    tools = req.tools if tools is None else tools
    body: dict[str, Any] = {
        "model": upstream_model,
        "input": converted(prefix, ("responses", scope), items, NativeConversion).input,
        "store": False,
        "stream": stream,
    }
    if req.instructions:
        body["instructions"] = req.instructions
    hosted = list(req.upstream_hosted_tools)  # hosted tools the upstream runs itself (web_search, ...)
    if tools or hosted:
        body["tools"] = [_tool_param(t) for t in tools] + hosted
        choice: Any = req.tool_choice
        if isinstance(choice, dict):
            forced = None if choice["type"] == "allowed_tools" else chosen_upstream_name(choice, tools)
            if forced is not None:
                choice = {"type": "function", "name": forced}
            elif choice["type"] == "allowed_tools":  # every tool stays visible; the gateway filters calls
                choice = choice["mode"]
            elif any(h.get("type") == choice["type"] for h in hosted):
                choice = {"type": choice["type"]}  # the upstream's own hosted tool
            else:
                choice = "auto"
        body["tool_choice"] = choice
        body["parallel_tool_calls"] = req.parallel_tool_calls
    for name in _SENT_AS_IS:
        value = getattr(req, name, None)
        if value is not None:
            body[name] = value
    if req.text and req.text.get("format", {}).get("type") != "text":
        body["text"] = {"format": req.text["format"]}
    if req.reasoning:
        body["reasoning"] = {k: v for k, v in req.reasoning.items() if k in ("effort", "summary") and v}
    # Prompt caching and the service tier are the upstream's to apply (content parts keep their
    # `prompt_cache_breakpoint`s in `input`).
    body.update(upstream_cache_fields(req))
    if req.service_tier:
        body["service_tier"] = req.service_tier
    body.update(extra_body or {})
    return body


def _tool_param(tool: Tool) -> dict[str, Any]:
    param: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "parameters": tool.parameters,
        "strict": bool(tool.strict),
    }
    if tool.description:
        param["description"] = tool.description
    return param


class NativeConversion:
    """The input of a Responses upstream, item by item (each converts on its own): a WebSocket
    lane keeps one to extend on its next turn (protocol/prefix.py)."""

    __slots__ = ("input",)

    def __init__(self) -> None:
        self.input: list[dict[str, Any]] = []

    def resumed(self) -> NativeConversion:
        copy = NativeConversion()
        copy.input = list(self.input)
        return copy

    def extend(self, items: list[dict[str, Any]]) -> None:
        self.input += input_items(items)


def input_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gateway's context as Responses input for an upstream that stores nothing: no item
    ids (the upstream never saw them), calls of non-function tools as the function calls the
    upstream made, their outputs as function call outputs."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            content = item["content"]
            if isinstance(content, list):
                content = [
                    {k: v for k, v in part.items() if k not in ("annotations", "logprobs")}
                    if part.get("type") == "output_text"
                    else part
                    for part in content
                ]
                if item["role"] == "assistant":
                    content = [
                        {"type": "output_text", "text": p.get("text") or p.get("refusal") or ""} for p in content
                    ]
            out.append({"type": "message", "role": item["role"], "content": content})
        elif kind == "function_call":
            name = namespaced_name(item["namespace"], item["name"]) if item.get("namespace") else item["name"]
            out.append(
                {
                    "type": "function_call",
                    "call_id": item["call_id"],
                    "name": name,
                    "arguments": item.get("arguments") or "{}",
                }
            )
        elif kind in CALL_ITEM_KIND:
            call = call_as_chat(item)
            out.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                }
            )
        elif kind == "function_call_output":
            output = item["output"]
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": item["call_id"],
                    "output": output if isinstance(output, str) else _parts(output),
                }
            )
        elif kind in OUTPUT_ITEM_TYPES:
            out.append({"type": "function_call_output", "call_id": item["call_id"], "output": output_as_text(item)})
    return out


def _parts(output: Any) -> Any:
    return output if isinstance(output, list) else str(output)


def usage_of(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    inputs = raw.get("input_tokens_details") or {}
    buckets = inputs.get("cache_write_tokens_details") if isinstance(inputs, dict) else None
    details = None
    if isinstance(buckets, dict):  # the SDK's own buckets, passed on as the upstream counted them
        details = (int(buckets.get("ttl_30m_tokens") or 0), int(buckets.get("ttl_12h_tokens") or 0))
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cached_tokens=int(inputs.get("cached_tokens") or 0),
        reasoning_tokens=int((raw.get("output_tokens_details") or {}).get("reasoning_tokens") or 0),
        cache_write_tokens=int(inputs.get("cache_write_tokens") or 0),
        cache_write_details=details,
    )


def finish_of(response: dict[str, Any], made_calls: bool) -> str:
    if response.get("status") == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return _FINISH_OF_INCOMPLETE.get(reason or "", "length")
    return "tool_calls" if made_calls else "stop"


class EventDecoder:
    """Decodes a Responses event stream into deltas, statefully. Events the gateway does not
    need (content part bookkeeping, annotations, hosted tools' progress, event types newer
    than this code) are skipped: the gateway builds its own events from the deltas. Items of
    hosted tools the upstream ran (web_search_call, ...) are relayed whole when done; other
    unknown item and event types are not relayed (PROTOCOL.md: strict validators reject
    unknown types, so a gateway emits none by default)."""

    def __init__(self) -> None:
        self._calls: dict[int, int] = {}  # upstream output_index -> tool call index
        self.finished = False

    def feed(self, event: dict[str, Any]) -> list[Delta]:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            return [TextDelta(event.get("delta") or "")]
        if kind == "response.refusal.delta":
            return [RefusalDelta(event.get("delta") or "")]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return [ReasoningDelta(event.get("delta") or "")]
        if kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") == "function_call":
                index = self._calls.setdefault(int(event.get("output_index", len(self._calls))), len(self._calls))
                return [
                    ToolCallDelta(
                        index, call_id=item.get("call_id"), name=item.get("name"), arguments=item.get("arguments") or ""
                    )
                ]
            return []
        if kind == "response.output_item.done":
            item = event.get("item") or {}
            return [OutputItem(item)] if item.get("type") in HOSTED_ITEM_TYPES else []
        if kind == "response.function_call_arguments.delta":
            call = self._calls.get(int(event.get("output_index", -1)))
            return [] if call is None else [ToolCallDelta(call, arguments=event.get("delta") or "")]
        if kind in ("response.completed", "response.incomplete"):
            self.finished = True
            response = event.get("response") or {}
            usage = usage_of(response.get("usage"))
            deltas: list[Delta] = [usage] if usage else []
            return [*deltas, *passed_fields(response), Finish(finish_of(response, bool(self._calls)))]
        if kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            raise UpstreamFailed(str(error.get("code") or "upstream_error"), str(error.get("message") or "failed"))
        if kind == "error":
            raise UpstreamFailed(str(event.get("code") or "upstream_error"), str(event.get("message") or "error"))
        return []


def response_to_deltas(response: dict[str, Any]) -> list[Delta]:
    """A whole (non-streamed) Response object as deltas."""
    if response.get("status") == "failed":
        error = response.get("error") or {}
        raise UpstreamFailed(str(error.get("code") or "upstream_error"), str(error.get("message") or "failed"))
    deltas: list[Delta] = []
    calls = 0
    for item in response.get("output") or []:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    deltas.append(TextDelta(part.get("text") or ""))
                elif part.get("type") == "refusal":
                    deltas.append(RefusalDelta(part.get("refusal") or ""))
        elif kind == "reasoning":
            text = "".join(p.get("text", "") for p in item.get("content") or []) or "".join(
                p.get("text", "") for p in item.get("summary") or []
            )
            if text:
                deltas.append(ReasoningDelta(text))
        elif kind == "function_call":
            deltas.append(
                ToolCallDelta(
                    calls, call_id=item.get("call_id"), name=item.get("name"), arguments=item.get("arguments") or ""
                )
            )
            calls += 1
        elif kind in HOSTED_ITEM_TYPES:
            deltas.append(OutputItem(item))
    usage = usage_of(response.get("usage"))
    return deltas + ([usage] if usage else []) + passed_fields(response) + [Finish(finish_of(response, calls > 0))]


def passed_fields(response: dict[str, Any]) -> list[Delta]:
    """The upstream Response's fields the gateway passes on as they are, where it sent any."""
    fields = {name: response[name] for name in PASSED_RESPONSE_FIELDS if isinstance(response.get(name), dict)}
    return [ResponseFields(fields)] if fields else []
