"""Anthropic's Messages API as an INBOUND dialect (`POST /v1/messages`, the front door Claude Code
and the `anthropic` SDK speak), for a route whose target is translated (a Chat Completions or a
native Responses upstream, or an Anthropic one reached through the protocol core): the Messages
request read as a Responses create body, and the upstream's neutral deltas written back as a
Message or as Anthropic's exact stream of events.

Pure: no Django, no I/O. The view is api/messages_views.py; it is registered as an inbound
dialect in protocol/dialects.py (keyed by its path).

Request mapping: `system` (a string or text blocks) becomes `instructions`; user text, image and
document blocks become input parts; `tool_result` blocks become `function_call_output` items
(in order, where they stand in the turn); assistant text becomes an assistant message and
`tool_use` blocks `function_call` items (the `tool_use` id is the call id, kept both ways);
`thinking` and `redacted_thinking` blocks are not sent to a translated upstream (their signature is
Anthropic's own and means nothing elsewhere); custom tools become function tools, `tool_choice`
(auto, any, tool, none, disable_parallel_tool_use) its Responses counterpart; `thinking` becomes
`reasoning.effort` by its budget, as does `output_config.effort` (`output_config.format` becomes
`text.format`); `metadata.user_id` the `safety_identifier` (an id: up to 64 characters). What a translated
route accepts without applying (`stop_sequences`, `top_k`, `cache_control` marks, ...) is named in
`x-gateway-ignored-fields`, never dropped in silence; what has no meaning there (server tools) is
a 400 naming the field.

Storage rule (api/messages_views.py stores, `x-gateway-store: false` opts out): Claude Code
resends the whole conversation each turn, so storing each request's input would grow with the
square of a session's length. A turn is stored as a response whose input is only the messages
after the longest prefix an earlier stored turn was sent (`prefix_hashes`), chained to that turn
by `previous_response_id`, its answer as its output: rows and items linear in the new messages.
The upstream is still sent the whole request.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from .deltas import (
    Delta,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from .errors import GatewayError, InvalidRequest
from .ids import new_id
from .items import normalize_input
from .wirejson import dumpb

# The top-level fields a Messages request may carry, and what a translated route does with them.
TRANSLATED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "output_config",
    }
)
# Accepted and not applied on a translated route (announced in x-gateway-ignored-fields): they
# only add optional behaviour. `context_management` and `output_config` are what Claude Code
# sends with its betas; `container`, `mcp_servers` need Anthropic's own servers.
IGNORED = frozenset({"stop_sequences", "top_k", "service_tier", "context_management", "container", "mcp_servers"})
# Finish reasons (protocol/deltas.py Finish) as Anthropic's stop reasons.
STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
# `output_config.effort` (Anthropic's effort beta) as the Responses reasoning effort.
_EFFORT_LEVELS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}
# A thinking budget as the nearest reasoning effort (protocol/anthropic.py THINKING_BUDGET, reversed).
_EFFORTS = ((2048, "low"), (8192, "medium"))

# The gateway's errors (by HTTP status) as Anthropic's error types.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


# /v1/messages/batches: not served, said plainly (in Anthropic's shape, api/views.not_found).
BATCHES_PATH = "/v1/messages/batches"
BATCHES_NOT_SERVED = (
    "Message Batches are not served by this gateway: send each request to /v1/messages "
    "(or use /v1/responses with background: true)."
)


def error_body(error: GatewayError) -> dict[str, Any]:
    """Anthropic's error shape, the field named in the message as Anthropic names it
    (`messages.0.content: ...`) and in `param` (an extra key its clients ignore)."""
    kind = _ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    if error.status == 503:
        kind = "overloaded_error"
    message = error.message
    if error.param and not message.startswith(error.param):
        message = f"{error.param}: {message}"
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    if error.param:
        body["error"]["param"] = error.param
    return body


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def ignored_fields(body: Mapping[str, Any]) -> list[str]:
    """The fields of this body a translated route accepts without applying: those it knows
    (IGNORED) and any newer one, never refused (Anthropic adds fields with each beta)."""
    names = sorted(name for name in body if name not in TRANSLATED)
    config = body.get("output_config")
    if isinstance(config, dict):
        names += [f"output_config.{key}" for key in sorted(config) if key not in ("effort", "format")]
    if _has_cache_control(body):
        names.append("cache_control")
    return names


def _has_cache_control(body: Mapping[str, Any]) -> bool:
    system = body.get("system")
    blocks: list[Any] = list(system) if isinstance(system, list) else []
    for message in body.get("messages") or ():
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            blocks += message["content"]
    blocks += list(body.get("tools") or ())
    return any(isinstance(b, dict) and "cache_control" in b for b in blocks)


def check_request(body: Any) -> dict[str, Any]:
    """The checks Anthropic makes of every request, wherever it goes: a 400 naming the field."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("Field required.", "model")
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is float and max_tokens.is_integer():  # 1024.0: an integer, to JSON and to Anthropic
        max_tokens = body["max_tokens"] = int(max_tokens)
    if type(max_tokens) is not int:
        raise _bad("Field required (an integer)." if max_tokens is None else "Must be an integer.", "max_tokens")
    if max_tokens < 1:
        raise _bad("Must be greater than or equal to 1.", "max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad("Field required (an array of messages).", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad("Must be an object.", f"messages.{i}")
        if message.get("role") not in ("user", "assistant", "system"):
            raise _bad("Input should be 'user', 'assistant' or 'system'.", f"messages.{i}.role")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise _bad("Must be a string or an array of content blocks.", f"messages.{i}.content")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _bad("Each content block must be an object with a 'type'.", f"messages.{i}.content.{j}")
    for name in ("stream",):
        if name in body and not isinstance(body[name], bool):
            raise _bad("Must be a boolean.", name)
    return body


def to_responses_body(body: dict[str, Any], *, output_floor: bool = True) -> dict[str, Any]:
    """A Responses create body for this (checked) Messages body; InvalidRequest names what
    cannot be translated. `output_floor`: a Responses server's least `max_output_tokens` is 16
    (a smaller cap is raised to it, not refused: Claude Code asks for 1 token to probe)."""
    items: list[dict[str, Any]] = []
    for i, message in enumerate(body["messages"]):
        role, content = message["role"], message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if role == "system":  # a system message mid-conversation (Claude Code sends them)
            text = _system_text(content, f"messages.{i}.content")
            items.append({"type": "message", "role": "system", "content": [{"type": "input_text", "text": text}]})
        elif role == "user":
            _user_items(content, items, f"messages.{i}.content")
        else:
            _assistant_items(content, items, f"messages.{i}.content")
    out: dict[str, Any] = {"model": body["model"], "input": items, "store": False, "stream": bool(body.get("stream"))}
    limit = body["max_tokens"]
    out["max_output_tokens"] = max(limit, 16) if output_floor else limit
    system = body.get("system")
    if system is not None:
        out["instructions"] = _system_text(system)
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            out[name] = body[name]
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("Must be an array of tools.", "tools")
        out["tools"] = [_tool(tool, f"tools.{j}") for j, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            raise _bad("Input should be an object whose type is auto, any, tool or none.", "tool_choice")
        kind = choice["type"]
        if kind == "tool":
            if not isinstance(choice.get("name"), str):
                raise _bad("Field required.", "tool_choice.name")
            out["tool_choice"] = {"type": "function", "name": choice["name"]}
        else:
            out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
        if choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled", "adaptive"):
            raise _bad("Input should be an object whose type is enabled, disabled or adaptive.", "thinking")
        if thinking["type"] == "enabled":
            budget = thinking.get("budget_tokens")
            if type(budget) is not int or budget < 1024:
                raise _bad("Must be an integer of at least 1024.", "thinking.budget_tokens")
            out["reasoning"] = {"effort": next((e for top, e in _EFFORTS if budget <= top), "high")}
        elif thinking["type"] == "adaptive":
            out["reasoning"] = {"effort": "medium"}
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict):
            raise _bad("Must be an object.", "output_config")
        effort = config.get("effort")
        if effort is not None:
            if effort not in _EFFORT_LEVELS:
                raise _bad(f"Input should be one of {', '.join(_EFFORT_LEVELS)}.", "output_config.effort")
            out["reasoning"] = {"effort": _EFFORT_LEVELS[effort]}
        fmt = config.get("format")
        if fmt is not None:
            if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
                raise _bad("Input should be {'type': 'json_schema', 'schema': {...}}.", "output_config.format")
            out["text"] = {"format": {"type": "json_schema", "name": "output", "schema": fmt["schema"], "strict": True}}
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise _bad("Must be an object.", "metadata")
        user = metadata.get("user_id")
        if user is not None:
            if not isinstance(user, str):
                raise _bad("Must be a string.", "metadata.user_id")
            if len(user) <= 64:  # an id, not Claude Code's JSON of device and session
                out["safety_identifier"] = user
    return out


def _system_text(system: Any, param: str = "system") -> str:
    if isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise _bad("Must be a string or an array of text blocks.", param)
    texts = []
    for k, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise _bad("Each system block must be a text block.", f"{param}.{k}")
        texts.append(block["text"])
    return "\n\n".join(texts)


def _source_url(source: Any, param: str, *, document: bool = False) -> tuple[str, str]:
    """("data", data URL) or ("url", url) of an image or document block's source."""
    if not isinstance(source, dict):
        raise _bad("Field required.", f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise _bad("A base64 source needs media_type and data.", f"{param}.source")
        return "data", f"data:{media};base64,{data}"
    if kind == "url" and isinstance(source.get("url"), str):
        return "url", source["url"]
    raise _bad(f"Source type {kind!r} is not supported for this model.", f"{param}.source.type")


def _user_items(blocks: list[dict[str, Any]], items: list[dict[str, Any]], param: str) -> None:
    parts: list[dict[str, Any]] = []

    def flush() -> None:
        if parts:
            items.append({"type": "message", "role": "user", "content": list(parts)})
            parts.clear()

    for j, block in enumerate(blocks):
        kind, where = block["type"], f"{param}.{j}"
        if kind == "text":
            parts.append({"type": "input_text", "text": _str(block, "text", where)})
        elif kind == "image":
            _, url = _source_url(block.get("source"), where)
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        elif kind == "document":
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                parts.append({"type": "input_text", "text": _str(source, "data", f"{where}.source")})
                continue
            how, url = _source_url(source, where, document=True)
            name = block.get("title") if isinstance(block.get("title"), str) else "document.pdf"
            part = {"type": "input_file", "filename": name}
            part["file_data" if how == "data" else "file_url"] = url
            parts.append(part)
        elif kind == "tool_result":
            flush()
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise _bad("Field required.", f"{where}.tool_use_id")
            output = _result_text(block.get("content"), f"{where}.content")
            if block.get("is_error") is True:
                output = f"Error: {output}"
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise _bad(f"Content blocks of type {kind!r} are not supported for this model.", f"{where}.type")
    flush()


def _assistant_items(blocks: list[dict[str, Any]], items: list[dict[str, Any]], param: str) -> None:
    for j, block in enumerate(blocks):
        kind, where = block["type"], f"{param}.{j}"
        if kind == "text":
            text = _str(block, "text", where)
            if text:
                items.append(
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                )
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise _bad("Field required.", f"{where}.id")
            if not isinstance(name, str) or not name:
                raise _bad("Field required.", f"{where}.name")
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise _bad("Must be an object.", f"{where}.input")
            items.append(
                {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue  # Anthropic's signature means nothing to another upstream
        else:
            raise _bad(f"Content blocks of type {kind!r} are not supported in an assistant turn.", f"{where}.type")


def _str(block: Mapping[str, Any], name: str, param: str) -> str:
    value = block.get(name)
    if not isinstance(value, str):
        raise _bad("Field required (a string).", f"{param}.{name}")
    return value


def _result_text(content: Any, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad("Must be a string or an array of content blocks.", param)
    texts = []
    for k, block in enumerate(content):
        if not isinstance(block, dict):
            raise _bad("Must be an object.", f"{param}.{k}")
        if block.get("type") == "text":
            texts.append(_str(block, "text", f"{param}.{k}"))
        else:
            texts.append(f"[{block.get('type')} omitted]")  # an image in a tool result: text-only upstreams
    return "\n".join(texts)


def _tool(tool: Any, param: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise _bad("Must be an object.", param)
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise _bad(
            f"Server tool {kind!r} is Anthropic's own: it is served only on a route to an Anthropic upstream.",
            f"{param}.type",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise _bad("Field required.", f"{param}.name")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise _bad("Field required (a JSON schema object).", f"{param}.input_schema")
    out: dict[str, Any] = {"type": "function", "name": name, "parameters": schema, "strict": False}
    if isinstance(tool.get("description"), str):
        out["description"] = tool["description"]
    return out


def anthropic_usage(usage: Usage) -> dict[str, Any]:
    """The gateway's usage (input counting cache reads and writes, OpenAI's convention) as
    Anthropic's (input excluding them)."""
    read, written = usage.cached_tokens, usage.cache_write_tokens
    return {
        "input_tokens": max(0, usage.input_tokens - read - written),
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
    }


def sse(event: dict[str, Any]) -> bytes:
    """One event on Anthropic's wire: its type named in `event:` and again in the data."""
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + dumpb(event) + b"\n\n"


class MessagesWriter:
    """Deltas to Anthropic's Messages: `feed` per delta (the events that stream it),
    `opening`/`closing` around them, or `message()` at the end for a JSON answer.

    Blocks are written one after another, as Anthropic's stream requires: a text or thinking
    block stays open while its deltas come, and is stopped when another kind begins. Tool calls
    are held and each written whole (one `input_json_delta`) when the upstream's answer ends: a
    Chat upstream may interleave the fragments of parallel calls, which Anthropic's stream, one
    block at a time, cannot carry; a tool call is acted on only once whole anyway."""

    def __init__(self, model: str, message_id: str) -> None:
        self.model = model
        self.id = message_id
        self.blocks: list[dict[str, Any]] = []  # the message's content, as it accumulates
        self.open: int | None = None  # the index of the block being streamed
        self.calls: dict[int, dict[str, Any]] = {}  # tool call index -> id, name, argument fragments
        self.usage = Usage()
        self.finish = "stop"
        self.created = int(time.time())

    def opening(self) -> list[dict[str, Any]]:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def _stop_open(self, events: list[dict[str, Any]]) -> None:
        if self.open is not None:
            events.append({"type": "content_block_stop", "index": self.open})
            self.open = None

    def _start(self, block: dict[str, Any], events: list[dict[str, Any]]) -> int:
        self._stop_open(events)
        index = len(self.blocks)
        self.blocks.append(block)
        events.append({"type": "content_block_start", "index": index, "content_block": dict(block)})
        self.open = index
        return index

    def feed(self, delta: Delta) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if isinstance(delta, (TextDelta, RefusalDelta)):
            if not delta.text:
                return events
            if self.open is None or self.blocks[self.open]["type"] != "text":
                self._start({"type": "text", "text": ""}, events)
            assert self.open is not None
            self.blocks[self.open]["text"] += delta.text
            events.append(
                {"type": "content_block_delta", "index": self.open, "delta": {"type": "text_delta", "text": delta.text}}
            )
        elif isinstance(delta, ReasoningDelta):
            if not delta.text:
                return events
            if self.open is None or self.blocks[self.open]["type"] != "thinking":
                self._start({"type": "thinking", "thinking": "", "signature": ""}, events)
            assert self.open is not None
            self.blocks[self.open]["thinking"] += delta.text
            events.append(
                {
                    "type": "content_block_delta",
                    "index": self.open,
                    "delta": {"type": "thinking_delta", "thinking": delta.text},
                }
            )
        elif isinstance(delta, ReasoningSignature):
            if self.open is not None and self.blocks[self.open]["type"] == "thinking":
                self.blocks[self.open]["signature"] += delta.signature
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": self.open,
                        "delta": {"type": "signature_delta", "signature": delta.signature},
                    }
                )
        elif isinstance(delta, ToolCallDelta):
            self._tool_call(delta)
        elif isinstance(delta, Usage):
            self.usage = self.usage + delta
        elif isinstance(delta, Finish):
            self.finish = delta.reason
        return events

    def _tool_call(self, delta: ToolCallDelta) -> None:
        call = self.calls.get(delta.index)
        if call is None:
            call = self.calls[delta.index] = {"id": delta.call_id or "", "name": delta.name or "", "arguments": []}
        else:
            call["id"] = call["id"] or delta.call_id or ""
            call["name"] = call["name"] or delta.name or ""
        call["arguments"].append(delta.arguments)

    def _calls(self, events: list[dict[str, Any]]) -> None:
        """The tool calls, each a whole block (see the class docstring)."""
        for index in sorted(self.calls):
            call = self.calls.pop(index)
            block = {"type": "tool_use", "id": call["id"] or f"toolu_gw{index}", "name": call["name"], "input": {}}
            at = self._start(block, events)
            arguments = "".join(call["arguments"])
            block["input"] = _arguments(arguments)
            if arguments:
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": at,
                        "delta": {"type": "input_json_delta", "partial_json": arguments},
                    }
                )

    def _stop_reason(self) -> str:
        return STOP_REASON.get(self.finish, "end_turn")

    def closing(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        self._calls(events)
        self._stop_open(events)
        usage = anthropic_usage(self.usage)
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason(), "stop_sequence": None},
                "usage": usage,
            }
        )
        events.append({"type": "message_stop"})
        return events

    def message(self) -> dict[str, Any]:
        self._calls([])
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.blocks,
            "stop_reason": self._stop_reason(),
            "stop_sequence": None,
            "usage": anthropic_usage(self.usage),
        }


