"""Anthropic's Messages API (provider kind `anthropic`): the request built from the gateway's
context, and the upstream's answer (streamed events or a message) read back as deltas.

Mapping: instructions and system/developer messages become `system`; user content parts
become text, image and document blocks; function calls become `tool_use` blocks of the
assistant turn and their outputs `tool_result` blocks of the next user turn (turns of one role
are merged: the API wants them alternating); thinking blocks come back as reasoning, their
signature sealed into the item's `encrypted_content` and sent back with it on later turns. Stop
reasons: end_turn/stop_sequence/pause_turn -> stop, max_tokens -> length, tool_use ->
tool_calls, refusal -> content_filter. Usage counts cache reads and writes as input tokens
(OpenAI's convention), cache reads also as cached tokens.

Prompt caching (protocol/caching.py): `prompt_cache_breakpoint`s and the cache options become
`cache_control` marks on content blocks; `service_tier` becomes Anthropic's (`auto`,
`standard_only`). `text.format` json_schema becomes Anthropic's structured output,
`output_config.format` (GA; the provider option `structured_outputs: "output_format"` sends the
earlier beta's top-level `output_format` instead, with its `anthropic-beta` header); json_object,
which has no counterpart, an instruction in the system prompt.
"""

from __future__ import annotations

import json
from typing import Any

from .anthropic_schema import anthropic_json_schema
from .caching import ANTHROPIC_SERVICE_TIERS, cache_control, place_anthropic_breakpoints
from .client_tools import CALL_ITEM_KIND, OUTPUT_ITEM_TYPES, call_as_chat, output_as_text
from .deltas import (
    Delta,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UpstreamFailed,
    Usage,
)
from .prefix import ConvertedPrefix, converted
from .request import CreateRequest
from .surface import SENT_FIELDS
from .tools import Tool, chosen_upstream_name, namespaced_name

# The sampling numbers the Messages API takes as sent (protocol/surface.py says which).
_SENT_AS_IS = tuple(
    name
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty")
    if name in SENT_FIELDS["anthropic"]
)
API_VERSION = "2023-06-01"
# The beta that introduced structured outputs (top-level `output_format`), before they became
# `output_config.format`; some Anthropic-compatible servers still speak only the beta.
STRUCTURED_OUTPUTS_BETA = "structured-outputs-2025-11-13"
# json_object (OpenAI's JSON mode) has no Anthropic counterpart: structured outputs take only
# closed object schemas (`additionalProperties: false`), which no schema of "any object" is. The
# mode is asked of the model in the system prompt instead, as OpenAI's JSON mode itself requires
# the prompt to ask for JSON.
JSON_OBJECT_INSTRUCTION = "Answer with one valid JSON object and nothing before or after it."
DEFAULT_MAX_TOKENS = 4096  # the API requires max_tokens; a provider's options may set another
THINKING_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "model_context_window_exceeded": "length",
}


