"""Compaction v2: a `compaction_trigger` as the last input item of an ordinary create answers
exactly one sealed `compaction` item (Codex's remote compaction), over JSON, SSE and WebSocket,
stored or not, after a chain, a conversation or an inline history, on Chat Completions and
Anthropic upstreams; and the turn after it starts its upstream context at that item, after what
its own input placed before the item (test_compaction_keeps_input.py)."""

from __future__ import annotations

import json

import pytest

from responses_api.protocol.compaction import WHOLE_CONTEXT_INSTRUCTIONS, WHOLE_SUMMARY_PREFIX
from tests.responses_api.test_anthropic import CLAUDE, anthropic, sent  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_events, validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import socket, turn

pytestmark = pytest.mark.embedded

TRIGGER = {"type": "compaction_trigger"}
SUMMARY = "The user builds a dog cafe page: header done, menu next, prices wanted in euros."
LONG = "A long tool result line that fills the context. " * 40


def history() -> list[dict]:
    """An inline history as Codex sends it with store: false: messages, a call and its output."""
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Build a dog cafe page."}]},
        {"type": "function_call", "call_id": "call_ls", "name": "shell", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "call_ls", "output": LONG},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Header done."}]},
    ]


def only_compaction(response: dict) -> dict:
    (item,) = response["output"]
    assert item["type"] == "compaction" and item["encrypted_content"] and item["id"].startswith("cmp")
    assert SUMMARY not in item["encrypted_content"]  # sealed: opaque to the client
    return item


def test_json_store_false_inline_history_then_the_context_starts_at_the_item(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(text="before"), Reply(text=SUMMARY), Reply(text="Adding prices."))
    client = gateway.openai()
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]
    before = client.responses.create(model=MODEL, input=[*history(), {"role": "user", "content": "Next?"}], store=False)
    body = {
        "model": MODEL,
        "input": [*history(), TRIGGER],
        "store": False,
        "tools": tools,
        "instructions": "You are Codex.",
    }
    data = gateway.http().post("/v1/responses", json=body).json()
    validate_response_object(data)
    item = only_compaction(data)
    assert data["status"] == "completed" and data["usage"]["output_tokens"] > 0
    # The summariser saw the whole history, its instructions, no tools.
    asked = scripted.model_calls[1].body
    assert WHOLE_CONTEXT_INSTRUCTIONS in asked["messages"][0]["content"]
    assert "You are Codex." in asked["messages"][0]["content"]
    assert "tools" not in asked or not asked["tools"]
    assert any(m.get("content") == LONG for m in asked["messages"])
    # Codex's next turn: what it keeps (the user's messages) before the compaction item, then
    # the new message. What the request places before the item is sent; the summary follows.
    after_input = [
        history()[0],
        {"type": "compaction", "id": item["id"], "encrypted_content": item["encrypted_content"]},
    ]
    after = client.responses.create(
        model=MODEL, input=[*after_input, {"role": "user", "content": "Next?"}], store=False
    )
    assert after.output_text == "Adding prices."
    messages = scripted.model_calls[2].body["messages"]
    assert [m["content"] for m in messages] == ["Build a dog cafe page.", WHOLE_SUMMARY_PREFIX + SUMMARY, "Next?"]
    # The upstream body after compaction is smaller than the one before it.
    assert len(json.dumps(scripted.model_calls[2].body)) < len(json.dumps(scripted.model_calls[0].body)) / 3
    assert before.output_text == "before"


def test_sse_with_previous_response_id_is_stored_and_the_chain_continues_from_it(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="Here is the header. " + LONG), Reply(text=SUMMARY), Reply(text="Menu."))
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="Build a dog cafe page.")
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={"model": MODEL, "input": [TRIGGER], "previous_response_id": first.id, "stream": True},
        ).content
    final = validate_sse(raw)
    item = only_compaction(final)
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]
    assert [e["type"] for e in events if "output_item" in e["type"] or "delta" in e["type"]] == [
        "response.output_item.added",
        "response.output_item.done",
    ]  # the summary's text is never streamed
    row = Response.objects.get(id=final["id"])
    assert row.status == "completed" and row.output_tokens == final["usage"]["output_tokens"] > 0
    nxt = client.responses.create(model=MODEL, input="Now the menu.", previous_response_id=final["id"])
    assert nxt.output_text == "Menu."
    messages = scripted.model_calls[-1].body["messages"]
    assert [m["content"] for m in messages] == [WHOLE_SUMMARY_PREFIX + SUMMARY, "Now the menu."]
    stored = client.responses.retrieve(final["id"])
    assert stored.output[0].type == "compaction" and stored.output[0].id == item["id"]


