"""POST /v1/responses/compact with the real `openai` SDK, and the compacted window feeding the
next response over HTTP and over a WebSocket."""

from __future__ import annotations

import base64

import pytest

from responses_api.protocol.compaction import COMPACTION_INSTRUCTIONS, SUMMARY_PREFIX
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_events, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import socket, turn

pytestmark = pytest.mark.embedded

SUMMARY = "The user is building a dog cafe page; the header is done, the menu is next."


def conversation(gateway: Gateway, scripted: ScriptedUpstream) -> str:
    scripted.enqueue(MODEL, Reply(text="Here is the header."), Reply(text="Menu drafted."))
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="Build a dog cafe landing page.")
    second = client.responses.create(model=MODEL, input="Now the menu.", previous_response_id=first.id)
    return second.id


def test_compact_then_continue_over_http(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Response

    last = conversation(gateway, scripted)
    scripted.enqueue(MODEL, Reply(text=SUMMARY), Reply(text="Adding prices to the menu."))
    client = gateway.openai()
    compacted = client.responses.compact(model=MODEL, previous_response_id=last)
    assert compacted.object == "response.compaction"
    kinds = [(item.type, getattr(item, "role", None)) for item in compacted.output]
    assert kinds == [("message", "user"), ("message", "user"), ("compaction", None)]
    assert [item.content[0].text for item in compacted.output[:2]] == [
        "Build a dog cafe landing page.",
        "Now the menu.",
    ]
    sealed = compacted.output[-1].encrypted_content
    # Opaque to the client: the summary is neither in the blob nor in the bytes it encodes.
    # (Not a 3-letter search of the base64 text: random ciphertext spells "dog" about once
    # in a thousand runs, and did in one.)
    body = sealed.removeprefix("gwsealed1.")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    assert SUMMARY not in sealed and SUMMARY.encode() not in raw and b"dog cafe" not in raw
    assert compacted.usage.input_tokens > 0 and compacted.usage.output_tokens > 0
    # The model was asked to summarise the whole conversation.
    asked = scripted.requests[-1].body["messages"]
    assert COMPACTION_INSTRUCTIONS in asked[0]["content"]
    assert [m["content"] for m in asked[1:5]] == [
        "Build a dog cafe landing page.",
        "Here is the header.",
        "Now the menu.",
        "Menu drafted.",
    ]
    # Usage is recorded like any response's; the conversation is not stored a second time:
    # the row keeps the compacted output (a chain may continue from it), not the input.
    row = Response.objects.get(id=compacted.id)
    assert (row.status, row.output_tokens) == ("completed", compacted.usage.output_tokens)
    assert row.response_items.filter(role=0).count() == 0 and row.response_items.count() == 3

    # A new response (no previous_response_id) on the compacted window plus the next message.
    window = [item.model_dump(exclude_none=True) for item in compacted.output]
    nxt = client.responses.create(model=MODEL, input=[*window, {"role": "user", "content": "Add prices."}])
    assert nxt.output_text == "Adding prices to the menu."
    sent = [m["content"] for m in scripted.requests[-1].body["messages"]]
    assert sent == ["Build a dog cafe landing page.", "Now the menu.", SUMMARY_PREFIX + SUMMARY, "Add prices."]
    # Stored as sent: the compaction item round-trips unchanged through the input items.
    stored = client.responses.input_items.list(nxt.id, order="asc").data
    assert stored[2].type == "compaction" and stored[2].encrypted_content == sealed


def test_compact_from_input_and_continue_over_a_websocket(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text=SUMMARY), Reply(text="Prices added."))
    items = [
        {"role": "user", "content": "Build a page."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]
    resp = gateway.http().post("/v1/responses/compact", json={"model": MODEL, "input": items})
    assert resp.status_code == 200, resp.text
    window = resp.json()["output"]
    with socket(gateway) as ws:
        events = turn(ws, model=MODEL, input=[*window, {"role": "user", "content": "Prices?"}])
    assert validate_events(events)["output"][0]["content"][0]["text"] == "Prices added."
    assert [m["content"] for m in scripted.requests[-1].body["messages"]] == [
        "Build a page.",
        SUMMARY_PREFIX + SUMMARY,
        "Prices?",
    ]


def test_a_chain_onto_a_compaction_continues_from_its_output(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """previous_response_id onto a /compact result: the model gets the kept user messages and the
    summary, GET shows the compacted output, and neither shows the gateway's summariser prompt."""
    from responses_api.models import Response

    earlier = conversation(gateway, scripted)  # the compaction's own chain: summarised, not repeated
    scripted.enqueue(MODEL, Reply(text="The secret word is banana."))
    items = [
        {"role": "user", "content": "Remember: the secret word is banana."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Got it."}]},
    ]
    with gateway.http() as http:
        r = http.post(
            "/v1/responses/compact",
            json={"model": MODEL, "input": items, "instructions": "Be brief.", "previous_response_id": earlier},
        )
        assert r.status_code == 200, r.text
        compacted = r.json()
        scripted.enqueue(MODEL, Reply(text="banana"))
        with http.stream(
            "POST",
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "What was the secret word?",
                "previous_response_id": compacted["id"],
                "stream": True,
            },
        ) as reply:
            assert reply.status_code == 200, reply.read()
            raw = reply.read()
        stored = http.get(f"/v1/responses/{compacted['id']}").json()
        listed = http.get("/v1/responses", params={"limit": 100}).json()["data"]
    final = validate_sse(raw)
    assert final["output"][0]["content"][0]["text"] == "banana"
    assert [m["content"] for m in scripted.requests[-1].body["messages"]] == [
        "Build a dog cafe landing page.",
        "Now the menu.",
        "Remember: the secret word is banana.",
        SUMMARY_PREFIX + "The secret word is banana.",
        "What was the secret word?",
    ]
    # GET shows what /compact answered; the record is the root of the chain that follows it.
    assert [(o["type"], o["id"]) for o in stored["output"]] == [(o["type"], o["id"]) for o in compacted["output"]]
    assert stored["output"][-1]["encrypted_content"] == compacted["output"][-1]["encrypted_content"]
    assert stored["previous_response_id"] is None
    # The client's instructions, never the gateway's summariser prompt (the admin still marks it).
    (record,) = [r for r in listed if r["id"] == compacted["id"]]
    assert record["instructions"] == stored["instructions"] == "Be brief."
    instructions = Response.objects.get(id=compacted["id"]).instructions
    assert instructions is not None and instructions.endswith(COMPACTION_INSTRUCTIONS)


def test_compact_errors(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text=SUMMARY))
    http = gateway.http()
    missing = http.post("/v1/responses/compact", json={"input": "x"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    nothing = http.post("/v1/responses/compact", json={"model": MODEL})
    assert nothing.status_code == 400 and nothing.json()["error"]["param"] == "input"
    good = http.post("/v1/responses/compact", json={"model": MODEL, "input": "hello"}).json()
    item = good["output"][-1]
    tampered = {**item, "encrypted_content": item["encrypted_content"][:-4] + "AAAA"}
    bad = http.post("/v1/responses", json={"model": MODEL, "input": [tampered, {"role": "user", "content": "x"}]})
    assert bad.status_code == 400
    assert (bad.json()["error"]["code"], bad.json()["error"]["param"]) == (
        "invalid_encrypted_content",
        "input[0].encrypted_content",
    )
    other_key, _ = make_key(tenant="other-co", name="other")
    foreign = gateway.http(other_key).post("/v1/responses", json={"model": MODEL, "input": [item]})
    assert foreign.status_code == 400 and foreign.json()["error"]["code"] == "invalid_encrypted_content"
    assert http.get("/v1/responses/compact").status_code == 405


def test_a_compaction_without_a_summary_is_stored_failed(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """The client gets a 502; the record says failed too, so nothing continues from an empty one."""
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="   "))
    with gateway.http() as http:
        r = http.post("/v1/responses/compact", json={"model": MODEL, "input": "hello"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_empty"
    row = Response.objects.order_by("-created_at").first()
    assert (
        row is not None and row.status == "failed" and row.error is not None and row.error["code"] == "upstream_empty"
    )
