"""Items <-> Chat Completions: the request body for an upstream, and its replies as deltas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .caching import upstream_cache_fields
from .client_tools import CALL_ITEM_KIND, OUTPUT_ITEM_TYPES, call_as_chat, output_as_text, screenshot_url
from .deltas import Delta, Finish, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta, Usage
from .errors import UpstreamError
from .prefix import ConvertedPrefix, converted
from .request import CreateRequest
from .surface import SENT_FIELDS
from .tools import Tool, chosen_upstream_name, namespaced_name

# The sampling numbers a Chat Completions upstream takes as sent (protocol/surface.py says which).
_SENT_AS_IS = tuple(
    name
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty")
    if name in SENT_FIELDS["chat_completions"]
)
FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "eos": "stop",
}


@dataclass(slots=True)
class ChatOptions:
    """Per-provider quirks the adapter absorbs."""

    max_tokens_param: str = "max_tokens"  # or "max_completion_tokens"
    developer_role: str = "system"  # how `developer` messages (and instructions) are sent
    object_tool_choice: bool = True  # False: the upstream rejects {"type": "function", ...}
    send_strict: bool = True
    # Give the upstream its earlier reasoning back as `reasoning_content` on the assistant
    # message (llama.cpp, vLLM and SGLang read it; DeepSeek's own API refuses it).
    send_reasoning: bool = False
    # OpenAI's prompt caching fields (`prompt_cache_key`, `prompt_cache_retention`,
    # `prompt_cache_options`, content parts' `prompt_cache_breakpoint`) and `service_tier`: sent
    # only to servers that take them (OpenAI does; strict servers refuse unknown fields).
    send_prompt_cache: bool = False
    send_service_tier: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)


def applied_fields(req: CreateRequest, options: ChatOptions) -> frozenset[str]:
    """What this translation applies of the fields whose use depends on the provider (the
    table's REPORTED_FIELDS): the cache fields and `service_tier` where the provider takes
    them, as `build_chat_request` sends them."""
    applied = set(upstream_cache_fields(req)) if options.send_prompt_cache else set()
    if options.send_service_tier and req.service_tier:
        applied.add("service_tier")
    return frozenset(applied)


def reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text as `send_reasoning` gives it back (its reasoning text, else its
    summary); empty: the item is not sent."""
    return "".join(
        p.get("text", "") for p in item.get("content") or [] if p.get("type") == "reasoning_text"
    ) or "".join(p.get("text", "") for p in item.get("summary") or [])


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "".join(p.get("text", "") for p in output if p.get("type") == "input_text")


def _user_content(parts: list[dict[str, Any]], breakpoints: bool = False) -> str | list[dict[str, Any]]:
    """`breakpoints`: the parts' `prompt_cache_breakpoint`s go with them (which needs parts,
    not the plain string a text-only message otherwise becomes)."""
    marked = breakpoints and any(p.get("prompt_cache_breakpoint") for p in parts)
    if not marked and all(p["type"] == "input_text" for p in parts):
        return "".join(p["text"] for p in parts) if len(parts) == 1 else "\n".join(p["text"] for p in parts)
    out: list[dict[str, Any]] = []
    for p in parts:
        if p["type"] == "input_text":
            out.append({"type": "text", "text": p["text"]})
        elif p["type"] == "input_image":
            if not p.get("image_url"):
                continue
            out.append({"type": "image_url", "image_url": {"url": p["image_url"], "detail": p.get("detail", "auto")}})
        elif p["type"] == "input_file":
            if not p.get("file_data") and not p.get("file_id"):
                # Chat Completions has no file URL part; pass the URL on as text context.
                name = f" ({p['filename']})" if p.get("filename") else ""
                out.append({"type": "text", "text": f"[file{name}: {p.get('file_url', '')}]"})
                continue
            file: dict[str, Any] = {k: p[k] for k in ("file_data", "file_id", "filename") if p.get(k)}
            out.append({"type": "file", "file": file})
            continue  # a file part takes no breakpoint in Chat Completions
        else:
            continue
        if marked and p.get("prompt_cache_breakpoint"):
            out[-1]["prompt_cache_breakpoint"] = p["prompt_cache_breakpoint"]
    return out


def items_to_messages(
    items: list[dict[str, Any]], instructions: str | None, options: ChatOptions | None = None
) -> list[dict[str, Any]]:
    conversion = ChatConversion(instructions, options or ChatOptions())
    conversion.extend(items)
    return conversion.messages


class ChatConversion:
    """Items as Chat Completions messages, item by item: a WebSocket lane keeps one to extend on
    its next turn (protocol/prefix.py). Extending writes only to the last message (an assistant
    turn that text and tool calls join) and to the reasoning still waiting for its turn."""

    __slots__ = ("messages", "options", "pending_reasoning")

    def __init__(self, instructions: str | None, options: ChatOptions) -> None:
        self.options = options
        self.messages: list[dict[str, Any]] = []
        self.pending_reasoning: list[str] = []  # reasoning waits for the assistant turn it belongs to
        if instructions:
            self.messages.append({"role": options.developer_role, "content": instructions})

    def resumed(self) -> ChatConversion:
        copy = ChatConversion.__new__(ChatConversion)
        copy.options = self.options
        copy.messages = list(self.messages)
        if copy.messages:  # the one message extending may change: its own dict and call list
            last = copy.messages[-1] = dict(copy.messages[-1])
            if "tool_calls" in last:
                last["tool_calls"] = list(last["tool_calls"])
        copy.pending_reasoning = list(self.pending_reasoning)
        return copy

    def extend(self, items: list[dict[str, Any]]) -> None:
        options, messages, pending_reasoning = self.options, self.messages, self.pending_reasoning
        for item in items:
            kind = item["type"]
            if kind == "message":
                role = item["role"]
                if role == "assistant":
                    text = "".join(p.get("text") or p.get("refusal") or "" for p in item["content"])
                    last = messages[-1] if messages else None
                    if last is not None and last["role"] == "assistant":
                        # One assistant turn: text written around tool calls must not
                        # come between the calls and their outputs (upstreams reject that).
                        last["content"] = "\n".join(t for t in (last["content"], text) if t)
                    else:
                        messages.append({"role": "assistant", "content": text})
                else:
                    if role == "developer":
                        role = options.developer_role
                    messages.append(
                        {"role": role, "content": _user_content(item["content"], options.send_prompt_cache)}
                    )
            elif kind == "function_call" or kind in CALL_ITEM_KIND:
                if kind == "function_call":
                    name = item["name"]
                    if item.get("namespace"):
                        name = namespaced_name(item["namespace"], name)
                    call = {
                        "id": item["call_id"],
                        "type": "function",
                        "function": {"name": name, "arguments": item["arguments"] or "{}"},
                    }
                else:
                    call = call_as_chat(item)
                _assistant_turn(messages).setdefault("tool_calls", []).append(call)
            elif kind == "function_call_output":
                messages.append(
                    {"role": "tool", "tool_call_id": item["call_id"], "content": _output_text(item["output"])}
                )
            elif kind in OUTPUT_ITEM_TYPES:
                messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output_as_text(item)})
                image = screenshot_url(item)
                if image:  # tool messages carry text only: the screenshot follows as the user's image
                    messages.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]})
            elif kind == "reasoning" and options.send_reasoning:
                text = reasoning_text(item)
                if text:
                    pending_reasoning.append(text)
                    continue
            if pending_reasoning and messages and messages[-1]["role"] == "assistant":
                messages[-1]["reasoning_content"] = "\n".join(pending_reasoning)
                pending_reasoning.clear()
            # Otherwise reasoning items are not sent back (most Chat Completions servers reject them),
            # nor are hosted tools' items (web_search_call, ...): no upstream call produced them.


