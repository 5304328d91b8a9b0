"""Every tool output answers a call (OpenAI: "No tool call found for function call output with
call_id ..."): refused with a 400 naming the field before any upstream call; accepted wherever
the call really is (the chain, the conversation, the same input, an item reference, before a
compaction item of an inline history); over a WebSocket the failed turn evicts its parent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import MODEL, Gateway, call
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import completed, socket, turn

pytestmark = pytest.mark.embedded

ORPHANS: list[tuple[dict[str, Any], str]] = [
    ({"type": "function_call_output", "call_id": "nope", "output": "x"}, "call_id"),
    ({"type": "custom_tool_call_output", "call_id": "nope", "output": "x"}, "call_id"),
    ({"type": "shell_call_output", "call_id": "nope", "output": []}, "call_id"),
    ({"type": "apply_patch_call_output", "call_id": "nope", "status": "completed"}, "call_id"),
    (
        {
            "type": "computer_call_output",
            "call_id": "nope",
            "output": {"type": "computer_screenshot", "image_url": "x"},
        },
        "call_id",
    ),
    ({"type": "local_shell_call_output", "id": "nope", "output": "x"}, "id"),
    ({"type": "mcp_approval_response", "approval_request_id": "nope", "approve": True}, "approval_request_id"),
    # The newest SDK's item kinds (protocol/surface.py): a client-run tool search's output, and
    # a program's (programmatic tool calling), answer a call like the others.
    ({"type": "tool_search_output", "call_id": "nope", "tools": [], "execution": "client"}, "call_id"),
    ({"type": "program_output", "id": "po_1", "call_id": "nope", "result": "x", "status": "completed"}, "call_id"),
]


@pytest.mark.parametrize(("item", "field"), ORPHANS, ids=[o[0]["type"] for o in ORPHANS])
def test_an_output_that_answers_no_call_is_a_400_naming_the_field(
    gateway: Gateway, scripted: ScriptedUpstream, item: dict, field: str
) -> None:
    resp = gateway.http().post(
        "/v1/responses", json={"model": MODEL, "input": [{"role": "user", "content": "hi"}, item]}
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == f"input[1].{field}" and "nope" in error["message"]
    assert scripted.model_calls == []


def test_the_message_is_openais(gateway: Gateway) -> None:
    resp = gateway.http().post(
        "/v1/responses",
        json={"model": MODEL, "input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
    )
    assert resp.json()["error"]["message"] == "No tool call found for function call output with call_id 'call_9'."


def test_an_output_before_its_call_in_the_same_input_is_refused(gateway: Gateway) -> None:
    resp = gateway.http().post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [
                {"type": "function_call_output", "call_id": "c1", "output": "x"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            ],
        },
    )
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input[0].call_id"


TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}


def test_outputs_whose_calls_are_in_the_chain_the_input_or_a_reference_are_accepted(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("lookup", {}, "c_chain")]),
        Reply(text="chain ok"),
        Reply(text="inline ok"),
        Reply(text="reference ok"),
    )
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="look", tools=[TOOL])
    chained = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": "c_chain", "output": "1"}],
    )
    assert chained.output_text == "chain ok"
    inline = client.responses.create(
        model=MODEL,
        tools=[TOOL],
        store=False,
        input=[
            {"role": "user", "content": "look"},
            {"type": "function_call", "call_id": "c_in", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c_in", "output": "2"},
        ],
    )
    assert inline.output_text == "inline ok"
    call_item = first.output[-1]
    referenced = client.responses.create(
        model=MODEL,
        tools=[TOOL],
        input=[
            {"type": "item_reference", "id": call_item.id},
            {"type": "function_call_output", "call_id": "c_chain", "output": "3"},
        ],
    )
    assert referenced.output_text == "reference ok"


def test_the_new_item_kinds_answering_their_calls_are_accepted_as_history(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """A program and its output, a client-run tool search and its output: kept in the context,
    sent to no Chat Completions upstream (none of them made the call)."""
    scripted.enqueue(MODEL, Reply(text="history ok"))
    response = gateway.openai().responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "go"},
            {"type": "program", "id": "prg_1", "call_id": "c_prog", "code": "x = 1", "fingerprint": "f"},
            {"type": "program_output", "id": "po_1", "call_id": "c_prog", "result": "1", "status": "completed"},
            {"type": "tool_search_call", "call_id": "c_search", "arguments": {"q": "x"}, "execution": "client"},
            {"type": "tool_search_output", "call_id": "c_search", "tools": [], "execution": "client"},
        ],
    )
    assert response.output_text == "history ok"
    assert scripted.requests[-1].body["messages"] == [{"role": "user", "content": "go"}]


def test_an_output_whose_call_is_in_the_conversation_is_accepted(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup", {}, "c_conv")]), Reply(text="conversation ok"))
    client = gateway.openai()
    conversation = client.conversations.create()
    client.responses.create(model=MODEL, input="look", tools=[TOOL], conversation=conversation.id)
    answered = client.responses.create(
        model=MODEL,
        tools=[TOOL],
        conversation=conversation.id,
        input=[{"type": "function_call_output", "call_id": "c_conv", "output": "1"}],
    )
    assert answered.output_text == "conversation ok"


def test_a_background_continuation_is_checked_at_the_door(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="base"))
    client = gateway.openai()
    base = client.responses.create(model=MODEL, input="hi")
    resp = gateway.http().post(
        "/v1/responses",
        json={
            "model": MODEL,
            "background": True,
            "previous_response_id": base.id,
            "input": [{"type": "function_call_output", "call_id": "ghost", "output": "x"}],
        },
    )
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input[0].call_id"


def test_over_a_websocket_the_failed_turn_evicts_its_parent(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup", {}, "c1")]), Reply(text="fresh"))
    with socket(gateway) as ws:
        first = completed(ws, input="look", tools=[TOOL], store=False)
        orphan = turn(
            ws,
            model=MODEL,
            previous_response_id=first["id"],
            store=False,
            input=[{"type": "function_call_output", "call_id": "other", "output": "x"}],
        )
        assert orphan[-1]["status"] == 400 and orphan[-1]["error"]["param"] == "input[0].call_id"
        again = turn(
            ws,
            model=MODEL,
            previous_response_id=first["id"],
            store=False,
            input=[{"type": "function_call_output", "call_id": "c1", "output": "x"}],
        )
        assert again[-1]["error"]["code"] == "previous_response_not_found"
        assert completed(ws, input="new")["output"][0]["content"][0]["text"] == "fresh"
    assert len(scripted.model_calls) == 2
