"""The Conversations API with the real `openai` SDK, and `conversation` on responses."""

from __future__ import annotations

import openai
import pytest

from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import parse_sse, validate_events
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def texts(items) -> list[str]:
    out = []
    for item in items:
        content = item.content if hasattr(item, "content") else item["content"]
        part = content[0]
        out.append(part.text if hasattr(part, "text") else part["text"])
    return out


def test_conversation_crud_and_items_with_the_sdk(gateway: Gateway) -> None:
    client = gateway.openai()
    conv = client.conversations.create(
        metadata={"topic": "dogs"}, items=[{"type": "message", "role": "user", "content": "Hi, I like dogs."}]
    )
    assert conv.object == "conversation" and conv.id.startswith("conv_") and conv.metadata == {"topic": "dogs"}
    assert client.conversations.retrieve(conv.id).created_at == conv.created_at
    updated = client.conversations.update(conv.id, metadata={"topic": "cats"})
    assert updated.metadata == {"topic": "cats"}

    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Dogs are great."}]},
            {"type": "message", "role": "user", "content": "Tell me more."},
        ],
    )
    assert len(added.data) == 2
    listed = client.conversations.items.list(conv.id, order="asc")
    assert texts(listed.data) == ["Hi, I like dogs.", "Dogs are great.", "Tell me more."]
    newest = client.conversations.items.list(conv.id, limit=1)  # default order: newest first
    assert texts(newest.data) == ["Tell me more."] and newest.has_more
    rest = client.conversations.items.list(conv.id, limit=5, after=newest.data[0].id)
    assert texts(rest.data) == ["Dogs are great.", "Hi, I like dogs."] and not rest.has_more
    one = client.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    assert one.id == added.data[0].id
    after_delete = client.conversations.items.delete(added.data[0].id, conversation_id=conv.id)
    assert after_delete.id == conv.id
    assert texts(client.conversations.items.list(conv.id, order="asc").data) == ["Hi, I like dogs.", "Tell me more."]
    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted and deleted.object == "conversation.deleted"
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)