def _assistant_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message tool calls join: consecutive calls (and the text just before them)
    form one assistant turn."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        return last
    # Some upstreams reject `content: null` on assistant messages.
    messages.append({"role": "assistant", "content": ""})
    return messages[-1]


def _tool_param(tool: Tool, options: ChatOptions) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
    if tool.description:
        function["description"] = tool.description
    if tool.strict and options.send_strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def build_chat_request(
    req: CreateRequest,
    items: list[dict[str, Any]],
    *,
    upstream_model: str,
    stream: bool,
    tools: list[Tool] | None = None,
    options: ChatOptions | None = None,
    prefix: ConvertedPrefix | None = None,
    scope: str = "",
) -> dict[str, Any]:
    """`prefix`: a WebSocket lane's converted messages, reused when they begin these items and
    were converted alike (`scope`, the target, names the upstream)."""
    options = options or ChatOptions()
    tools = req.tools if tools is None else tools
    instructions = req.instructions
    key = (
        "chat_completions",
        scope,
        instructions,
        options.developer_role,
        options.send_prompt_cache,
        options.send_reasoning,
    )
    body: dict[str, Any] = {
        "model": upstream_model,
        "messages": converted(prefix, key, items, lambda: ChatConversion(instructions, options)).messages,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = [_tool_param(t, options) for t in tools]
        choice = req.tool_choice
        if isinstance(choice, dict):
            forced = None if choice["type"] == "allowed_tools" else chosen_upstream_name(choice, tools)
            if forced is not None and options.object_tool_choice:
                choice = {"type": "function", "function": {"name": forced}}
            elif forced is not None:
                choice = "required"
            elif choice["type"] == "allowed_tools":  # every tool stays visible; the gateway filters calls
                choice = choice["mode"]
            else:  # a hosted or MCP tool: nothing the upstream can be forced to
                choice = "auto"
        body["tool_choice"] = choice
        body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.max_output_tokens is not None:
        body[options.max_tokens_param] = req.max_output_tokens
    for name in _SENT_AS_IS:
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    if "message.output_text.logprobs" in req.include:
        body["logprobs"] = True
        if req.top_logprobs:
            body["top_logprobs"] = req.top_logprobs
    fmt = req.text["format"]
    if fmt["type"] == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif fmt["type"] == "json_schema":
        schema: dict[str, Any] = {"name": fmt["name"], "schema": fmt["schema"]}
        if fmt.get("strict") is not None:
            schema["strict"] = fmt["strict"]
        if fmt.get("description"):
            schema["description"] = fmt["description"]
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    if req.reasoning and req.reasoning.get("effort"):
        body["reasoning_effort"] = req.reasoning["effort"]
    if options.send_prompt_cache:
        body.update(upstream_cache_fields(req))
    if options.send_service_tier and req.service_tier:
        body["service_tier"] = req.service_tier
    body.update(options.extra_body)
    return body


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
        # OpenAI's `prompt_tokens_details.cache_write_tokens` (openai 3.x CompletionUsage), where sent.
        cache_write_tokens=int(prompt_details.get("cache_write_tokens") or 0),
    )


