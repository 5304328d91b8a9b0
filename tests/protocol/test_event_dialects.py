"""Anthropic Messages and OpenAI Responses replies -> Open Responses events, through the pure
protocol core: every recorded-style fixture of `tests.fixtures.events`, streamed (the
dialect's EventDecoder) and whole (message_to_deltas / response_to_deltas), must pass the
strict validator and end with the expected output and usage, the same for both paths.
No database, no network."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from responses_api.protocol import anthropic, native
from responses_api.protocol.deltas import Delta, UpstreamFailed
from responses_api.protocol.events import Event, EventBuilder
from responses_api.protocol.response import request_params, response_object
from tests.fixtures.events import ANTHROPIC_FIXTURES, ANTHROPIC_THINKING, RESPONSES_FIXTURES, Fixture
from tests.protocol.test_chat_stream import check_terminal, make_request
from tests.support.stream_validator import validate_events

pytestmark = pytest.mark.embedded

DIALECTS: dict[str, tuple[dict[str, Fixture], Callable[[], Any], Callable[[dict], list[Delta]]]] = {
    "anthropic": (ANTHROPIC_FIXTURES, anthropic.EventDecoder, anthropic.message_to_deltas),
    "responses": (RESPONSES_FIXTURES, native.EventDecoder, native.response_to_deltas),
}
CASES = [(dialect, name) for dialect, (fixtures, _, _) in DIALECTS.items() for name in fixtures]


def builder() -> EventBuilder:
    req = make_request()
    response = response_object(
        response_id="resp_test0002",
        created_at=1756166400,
        status="in_progress",
        model=req.model,
        previous_response_id=None,
        params=request_params(req),
        output=[],
    )
    return EventBuilder(response, seal_signed=lambda text, signature: f"sealed:{signature}:{len(text)}")


def run(deltas: list[Delta]) -> tuple[list[Event], EventBuilder]:
    b = builder()
    events = b.start()
    for delta in deltas:
        events += b.feed(delta)
    return events + b.finish(), b


def streamed(decoder_type: Callable[[], Any], events: list[dict[str, Any]]) -> list[Delta]:
    decoder = decoder_type()
    deltas: list[Delta] = []
    for event in events:
        deltas += decoder.feed(event)
    assert decoder.finished
    return deltas


@pytest.mark.parametrize(("dialect", "name"), CASES)
def test_streamed_and_whole_replies_make_the_same_response(dialect: str, name: str) -> None:
    fixtures, decoder, whole = DIALECTS[dialect]
    fixture = fixtures[name]
    for deltas in (streamed(decoder, fixture["events"]), whole(fixture["body"])):
        events, _ = run(deltas)
        terminal = validate_events(events)
        check_terminal(terminal, fixture["expect"], fixture["expect"]["usage"])


def test_anthropic_thinking_keeps_its_signature_sealed() -> None:
    for deltas in (
        streamed(anthropic.EventDecoder, ANTHROPIC_THINKING["events"]),
        anthropic.message_to_deltas(ANTHROPIC_THINKING["body"]),
    ):
        events, b = run(deltas)
        reasoning = next(i for i in validate_events(events)["output"] if i["type"] == "reasoning")
        assert reasoning["encrypted_content"].startswith(f"sealed:{ANTHROPIC_THINKING['signature']}:")


def test_an_anthropic_error_event_and_a_failed_response_raise() -> None:
    decoder = anthropic.EventDecoder()
    decoder.feed(ANTHROPIC_FIXTURES["text"]["events"][0])
    with pytest.raises(UpstreamFailed) as failed:
        decoder.feed({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert (failed.value.code, failed.value.message) == ("overloaded_error", "Overloaded")
    with pytest.raises(UpstreamFailed):
        native.EventDecoder().feed(
            {
                "type": "response.failed",
                "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
            }
        )


def test_a_context_goes_to_anthropic_as_alternating_turns() -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be terse."}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this image?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
            ],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "toolu_1", "name": "zoom", "arguments": '{"x": 1}'},
        {"type": "function_call", "call_id": "toolu_2", "name": "zoom", "arguments": '{"x": 2}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "a cat"},
        {"type": "function_call_output", "call_id": "toolu_2", "output": "a hat"},
    ]
    system, messages = anthropic.to_messages(items, "Answer in English.")
    assert system == "Answer in English.\n\nBe terse."
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a cat"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "a hat"},
    ]