def test_over_a_conversation(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="Hi there."), Reply(text=SUMMARY), Reply(text="Menu."))
    client = gateway.openai()
    conversation = client.conversations.create()
    client.responses.create(model=MODEL, input="Build a dog cafe page.", conversation=conversation.id)
    compacted = client.responses.create(model=MODEL, input=[TRIGGER], conversation=conversation.id)
    only_compaction(compacted.model_dump(mode="json"))
    client.responses.create(model=MODEL, input="Go on.", conversation=conversation.id)
    assert [m["content"] for m in scripted.model_calls[-1].body["messages"]] == [
        WHOLE_SUMMARY_PREFIX + SUMMARY,
        "Go on.",
    ]


def test_over_a_websocket_the_next_turn_continues_from_the_compaction(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(text="Header. " + LONG), Reply(text=SUMMARY), Reply(text="Menu."))
    with socket(gateway) as ws:
        first = validate_events(turn(ws, model=MODEL, input="Build it.", store=False))
        compacted = validate_events(
            turn(ws, model=MODEL, input=[TRIGGER], previous_response_id=first["id"], store=False)
        )
        only_compaction(compacted)
        nxt = validate_events(turn(ws, model=MODEL, input="Menu?", previous_response_id=compacted["id"], store=False))
    assert nxt["output"][0]["content"][0]["text"] == "Menu."
    assert [m["content"] for m in scripted.model_calls[-1].body["messages"]] == [
        WHOLE_SUMMARY_PREFIX + SUMMARY,
        "Menu?",
    ]


def test_over_an_anthropic_upstream(anthropic: Gateway, scripted: ScriptedUpstream) -> None:  # noqa: F811 - a fixture, imported above
    scripted.enqueue("claude-up", Reply(text=SUMMARY), Reply(text="Menu."))
    client = anthropic.openai()
    compacted = client.responses.create(model=CLAUDE, input=[*history(), TRIGGER], store=False)
    item = only_compaction(compacted.model_dump(mode="json"))
    asked = sent(scripted)[0].body
    assert WHOLE_CONTEXT_INSTRUCTIONS in asked["system"] and "tools" not in asked
    nxt = client.responses.create(
        model=CLAUDE,
        input=[
            history()[0],
            {"type": "compaction", "id": item["id"], "encrypted_content": item["encrypted_content"]},
            {"role": "user", "content": "Menu?"},
        ],
        store=False,
    )
    assert nxt.output_text == "Menu."
    messages = sent(scripted)[-1].body["messages"]
    assert len(messages) == 1 and messages[0]["role"] == "user"
    texts = [block["text"] for block in messages[0]["content"]]
    assert texts == ["Build a dog cafe page.", WHOLE_SUMMARY_PREFIX + SUMMARY, "Menu?"]


def test_a_trigger_anywhere_but_last_is_refused_before_any_upstream_call(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    resp = gateway.http().post(
        "/v1/responses", json={"model": MODEL, "input": [TRIGGER, {"role": "user", "content": "hi"}]}
    )
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input[0]"
    assert scripted.model_calls == []


def test_an_empty_summary_fails_the_response(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text=""))
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": [*history(), TRIGGER]})
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_empty"


def test_over_a_native_responses_upstream(native: Gateway, scripted: ScriptedUpstream) -> None:  # noqa: F811 - a fixture, imported above
    gateway = native  # the route NATIVE -> a scripted /v1/responses server
    scripted.enqueue("up-native", Reply(text=SUMMARY), Reply(text="Menu."))
    client = gateway.openai()
    data = gateway.http().post("/v1/responses", json={"model": NATIVE, "input": [*history(), TRIGGER]}).json()
    item = only_compaction(data)
    asked = [r.body for r in scripted.model_calls if r.path == "/v1/responses"][0]
    assert WHOLE_CONTEXT_INSTRUCTIONS in asked["instructions"] and not asked.get("tools")
    assert asked["input"][-1]["content"][0]["text"].startswith("Summarize the conversation above")
    nxt = client.responses.create(model=NATIVE, input="Menu?", previous_response_id=data["id"])
    assert nxt.output_text == "Menu." and item["id"]
    last = [r.body for r in scripted.model_calls if r.path == "/v1/responses"][-1]
    texts = [part["text"] for i in last["input"] for part in i["content"]]
    assert texts == [WHOLE_SUMMARY_PREFIX + SUMMARY, "Menu?"]