class ThinkSplitter:
    """Routes `<think>...</think>` at the start of content to reasoning.

    Tags may be split across chunks, so undecided text is held back until
    it can no longer be a prefix of a tag."""

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self._state = "start"  # start | think | text
        self._buffer = ""
        self._after_think = False  # newlines right after </think> are dropped, in whatever chunk

    def feed(self, text: str) -> list[Delta]:
        if self._state == "text" and not self._after_think and not self._buffer:
            return [TextDelta(text)]  # past any <think>: every chunk of an answer after its first
        out: list[Delta] = []
        self._buffer += text
        while self._buffer:
            if self._state == "text":
                if self._after_think:
                    self._buffer = self._buffer.lstrip("\n")
                    if not self._buffer:
                        return out
                    self._after_think = False
                out.append(TextDelta(self._buffer))
                self._buffer = ""
            elif self._state == "start":
                stripped = self._buffer.lstrip()
                if not stripped:
                    return out
                if stripped.startswith(self.OPEN):
                    self._buffer = stripped[len(self.OPEN) :]
                    self._state = "think"
                elif self.OPEN.startswith(stripped):
                    return out  # could still become <think>
                else:
                    self._state = "text"
            else:  # think
                end = self._buffer.find(self.CLOSE)
                if end >= 0:
                    if end:
                        out.append(ReasoningDelta(self._buffer[:end]))
                    self._buffer = self._buffer[end + len(self.CLOSE) :]
                    self._state = "text"
                    self._after_think = True
                else:
                    keep = 0
                    for k in range(min(len(self.CLOSE) - 1, len(self._buffer)), 0, -1):
                        if self.CLOSE.startswith(self._buffer[-k:]):
                            keep = k
                            break
                    emit = self._buffer[: len(self._buffer) - keep]
                    if emit:
                        out.append(ReasoningDelta(emit))
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                    return out
        return out

    def flush(self) -> list[Delta]:
        text, self._buffer = self._buffer, ""
        if not text:
            return []
        return [ReasoningDelta(text)] if self._state == "think" else [TextDelta(text)]


