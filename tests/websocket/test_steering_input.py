"""The pure parts of steering (responses_api/api/steering.py): what a steer may hold, the stubs
of what a response still owes, and where queued input goes in a continuation."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses.response_steer_pending_event import ResponseSteerPendingEvent

from responses_api.api.steering import SteerRefused, new_steer, parse_steer, required_input, with_queued_input

pytestmark = pytest.mark.embedded


def test_required_input_names_every_open_client_call_and_approval() -> None:
    output: list[dict[str, Any]] = [
        {"type": "message", "id": "m", "role": "assistant", "content": []},
        {"type": "function_call", "call_id": "f1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call", "call_id": "f2", "name": "served", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f2", "output": "done by the gateway"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "grammar", "input": "x"},
        {"type": "computer_call", "call_id": "k1", "action": {}},
        {"type": "shell_call", "call_id": "s1", "action": {}},
        {"type": "apply_patch_call", "call_id": "p1", "operation": {}},
        {"type": "tool_search_call", "call_id": "t1", "execution": "client"},
        {"type": "tool_search_call", "call_id": "t2", "execution": "server"},
        {"type": "mcp_approval_request", "id": "apr_1", "name": "add", "server_label": "shop", "arguments": "{}"},
    ]
    stubs = required_input(output)
    assert stubs == [
        {"type": "function_call_output", "call_id": "f1", "name": "lookup"},
        {"type": "custom_tool_call_output", "call_id": "c1"},
        {"type": "computer_call_output", "call_id": "k1"},
        {"type": "shell_call_output", "call_id": "s1"},
        {"type": "apply_patch_call_output", "call_id": "p1"},
        {"type": "tool_search_output", "call_id": "t1", "execution": "client"},
        {"type": "mcp_approval_response", "approval_request_id": "apr_1"},
    ]
    event = {
        "type": "response.steer.pending",
        "sequence_number": 0,
        "reason": "waiting_for_required_input",
        "required_input": stubs,
        "steer": {"id": "steer_1", "previous_response_id": "resp_1"},
    }
    ResponseSteerPendingEvent.model_validate(event)  # each stub is one of the SDK's kinds


def test_queued_input_goes_first_after_the_answers_that_lead_the_continuation() -> None:
    steer = new_steer("and in Celsius", [{"type": "message", "role": "user", "content": "and in Celsius"}])
    answer = {"type": "function_call_output", "call_id": "c1", "output": "20F"}
    body = with_queued_input({"model": "m", "input": [answer, {"role": "user", "content": "thanks"}]}, [steer])
    assert [i.get("type") or i["role"] for i in body["input"]] == ["function_call_output", "message", "user"]
    plain = with_queued_input({"model": "m", "input": "hello"}, [steer])
    assert [i["content"] for i in plain["input"]] == ["and in Celsius", "hello"]
    assert with_queued_input({"model": "m"}, [steer])["input"] == steer.items


@pytest.mark.parametrize(
    "message",
    [
        {"type": "response.steer", "previous_response_id": "r", "input": "x", "stream_id": "a"},
        {"type": "response.steer", "previous_response_id": "", "input": "x"},
        {"type": "response.steer", "input": "x"},
        {"type": "response.steer", "previous_response_id": "r", "input": {"role": "user"}},
        {"type": "response.steer", "previous_response_id": "r", "input": [{"role": "system", "content": "x"}]},
        {"type": "response.steer", "previous_response_id": "r", "input": [{"role": "user", "content": 3}]},
        {
            "type": "response.steer",
            "previous_response_id": "r",
            "input": [{"role": "user", "content": [{"type": "input_image", "image_url": 5}]}],
        },
    ],
)
def test_a_steer_that_is_not_user_messages_is_invalid_input(message: dict[str, Any]) -> None:
    with pytest.raises(SteerRefused) as refused:
        parse_steer(message)
    assert refused.value.code == "invalid_input"


def test_a_steer_of_user_messages_becomes_input_items() -> None:
    content = [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "https://x.test/a.png"}]
    previous, raw, items = parse_steer(
        {"type": "response.steer", "previous_response_id": "r", "input": [{"role": "user", "content": content}]}
    )
    assert previous == "r" and raw[0]["content"] == content
    assert [(i["type"], i["role"], [p["type"] for p in i["content"]]) for i in items] == [
        ("message", "user", ["input_text", "input_image"])
    ]