def build_messages_request(
    req: CreateRequest,
    items: list[dict[str, Any]],
    *,
    upstream_model: str,
    stream: bool,
    tools: list[Tool] | None = None,
    options: dict[str, Any] | None = None,
    prefix: ConvertedPrefix | None = None,
    scope: str = "",
) -> dict[str, Any]:
    """`prefix`: a WebSocket lane's converted messages, reused when they begin these items and
    were converted alike (`scope`, the target, names the upstream and whose signed thinking)."""
    options = options or {}
    tools = req.tools if tools is None else tools
    instructions = req.instructions
    conversion = converted(prefix, ("anthropic", scope, instructions), items, lambda: AnthropicConversion(instructions))
    system = conversion.system_text()
    # Placing the marks changes blocks: a kept conversion gives a copy of those it may change.
    messages = conversion.messages if prefix is None else conversion.for_placement()
    if (req.text or {}).get("format", {}).get("type") == "json_object":
        system = f"{system}\n\n{JSON_OBJECT_INSTRUCTION}" if system else JSON_OBJECT_INSTRUCTION
    place_anthropic_breakpoints(messages, req)
    body: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": req.max_output_tokens or int(options.get("max_tokens", DEFAULT_MAX_TOKENS)),
        "messages": messages,
        "stream": stream,
    }
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [_tool_param(t) for t in tools]
        choice: Any = req.tool_choice
        no_parallel = req.parallel_tool_calls is False
        if isinstance(choice, dict):
            forced = None if choice["type"] == "allowed_tools" else chosen_upstream_name(choice, tools)
            mode = "tool" if forced else ("any" if choice.get("mode") == "required" else "auto")
            body["tool_choice"] = {"type": mode, **({"name": forced} if forced else {})}
        elif choice in ("auto", "required", "none"):
            body["tool_choice"] = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
        if no_parallel and body.get("tool_choice", {}).get("type") != "none":
            body.setdefault("tool_choice", {"type": "auto"})["disable_parallel_tool_use"] = True
    for name in _SENT_AS_IS:
        value = getattr(req, name, None)
        if value is not None:
            body[name] = value
    effort = (req.reasoning or {}).get("effort")
    if effort in THINKING_BUDGET:
        budget = THINKING_BUDGET[effort]
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(body["max_tokens"], budget + 1024)
        body.pop("temperature", None)  # thinking allows no temperature other than the default
        body.pop("top_p", None)
    tier = _service_tier(req)
    if tier:
        body["service_tier"] = tier
    output_format = structured_output(req.text)
    if output_format is not None:
        if options.get("structured_outputs") == "output_format":
            body["output_format"] = output_format
        else:
            body["output_config"] = {"format": output_format}
    extra = dict(options.get("extra_body") or {})
    if isinstance(extra.get("output_config"), dict) and "output_config" in body:
        extra["output_config"] = {**extra["output_config"], **body["output_config"]}  # the client's format wins
    body.update(extra)
    return body


def structured_output(text: dict[str, Any]) -> dict[str, Any] | None:
    """`text.format` json_schema as Anthropic's JSON output format: the schema in the subset its
    decoder takes (anthropic_schema.py; `strict` has no counterpart, the schema always binds).
    None for text and json_object (see JSON_OBJECT_INSTRUCTION)."""
    fmt = (text or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "schema": anthropic_json_schema(fmt["schema"])}
    return None


def _tool_param(tool: Tool) -> dict[str, Any]:
    param: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters or {"type": "object"}}
    if tool.description:
        param["description"] = tool.description
    return param


def to_messages(items: list[dict[str, Any]], instructions: str | None) -> tuple[str, list[dict[str, Any]]]:
    """(system, messages) for the Messages API, turns of one role merged."""
    conversion = AnthropicConversion(instructions)
    conversion.extend(items)
    return conversion.system_text(), conversion.messages