def test_responses_read_and_append_to_a_conversation(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    client = gateway.openai()
    conv = client.conversations.create(items=[{"type": "message", "role": "system", "content": "Be brief."}])
    scripted.enqueue(MODEL, Reply(text="Paris."), Reply(text="About 2 million."), Reply(text="Yes."))
    first = client.responses.create(model=MODEL, input="Capital of France?", conversation=conv.id)
    assert first.conversation.id == conv.id
    second = client.responses.create(model=MODEL, input="Population?", conversation={"id": conv.id})
    assert second.output_text == "About 2 million."
    sent = scripted.requests[-1].body["messages"]
    assert [m["content"] for m in sent] == ["Be brief.", "Capital of France?", "Paris.", "Population?"]
    # Streamed too: the events are the usual ones, and the turn is appended at the end.
    with gateway.http().stream(
        "POST", "/v1/responses", json={"model": MODEL, "input": "Sure?", "conversation": conv.id, "stream": True}
    ) as resp:
        final = validate_events(parse_sse(resp.iter_bytes()))
    assert final["conversation"] == {"id": conv.id}
    items = client.conversations.items.list(conv.id, order="asc", limit=100).data
    assert texts(items) == [
        "Be brief.",
        "Capital of France?",
        "Paris.",
        "Population?",
        "About 2 million.",
        "Sure?",
        "Yes.",
    ]
    # The items are the responses' own (stored once): same ids in both lists.
    response_input = client.responses.input_items.list(second.id).data
    assert response_input[0].id in {i.id for i in items}


def test_conversation_and_previous_response_id_are_exclusive_and_ids_are_checked(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    http = gateway.http()
    conv = http.post("/v1/conversations", json={}).json()
    both = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "x", "conversation": conv["id"], "previous_response_id": "resp_1"},
    )
    assert both.status_code == 400 and both.json()["error"]["param"] == "conversation"
    missing = http.post("/v1/responses", json={"model": MODEL, "input": "x", "conversation": "conv_missing"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "conversation"
    other_key, _ = make_key(tenant="other-co", name="other")
    other = gateway.http(other_key)
    for method, path in [
        ("GET", f"/v1/conversations/{conv['id']}"),
        ("DELETE", f"/v1/conversations/{conv['id']}"),
        ("GET", f"/v1/conversations/{conv['id']}/items"),
    ]:
        assert other.request(method, path).status_code == 404
    foreign = other.post("/v1/responses", json={"model": MODEL, "input": "x", "conversation": conv["id"]})
    assert foreign.status_code == 404
    too_many = http.post("/v1/conversations", json={"items": [{"role": "user", "content": "x"}] * 21})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "items"


def test_a_failed_response_appends_nothing(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    client = gateway.openai()
    conv = client.conversations.create()
    scripted.enqueue(MODEL, Reply(text="partial", disconnect_after=2))
    with gateway.http().stream(
        "POST", "/v1/responses", json={"model": MODEL, "input": "x", "conversation": conv.id, "stream": True}
    ) as resp:
        events = parse_sse(resp.iter_bytes())
    assert events[-1]["type"] == "response.failed"
    assert client.conversations.items.list(conv.id).data == []


def test_store_false_responses_still_append_to_the_conversation(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    client = gateway.openai()
    conv = client.conversations.create()
    scripted.enqueue(MODEL, Reply(text="noted"))
    resp = client.responses.create(model=MODEL, input="remember 42", conversation=conv.id, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    assert texts(client.conversations.items.list(conv.id, order="asc").data) == ["remember 42", "noted"]
    # No response row is kept, but the tokens were spent: a usage record counts them.
    import time

    from responses_api.models import UsageRecord

    deadline = time.monotonic() + 5
    while not UsageRecord.objects.filter(tenant_id=gateway.tenant_id).exists():  # written just after
        assert time.monotonic() < deadline, "no usage record for a store: false response in a conversation"
        time.sleep(0.05)
    (record,) = UsageRecord.objects.filter(tenant_id=gateway.tenant_id)
    assert (record.endpoint, record.model) == ("responses (store: false)", MODEL)
    assert record.input_tokens == resp.usage.input_tokens and record.output_tokens == resp.usage.output_tokens


def test_background_responses_append_when_the_worker_finishes(
    gateway: Gateway, scripted: ScriptedUpstream, worker
) -> None:
    import time

    client = gateway.openai()
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": "first"}])
    scripted.enqueue(MODEL, Reply(text="from the worker"))
    started = client.responses.create(model=MODEL, input="second", conversation=conv.id, background=True)
    deadline = time.monotonic() + 30
    while client.responses.retrieve(started.id).status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [m["content"] for m in scripted.requests[-1].body["messages"]] == ["first", "second"]
    assert texts(client.conversations.items.list(conv.id, order="asc").data) == ["first", "second", "from the worker"]


def test_a_conversation_over_a_websocket(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from tests.websocket.test_websocket_mode import socket, turn

    client = gateway.openai()
    conv = client.conversations.create()
    scripted.enqueue(MODEL, Reply(text="one"), Reply(text="two"))
    with socket(gateway) as ws:
        validate_events(turn(ws, model=MODEL, input="a", conversation=conv.id))
        validate_events(turn(ws, model=MODEL, input="b", conversation=conv.id))
    assert texts(client.conversations.items.list(conv.id, order="asc").data) == ["a", "one", "b", "two"]


def test_history_lists_the_tenants_conversations(gateway: Gateway) -> None:
    http = gateway.http()
    made = [http.post("/v1/conversations", json={"metadata": {"n": str(i)}}).json()["id"] for i in range(3)]
    other_key, _ = make_key(tenant="other-co", name="other")
    gateway.http(other_key).post("/v1/conversations", json={})
    first = http.get("/v1/conversations", params={"limit": 2}).json()
    assert [c["id"] for c in first["data"]] == made[::-1][:2] and first["has_more"]
    rest = http.get("/v1/conversations", params={"limit": 2, "after": first["last_id"]}).json()
    assert [c["id"] for c in rest["data"]] == [made[0]] and not rest["has_more"]
