"""The Messages front door's pure core (protocol/messages_api.py): reading a request as a
Responses create, and the digests that chain a session's stored turns."""

from __future__ import annotations

import pytest

from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.messages_api import check_request, prefix_hashes, to_responses_body


def test_a_message_is_the_same_turn_whatever_its_cache_mark_or_content_form() -> None:
    first = [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
        {"role": "system", "content": [{"type": "text", "text": "env"}]},
    ]
    again = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "system", "content": "env"}]
    assert prefix_hashes(first) == prefix_hashes(again)
    assert prefix_hashes(first)[0] != prefix_hashes([{"role": "user", "content": "bye"}])[0]


def test_a_claude_code_request_reads_as_a_create() -> None:
    body = check_request(
        {
            "model": "m",
            "max_tokens": 8,
            "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "system", "content": "reminder"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls"}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "output_config": {"effort": "max"},
            "thinking": {"type": "adaptive"},
            "context_management": {"edits": []},
        }
    )
    out = to_responses_body(body)
    assert out["instructions"] == "a\n\nb" and out["max_output_tokens"] == 16  # the Responses floor
    assert [i["type"] for i in out["input"]] == ["message", "message", "function_call", "function_call_output"]
    assert out["input"][1]["role"] == "system"
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert out["reasoning"] == {"effort": "high"} and "context_management" not in out
    assert to_responses_body(body, output_floor=False)["max_output_tokens"] == 8


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "max_tokens": 1, "messages": [], "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"model": "m", "max_tokens": 1, "messages": [], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({"model": "m", "max_tokens": 1, "messages": [], "output_config": {"effort": "huge"}}, "output_config.effort"),
    ],
)
def test_what_cannot_be_read_is_refused_naming_the_field(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        to_responses_body(check_request(body))
    assert refused.value.param == param


def test_an_integral_number_is_an_integer_max_tokens() -> None:
    """JSON Schema (and Anthropic) take 1024.0 as the integer 1024; 1.5 is refused naming the field."""
    body = check_request({"model": "m", "max_tokens": 1024.0, "messages": [{"role": "user", "content": "hi"}]})
    assert body["max_tokens"] == 1024 and type(body["max_tokens"]) is int
    with pytest.raises(InvalidRequest) as raised:
        check_request({"model": "m", "max_tokens": 1.5, "messages": []})
    assert raised.value.param == "max_tokens"