def _reasoning_of(message: dict[str, Any]) -> str | None:
    value = message.get("reasoning_content")
    if value is None:
        value = message.get("reasoning")
    return value if isinstance(value, str) else None


def completion_to_deltas(body: Any) -> list[Delta]:
    """A non-streaming chat.completion as the same deltas a stream would give."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
        raise UpstreamError("The upstream returned a malformed chat completion (no choices).")
    choice = body["choices"][0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UpstreamError("The upstream returned a malformed chat completion (no message).")
    out: list[Delta] = []
    reasoning = _reasoning_of(message)
    if reasoning:
        out.append(ReasoningDelta(reasoning))
    content = message.get("content")
    if isinstance(content, str) and content:
        splitter = ThinkSplitter()
        out += splitter.feed(content)
        out += splitter.flush()
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        out.append(RefusalDelta(message["refusal"]))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments) if arguments is not None else ""
        out.append(ToolCallDelta(index, call.get("id"), function.get("name"), arguments))
    usage = _usage(body.get("usage"))
    if usage:
        out.append(usage)
    out.append(Finish(FINISH_REASONS.get(choice.get("finish_reason") or "stop", "stop")))
    return out


class ChunkDecoder:
    """Decodes streamed chat.completion.chunk objects into deltas, statefully."""

    def __init__(self) -> None:
        self._think = ThinkSplitter()
        self.finish: str | None = None
        self.saw_usage = False
        # Tool-call fragments are keyed by `index`, but Ollama sends calls with
        # no index, or every call at index 0: a new call id is a new call.
        self._call_by_id: dict[str, int] = {}
        self._call_by_raw: dict[int | None, int] = {}
        self._calls_seen = 0

    def _call_index(self, call: dict[str, Any]) -> int:
        raw = call.get("index")
        raw = int(raw) if raw is not None else None
        call_id = call.get("id")
        if call_id:
            if call_id in self._call_by_id:
                return self._call_by_id[call_id]
            index = self._calls_seen
            self._calls_seen += 1
            self._call_by_id[call_id] = index
            self._call_by_raw[raw] = index
            return index
        if raw in self._call_by_raw:
            return self._call_by_raw[raw]
        if raw is None:  # a continuation without index: the latest call
            return max(self._calls_seen - 1, 0)
        # first fragment of a call without id (some servers send the id late)
        index = self._calls_seen
        self._calls_seen += 1
        self._call_by_raw[raw] = index
        return index

    def feed(self, chunk: Any) -> list[Delta]:
        """The deltas of one chunk (a list, not a generator: one per relayed token)."""
        if not isinstance(chunk, dict):
            raise UpstreamError("The upstream sent a malformed stream chunk.")
        if "error" in chunk and not chunk.get("choices"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise UpstreamError(f"The upstream reported an error mid-stream: {message}")
        out: list[Delta] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning_of(delta)
            if reasoning:
                out.append(ReasoningDelta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                out += self._think.feed(content)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                out.append(RefusalDelta(refusal))
            calls = delta.get("tool_calls")
            if calls:
                # Text held back (leading whitespace, an unclosed tag) belongs before the calls.
                out += self._think.flush()
                for call in calls:
                    function = call.get("function") or {}
                    arguments = function.get("arguments") or ""
                    if not isinstance(arguments, str):
                        arguments = json.dumps(arguments)
                    out.append(ToolCallDelta(self._call_index(call), call.get("id"), function.get("name"), arguments))
            if choice.get("finish_reason"):
                out += self._think.flush()
                self.finish = FINISH_REASONS.get(choice["finish_reason"], "stop")
        raw_usage = chunk.get("usage")
        if raw_usage is not None:
            usage = _usage(raw_usage)
            if usage:
                self.saw_usage = True
                out.append(usage)
        return out

    def close(self) -> Iterator[Delta]:
        yield from self._think.flush()
        yield Finish(self.finish or "stop")
