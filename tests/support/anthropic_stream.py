"""Strict checker for Anthropic's Messages streaming wire format (the gateway's `/v1/messages`),
as tests/support/stream_validator.py is for `/v1/responses`.

Tests feed it a raw SSE body; it raises `StreamViolation` on the first broken rule and returns
the message the stream adds up to. Rules (Anthropic's "Streaming Messages" documentation):

- framing: every event is `event: <type>` plus one `data:` line of JSON whose `type` is the same;
  no `[DONE]`, no comments standing in for events;
- each event's shape: the `anthropic` SDK's own models (`RawMessageStreamEvent`), validated
  strictly (every required field present, of its type), plus `ping` and `error`;
- grammar: `message_start` first (its message with empty content, no stop reason, usage); then
  content blocks one at a time: `content_block_start` at the next index (0, 1, ...), deltas of
  the open block's own kind (text: text_delta/citations_delta; thinking: thinking_delta/
  signature_delta; tool_use: input_json_delta), `content_block_stop`; then exactly one
  `message_delta` (a stop reason from the documented set, usage with output_tokens) and
  `message_stop` last. `ping` anywhere between message_start and message_stop. An `error` event
  ends the stream: nothing may follow it;
- accumulation: a tool_use block starts with `input: {}` and its input_json_delta fragments join
  into one JSON object; a `tool_use` stop reason has a tool_use block.
"""

from __future__ import annotations

import json
from typing import Any

from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter, ValidationError

__all__ = ["StreamViolation", "parse_sse", "validate_messages_sse"]

