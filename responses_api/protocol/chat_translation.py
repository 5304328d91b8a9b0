"""`/v1/chat/completions` for a route whose target is not a Chat Completions server (a native
Responses or Anthropic upstream): the Chat request read as a Responses request, and the
upstream's deltas written back as a `chat.completion` or a stream of `chat.completion.chunk`s.

Only what Chat Completions clients send in practice is translated: messages (system,
developer, user text and images, assistant text and tool calls, tool results), function
tools and tool_choice, temperature, top_p, max_tokens / max_completion_tokens,
parallel_tool_calls, response_format, reasoning_effort, prompt caching (prompt_cache_key,
prompt_cache_retention, prompt_cache_options, content parts' prompt_cache_breakpoint),
service_tier, stream and stream_options. A
parameter with no Responses counterpart (n > 1, logit_bias, audio, ...) is a 400 naming it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .deltas import Delta, Finish, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta, Usage
from .errors import InvalidRequest
from .surface import CHAT_FIELDS, Handling

# What a non-Chat upstream makes of each field: protocol/surface.py (CHAT_FIELDS). Refused
# fields are the same for `responses` and `anthropic` targets (both go through this translation);
# fields translated for neither are announced (x-gateway-ignored-fields, passthrough_views.py).
_REFUSED = {name: field.why for name, field in CHAT_FIELDS.items() if field.responses.handling is Handling.REFUSED}


def chat_to_responses_body(body: dict[str, Any], *, output_floor: bool = True) -> dict[str, Any]:
    """A Responses create body for this Chat Completions body; InvalidRequest names what
    cannot be translated. `output_floor`: the upstream is a Responses server, whose least
    `max_output_tokens` is 16; an Anthropic upstream, like Chat Completions, takes fewer, so
    without it a smaller cap is left for the caller to apply after parsing."""
    for name, why in _REFUSED.items():
        value = body.get(name)
        if value is not None and not (name == "n" and value == 1):
            raise InvalidRequest(
                f"'{name}' is not supported for this model (its upstream is not a Chat Completions server): {why}.",
                param=name,
            )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages[{i}] must be an object.", param=f"messages[{i}]")
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            instructions.append(_text(content, f"messages[{i}].content"))
        elif role == "user":
            items.append({"type": "message", "role": "user", "content": _user_parts(content, f"messages[{i}].content")})
        elif role == "assistant":
            text = _text(content, f"messages[{i}].content") if content is not None else ""
            if text:
                items.append(
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                )
            for j, call in enumerate(message.get("tool_calls") or []):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not call.get("id") or not function.get("name"):
                    raise InvalidRequest(
                        "Each tool call needs an id and a function name.", param=f"messages[{i}].tool_calls[{j}]"
                    )
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        elif role == "tool":
            if not message.get("tool_call_id"):
                raise InvalidRequest("A tool message needs 'tool_call_id'.", param=f"messages[{i}].tool_call_id")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": _text(content, f"messages[{i}].content"),
                }
            )
        else:
            raise InvalidRequest(f"Unknown role {role!r}.", param=f"messages[{i}].role")
    out: dict[str, Any] = {
        "model": body.get("model"),
        "input": items,
        "store": False,
        "stream": bool(body.get("stream")),
    }
    if instructions:
        out["instructions"] = "\n\n".join(instructions)
    tools = body.get("tools")
    if tools:
        out["tools"] = []
        for j, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type") != "function":
                raise InvalidRequest("Only function tools are supported.", param=f"tools[{j}]")
            out["tools"].append(
                {
                    "type": "function",
                    "name": function.get("name"),
                    "description": function.get("description"),
                    "parameters": function.get("parameters") or {"type": "object", "properties": {}},
                    "strict": bool(function.get("strict", False)),
                }
            )
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        out["tool_choice"] = {"type": "function", "name": (choice.get("function") or {}).get("name")}
    elif choice is not None:
        out["tool_choice"] = choice
    for source, target in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
    ):
        if body.get(source) is not None:
            out[target] = body[source]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        if output_floor and type(limit) is int and limit < 16:
            # Read as a Responses request, whose floor (OpenAI's) is 16: named as the client sent it.
            name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            raise InvalidRequest(
                f"Invalid '{name}': {limit} is below 16, the least this model's Responses upstream takes.",
                param=name,
            )
        out["max_output_tokens"] = limit
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = fmt.get("json_schema") or {}
        out["text"] = {
            "format": {
                "type": "json_schema",
                "name": schema.get("name", "response"),
                "schema": schema.get("schema") or {},
                "strict": schema.get("strict"),
                **({"description": schema["description"]} if schema.get("description") is not None else {}),
            }
        }
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["text"] = {"format": {"type": "json_object"}}
    if body.get("reasoning_effort"):
        out["reasoning"] = {"effort": body["reasoning_effort"]}
    for name in ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "service_tier"):
        if body.get(name) is not None:  # the Responses parser checks them as it checks its own
            out[name] = body[name]
    return out


def _text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if content is None:
        return ""
    raise InvalidRequest("Message content must be a string or an array of parts.", param=param)


def _user_parts(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequest("Message content must be a string or an array of parts.", param=param)
    parts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": part.get("text", "")})
        elif kind == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        else:
            raise InvalidRequest(
                f"Content parts of type {kind!r} are not supported for this model.", param=f"{param}[{k}]"
            )
        if "prompt_cache_breakpoint" in part:
            parts[-1]["prompt_cache_breakpoint"] = part["prompt_cache_breakpoint"]
    return parts


def chat_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class ChatWriter:
    """Deltas to Chat Completions: `chunk()` per delta when streaming, `completion()` at the end."""

    def __init__(self, model: str, completion_id: str) -> None:
        self.model = model
        self.id = completion_id
        self.created = int(time.time())
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage = Usage()
        self.finish = "stop"

    def _envelope(self, choices: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **more,
        }

    def feed(self, delta: Delta) -> dict[str, Any] | None:
        """Record a delta; the chunk that streams it (None for usage and the finish)."""
        if isinstance(delta, TextDelta):
            self.text.append(delta.text)
            return self._envelope([{"index": 0, "delta": {"content": delta.text}, "finish_reason": None}])
        if isinstance(delta, ReasoningDelta):
            self.reasoning.append(delta.text)
            return self._envelope([{"index": 0, "delta": {"reasoning_content": delta.text}, "finish_reason": None}])
        if isinstance(delta, RefusalDelta):
            self.refusal.append(delta.text)
            return self._envelope([{"index": 0, "delta": {"refusal": delta.text}, "finish_reason": None}])
        if isinstance(delta, ToolCallDelta):
            call = self.calls.setdefault(
                delta.index,
                {"id": delta.call_id, "type": "function", "function": {"name": delta.name or "", "arguments": ""}},
            )
            call["function"]["arguments"] += delta.arguments
            fragment: dict[str, Any] = {"index": delta.index, "function": {"arguments": delta.arguments}}
            if delta.call_id:
                fragment.update(id=delta.call_id, type="function")
                fragment["function"]["name"] = delta.name or ""
            return self._envelope([{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": None}])
        if isinstance(delta, Usage):
            self.usage = self.usage + delta
        elif isinstance(delta, Finish):
            self.finish = delta.reason
        return None

    def opening(self) -> dict[str, Any]:
        return self._envelope([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])

    def closing(self, include_usage: bool) -> list[dict[str, Any]]:
        chunks = [self._envelope([{"index": 0, "delta": {}, "finish_reason": self.finish}])]
        if include_usage:
            chunks.append(self._envelope([], usage=chat_usage(self.usage)))
        return chunks

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish, "logprobs": None}],
            "usage": chat_usage(self.usage),
        }


def sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
