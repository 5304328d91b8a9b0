"""The Anthropic stream checker (anthropic_stream.py) passes Anthropic's documented streams and
catches each broken rule."""

from __future__ import annotations

import json
from typing import Any

import pytest

from responses_api.protocol.deltas import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from responses_api.protocol.messages_api import MessagesWriter, sse
from tests.support.anthropic_stream import StreamViolation, validate_messages_sse

START: dict[str, Any] = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-x",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    },
}


def wire(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def text_block(index: int, text: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": index},
    ]


END: list[dict[str, Any]] = [
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 15},
    },
    {"type": "message_stop"},
]


def test_documented_stream_passes() -> None:
    # Anthropic's documentation's basic streaming example, with a tool_use block.
    tool = [
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"loc'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '": "SF"}'}},
        {"type": "content_block_stop", "index": 1},
    ]
    end: list[dict[str, Any]] = [{**END[0], "delta": {"stop_reason": "tool_use", "stop_sequence": None}}, END[1]]
    message = validate_messages_sse(wire(START, {"type": "ping"}, *text_block(0, "Hello"), *tool, *end))
    assert message["content"][0]["text"] == "Hello"
    assert message["content"][1]["input"] == {"loc": "SF"} and message["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    "events",
    [
        [*text_block(0, "x"), *END],  # no message_start
        [START, *text_block(1, "x"), *END],  # index not 0
        [START, *text_block(0, "x")[:2], *text_block(1, "y"), *END],  # two blocks open
        [START, *text_block(0, "x"), END[1]],  # no message_delta
        [START, *text_block(0, "x"), END[0]],  # no message_stop
        [START, *text_block(0, "x"), *END, {"type": "ping"}],  # after the end
        [START, *text_block(0, "x"), {**END[0], "delta": {"stop_reason": "done"}}, END[1]],  # unknown stop reason
        [START, *text_block(0, "x"), {**END[0], "delta": {"stop_reason": "tool_use"}}, END[1]],  # no tool_use block
        [
            START,
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
            {"type": "content_block_stop", "index": 0},
            *END,
        ],  # a delta of another kind of block
        [START, {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}],  # shape
        [START, *text_block(0, "x"), {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, END[1]],  # usage
        [START, {"type": "error", "error": {"type": "api_error", "message": "x"}}, *END],  # after an error
        [START, {"type": "surprise"}, *END],
    ],
)
def test_broken_streams_are_caught(events: list[dict[str, Any]]) -> None:
    with pytest.raises(StreamViolation):
        validate_messages_sse(wire(*events))


def test_framing_is_checked() -> None:
    with pytest.raises(StreamViolation):
        validate_messages_sse(b"data: " + json.dumps(START).encode() + b"\n\n")  # no event: line
    with pytest.raises(StreamViolation):
        validate_messages_sse(b"event: ping\ndata: " + json.dumps(START).encode() + b"\n\n")  # names differ


def test_the_writer_passes_with_interleaved_parallel_calls() -> None:
    """Fragments of two calls interleaved (a Chat upstream's way) still make one block per call."""
    writer = MessagesWriter("m", "msg_1")
    deltas: list[Delta] = [
        ReasoningDelta("think"),
        TextDelta("a"),
        ToolCallDelta(0, call_id="c0", name="f", arguments='{"x":'),
        ToolCallDelta(1, call_id="c1", name="g", arguments='{"y":'),
        ToolCallDelta(0, arguments="1}"),
        ToolCallDelta(1, arguments="2}"),
        Usage(10, 5, cached_tokens=4),
        Finish("tool_calls"),
    ]
    raw = b"".join(sse(e) for e in writer.opening())
    for delta in deltas:
        raw += b"".join(sse(e) for e in writer.feed(delta))
    raw += b"".join(sse(e) for e in writer.closing())
    message = validate_messages_sse(raw)
    assert [b["type"] for b in message["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert [b["input"] for b in message["content"][2:]] == [{"x": 1}, {"y": 2}]
    assert message["usage"]["input_tokens"] == 6 and message["usage"]["cache_read_input_tokens"] == 4