STOP_REASONS = frozenset({"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"})
ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "billing_error",
        "timeout_error",
    }
)
_DELTAS = {
    "text": {"text_delta", "citations_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "redacted_thinking": set(),
    "tool_use": {"input_json_delta"},
    "server_tool_use": {"input_json_delta"},
}
_EVENT = TypeAdapter(RawMessageStreamEvent)


class StreamViolation(AssertionError):
    pass


def parse_sse(raw: bytes | str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event; framing errors raise."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    if "\r" in text:
        raise StreamViolation("CR in the stream: events are framed by LF")
    events = []
    for n, frame in enumerate(f for f in text.split("\n\n") if f.strip()):
        name, data = None, []
        for line in frame.split("\n"):
            if line.startswith("event: "):
                if name is not None:
                    raise StreamViolation(f"event {n}: two event: lines")
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
            else:
                raise StreamViolation(f"event {n}: unexpected line {line!r}")
        if name is None or len(data) != 1:
            raise StreamViolation(f"event {n}: needs one event: line and one data: line, got {frame!r}")
        try:
            payload = json.loads(data[0])
        except ValueError as exc:
            raise StreamViolation(f"event {n}: data is not JSON: {exc}") from None
        if not isinstance(payload, dict) or payload.get("type") != name:
            raise StreamViolation(f"event {n}: data type {payload.get('type')!r} is not the event's name {name!r}")
        events.append((name, payload))
    return events


def _shape(n: int, event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind == "ping":
        if set(event) != {"type"}:
            raise StreamViolation(f"event {n}: ping carries {sorted(event)}")
        return
    if kind == "error":
        error = event.get("error")
        if (
            not isinstance(error, dict)
            or error.get("type") not in ERROR_TYPES
            or not isinstance(error.get("message"), str)
        ):
            raise StreamViolation(f"event {n}: malformed error event {event!r}")
        return
    try:
        _EVENT.validate_python(event, strict=True)
    except ValidationError as exc:
        raise StreamViolation(f"event {n} ({kind}): not Anthropic's shape: {exc}") from None


def validate_messages_sse(raw: bytes | str) -> dict[str, Any]:
    """Check the stream; the message it adds up to (`content`, `stop_reason`, `usage`; for an
    errored stream, `error` too)."""
    events = parse_sse(raw)
    if not events:
        raise StreamViolation("empty stream")
    message: dict[str, Any] | None = None
    open_block: int | None = None
    arguments: dict[int, str] = {}
    delta_seen = stopped = False
    for n, (kind, event) in enumerate(events):
        _shape(n, event)
        if stopped:
            raise StreamViolation(f"event {n} ({kind}) after the stream ended")
        if kind == "error":
            stopped = True
            if message is not None:
                message["error"] = event["error"]
            else:
                message = {"content": [], "error": event["error"]}
            continue
        if message is None:
            if kind != "message_start":
                raise StreamViolation(f"event {n}: the first event is {kind}, not message_start")
            start = event["message"]
            if start.get("content") != [] or start.get("stop_reason") is not None or start.get("role") != "assistant":
                raise StreamViolation(f"event {n}: message_start's message is not an empty assistant message")
            message = {**start, "content": []}
            continue
        if kind == "message_start":
            raise StreamViolation(f"event {n}: a second message_start")
        if kind == "ping":
            continue
        if delta_seen and kind != "message_stop":
            raise StreamViolation(f"event {n}: {kind} after message_delta")
        if kind == "content_block_start":
            if open_block is not None:
                raise StreamViolation(f"event {n}: block {event['index']} starts while block {open_block} is open")
            if event["index"] != len(message["content"]):
                raise StreamViolation(f"event {n}: block index {event['index']}, expected {len(message['content'])}")
            block = dict(event["content_block"])
            if block["type"] == "tool_use":
                if block.get("input") != {}:
                    raise StreamViolation(
                        f"event {n}: a tool_use block starts with input {{}}, got {block.get('input')!r}"
                    )
                arguments[event["index"]] = ""
            if block["type"] == "text" and block.get("text") != "":
                raise StreamViolation(f"event {n}: a text block starts empty")
            message["content"].append(block)
            open_block = event["index"]
        elif kind == "content_block_delta":
            if open_block is None or event["index"] != open_block:
                raise StreamViolation(f"event {n}: a delta for block {event['index']}, open: {open_block}")
            block = message["content"][open_block]
            delta = event["delta"]
            if delta["type"] not in _DELTAS.get(block["type"], set()):
                raise StreamViolation(f"event {n}: a {delta['type']} in a {block['type']} block")
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            elif delta["type"] == "input_json_delta":
                arguments[open_block] += delta["partial_json"]
        elif kind == "content_block_stop":
            if open_block is None or event["index"] != open_block:
                raise StreamViolation(f"event {n}: stop of block {event['index']}, open: {open_block}")
            if open_block in arguments:
                text = arguments[open_block]
                try:
                    value = json.loads(text) if text else {}
                except ValueError:
                    raise StreamViolation(f"event {n}: tool input {text!r} is not JSON") from None
                if not isinstance(value, dict):
                    raise StreamViolation(f"event {n}: tool input {text!r} is not an object")
                message["content"][open_block]["input"] = value
            open_block = None
        elif kind == "message_delta":
            if open_block is not None:
                raise StreamViolation(f"event {n}: message_delta while block {open_block} is open")
            reason = event["delta"].get("stop_reason")
            if reason not in STOP_REASONS:
                raise StreamViolation(f"event {n}: stop_reason {reason!r}")
            if reason == "tool_use" and not any(b["type"] == "tool_use" for b in message["content"]):
                raise StreamViolation(f"event {n}: stop_reason tool_use without a tool_use block")
            message["stop_reason"] = reason
            message["stop_sequence"] = event["delta"].get("stop_sequence")
            message["usage"] = {**message.get("usage", {}), **event["usage"]}
            delta_seen = True
        elif kind == "message_stop":
            if not delta_seen:
                raise StreamViolation(f"event {n}: message_stop without message_delta")
            stopped = True
        else:
            raise StreamViolation(f"event {n}: unknown event type {kind!r}")
    if not stopped:
        raise StreamViolation("the stream ends without message_stop or error")
    assert message is not None
    return message