class AnthropicConversion:
    """Items as the Messages API's system text and messages, item by item: a WebSocket lane keeps
    one to extend on its next turn (protocol/prefix.py). Extending writes only to the last
    message (turns of one role merge into it); placing the cache marks writes to the blocks that
    carry one and to the last message's, which `for_placement` copies first."""

    __slots__ = ("system", "messages", "marked")

    def __init__(self, instructions: str | None) -> None:
        self.system: list[str] = [instructions] if instructions else []
        self.messages: list[dict[str, Any]] = []
        self.marked: list[int] = []  # the messages holding a block with `cache_control`

    def system_text(self) -> str:
        return "\n\n".join(s for s in self.system if s)

    def resumed(self) -> AnthropicConversion:
        copy = AnthropicConversion.__new__(AnthropicConversion)
        copy.system = list(self.system)
        copy.messages = list(self.messages)
        if copy.messages:
            last = copy.messages[-1]
            copy.messages[-1] = {**last, "content": list(last["content"])}
        copy.marked = list(self.marked)
        return copy

    def for_placement(self) -> list[dict[str, Any]]:
        """The messages, with those place_anthropic_breakpoints may change copied (the last one,
        and those with a mark), so that placing the marks leaves this conversion as it is."""
        messages = list(self.messages)
        for index in {*self.marked, len(messages) - 1} if messages else ():
            message = messages[index]
            messages[index] = {
                **message,
                "content": [
                    {**block, "cache_control": dict(block["cache_control"])}
                    if "cache_control" in block
                    else dict(block)
                    for block in message["content"]
                ],
            }
        return messages

    def _add(self, role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        messages = self.messages
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += blocks
        else:
            messages.append({"role": role, "content": blocks})
        if any("cache_control" in block for block in blocks) and self.marked[-1:] != [len(messages) - 1]:
            self.marked.append(len(messages) - 1)

    def extend(self, items: list[dict[str, Any]]) -> None:
        add, system = self._add, self.system
        for item in items:
            kind = item["type"]
            if kind == "message":
                role, content = item["role"], item["content"]
                if role in ("system", "developer"):
                    system.append(_text_of(content))
                elif role == "assistant":
                    add("assistant", [{"type": "text", "text": _text_of(content)}] if _text_of(content) else [])
                else:
                    add("user", _user_blocks(content))
            elif kind == "function_call" or kind in CALL_ITEM_KIND:
                if kind == "function_call":
                    name = namespaced_name(item["namespace"], item["name"]) if item.get("namespace") else item["name"]
                    call_id, arguments = item["call_id"], item.get("arguments") or "{}"
                else:
                    call = call_as_chat(item)
                    call_id, name, arguments = call["id"], call["function"]["name"], call["function"]["arguments"]
                add("assistant", [{"type": "tool_use", "id": call_id, "name": name, "input": _json_object(arguments)}])
            elif kind == "function_call_output":
                output = item["output"]
                result = {
                    "type": "tool_result",
                    "tool_use_id": item["call_id"],
                    "content": output if isinstance(output, str) else _text_of(output),
                }
                marks = [] if isinstance(output, str) else [p for p in output if p.get("prompt_cache_breakpoint")]
                if marks:
                    result["cache_control"] = cache_control(marks[-1]["prompt_cache_breakpoint"])
                add("user", [result])
            elif kind in OUTPUT_ITEM_TYPES:
                add("user", [{"type": "tool_result", "tool_use_id": item["call_id"], "content": output_as_text(item)}])
            elif kind == "reasoning" and item.get("signature"):
                # Signed thinking (upstreams/anthropic.py opened it from the gateway's seal): sent back
                # first in its assistant turn, as the API requires with tool use.
                add(
                    "assistant",
                    [{"type": "thinking", "thinking": item.get("thinking") or "", "signature": item["signature"]}],
                )
            # Other reasoning items are not sent: Anthropic accepts thinking only with its signature.


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or p.get("refusal") or "" for p in content or [] if isinstance(p, dict))


def _json_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "text", "output_text"):
            blocks.append({"type": "text", "text": part.get("text") or ""})
        elif kind == "input_image":
            url = part.get("image_url") or ""
            blocks.append({"type": "image", "source": _source(url)})
        elif kind == "input_file" and part.get("file_data"):
            source = _source(part["file_data"])
            blocks.append({"type": "document", "source": source})
        elif kind == "input_file" and part.get("file_url"):
            blocks.append({"type": "document", "source": {"type": "url", "url": part["file_url"]}})
        else:
            continue
        if part.get("prompt_cache_breakpoint"):
            blocks[-1]["cache_control"] = cache_control(part["prompt_cache_breakpoint"])
    return blocks


def _service_tier(req: CreateRequest) -> str | None:
    return ANTHROPIC_SERVICE_TIERS.get(req.service_tier or "")


def applied_fields(req: CreateRequest) -> frozenset[str]:
    """What this translation applies of the fields whose use depends on the request (the
    table's REPORTED_FIELDS): `service_tier` where Anthropic has a counterpart of its value."""
    return frozenset({"service_tier"}) if _service_tier(req) else frozenset()