def _arguments(text: str) -> Any:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"value": value}


def prefix_hashes(messages: list[Any]) -> list[bytes]:
    """`hashes[i]`: a digest of messages[0..i] (chained, so each is one hash of one message more),
    as their substance (`_unmarked`): Claude Code moves its `cache_control` mark to the newest
    message every turn, and resends an earlier message's blocks as a string."""
    hashes, last = [], b""
    for message in messages:
        unmarked = _unmarked(message)
        last = hashlib.blake2b(last + json.dumps(unmarked, sort_keys=True).encode(), digest_size=16).digest()
        hashes.append(last)
    return hashes


def _unmarked(message: Any) -> Any:
    """The message as compared: content as blocks (a string is one text block: Claude Code sends
    a system message as blocks, then as a string) without `cache_control`."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    if not isinstance(content, list) or not any(isinstance(b, dict) and "cache_control" in b for b in content):
        return message
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b for b in content]
    return {**message, "content": blocks}


def stored_input(body: dict[str, Any], start: int) -> list[dict[str, Any]]:
    """The Responses input items of messages[start:], as stored (ids given); InvalidRequest for
    what has no item (the caller then does not store)."""
    # Only the messages: what else the request carries (Anthropic's server tools, on an Anthropic
    # route) has no bearing on what is stored.
    tail = {"model": body["model"], "max_tokens": body["max_tokens"], "messages": body["messages"][start:]}
    return normalize_input(to_responses_body(tail)["input"])


def output_items(writer: MessagesWriter) -> list[dict[str, Any]]:
    """The answer's blocks as Responses output items."""
    items: list[dict[str, Any]] = []
    for block in writer.blocks:
        kind = block["type"]
        if kind == "text":
            items.append(
                {
                    "type": "message",
                    "id": new_id("msg"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": block["text"], "annotations": []}],
                }
            )
        elif kind == "thinking":
            items.append(
                {
                    "type": "reasoning",
                    "id": new_id("rs"),
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": block["thinking"]}],
                }
            )
        elif kind == "tool_use":
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc"),
                    "call_id": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block["input"]),
                    "status": "completed",
                }
            )
    return items