def _source(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": media, "data": data}
    return {"type": "url", "url": url}


def usage_of(raw: Any, base: Usage | None = None) -> Usage:
    """Anthropic's usage: input excludes cache reads and writes, which OpenAI's includes. Cache
    writes are counted with their 1-hour part (`cache_creation.ephemeral_1h_input_tokens`, priced
    apart from 5-minute writes); those are not the SDK's 30-minute and 12-hour buckets, so the
    public `cache_write_tokens_details` stays unset."""
    raw = raw if isinstance(raw, dict) else {}
    base = base or Usage()
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    lifetimes = raw.get("cache_creation")
    hour = int(lifetimes.get("ephemeral_1h_input_tokens") or 0) if isinstance(lifetimes, dict) else 0
    inputs = int(raw.get("input_tokens") or 0) + read + written
    return Usage(
        input_tokens=inputs or base.input_tokens,
        output_tokens=int(raw.get("output_tokens") or 0) or base.output_tokens,
        cached_tokens=read or base.cached_tokens,
        cache_write_tokens=written or base.cache_write_tokens,
        cache_write_1h_tokens=min(hour, written) if written else base.cache_write_1h_tokens,
    )


class EventDecoder:
    """Decodes the Messages stream (message_start, content_block_*, message_delta,
    message_stop, ping, error) into deltas, statefully."""

    def __init__(self) -> None:
        self._blocks: dict[int, tuple[str, int]] = {}  # block index -> (type, tool call index)
        self._calls = 0
        self._usage = Usage()
        self._stop: str | None = None
        self.finished = False

    def feed(self, event: dict[str, Any]) -> list[Delta]:
        kind = event.get("type")
        if kind == "message_start":
            self._usage = usage_of((event.get("message") or {}).get("usage"))
            return []
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            index = int(event.get("index", len(self._blocks)))
            if block.get("type") == "tool_use":
                self._blocks[index] = ("tool_use", self._calls)
                self._calls += 1
                initial = block.get("input")
                return [
                    ToolCallDelta(
                        self._calls - 1,
                        call_id=block.get("id"),
                        name=block.get("name"),
                        arguments=json.dumps(initial) if initial else "",
                    )
                ]
            self._blocks[index] = (str(block.get("type")), -1)
            text = block.get("text") or block.get("thinking") or ""
            if text and block.get("type") == "text":
                return [TextDelta(text)]
            if text and block.get("type") == "thinking":
                return [ReasoningDelta(text)]
            return []
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            block_type, call = self._blocks.get(int(event.get("index", -1)), ("", -1))
            dtype = delta.get("type")
            if dtype == "text_delta":
                return [TextDelta(delta.get("text") or "")]
            if dtype == "thinking_delta":
                return [ReasoningDelta(delta.get("thinking") or "")]
            if dtype == "input_json_delta" and block_type == "tool_use":
                return [ToolCallDelta(call, arguments=delta.get("partial_json") or "")]
            if dtype == "signature_delta" and block_type == "thinking":
                return [ReasoningSignature(delta.get("signature") or "")]
            return []  # signature_delta, citations_delta, and types newer than this code
        if kind == "message_delta":
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
            self._usage = usage_of(event.get("usage"), self._usage)
            return []
        if kind == "message_stop":
            self.finished = True
            reason = _STOP.get(self._stop or "end_turn", "stop")
            return [self._usage, Finish(reason)]
        if kind == "error":
            error = event.get("error") or {}
            raise UpstreamFailed(str(error.get("type") or "error"), str(error.get("message") or "error"))
        return []  # ping, and event types newer than this code


def message_to_deltas(message: dict[str, Any]) -> list[Delta]:
    """A whole (non-streamed) message as deltas."""
    deltas: list[Delta] = []
    calls = 0
    for block in message.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            deltas.append(TextDelta(block.get("text") or ""))
        elif kind == "thinking":
            deltas.append(ReasoningDelta(block.get("thinking") or ""))
            if block.get("signature"):
                deltas.append(ReasoningSignature(block["signature"]))
        elif kind == "tool_use":
            deltas.append(
                ToolCallDelta(
                    calls,
                    call_id=block.get("id"),
                    name=block.get("name"),
                    arguments=json.dumps(block.get("input") or {}),
                )
            )
            calls += 1
    reason = _STOP.get(message.get("stop_reason") or "end_turn", "stop")
    if reason == "content_filter" and not deltas:
        deltas.append(RefusalDelta("The model declined to answer."))
    return deltas + [usage_of(message.get("usage")), Finish(reason)]
