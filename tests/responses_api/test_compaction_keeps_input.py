"""Issue 46: after a whole-context compaction item the upstream context holds what the request
that sent it placed before it, then the summary, then what follows; nothing of what the summary
stands for. Codex 0.171 sends its base instructions as a `developer` item before the item in a
request without `previous_response_id` (tests/fixtures/codex/README.md), and continues from that
request by `previous_response_id` (from the database, or from the WebSocket connection's
memory): its instructions must reach the upstream, byte-identical, on every upstream kind."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from responses_api.protocol.compaction import SUMMARY_REQUEST, WHOLE_SUMMARY_PREFIX
from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_events, validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import socket, turn

pytestmark = pytest.mark.embedded

BASE = json.loads((Path(__file__).parents[1] / "fixtures" / "codex" / "base_instructions_item.json").read_text())
BASE_TEXT = BASE["content"][0]["text"]
SUMMARY = "SUMMARY: the user builds a dog cafe page; the header is done."
OLD_QUESTION = "OLD-TURN: build me a dog cafe page."
OLD_ANSWER = "OLD-ANSWER: here is the header."
KINDS = [  # (the model the client asks for, the upstream model, the upstream path)
    (MODEL, MODEL, "/v1/chat/completions"),
    (CLAUDE, "claude-up", "/v1/messages"),
    (NATIVE, "up-native", "/v1/responses"),
]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value (the upstream body), whole."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from strings(inner)


def script(scripted: ScriptedUpstream, upstream_model: str) -> None:
    def reply(body: dict[str, Any]) -> Reply:
        text = json.dumps(body)
        if SUMMARY_REQUEST in text:
            return Reply(text=SUMMARY)
        return Reply(text=OLD_ANSWER if OLD_QUESTION in text else "Menu next.")

    scripted.set_responder(upstream_model, reply)


def check_after_compaction(body: dict[str, Any], *, path: str, last: str) -> None:
    """Codex's instructions, byte-identical, then the summary, then the new items; nothing of
    the chain the summary stands for."""
    texts = list(strings(body))
    dumped = json.dumps(body)
    assert BASE_TEXT in texts, "the base instructions reach the upstream whole and unchanged"
    assert any(t.startswith(WHOLE_SUMMARY_PREFIX) and t.endswith(SUMMARY) for t in texts)
    assert OLD_QUESTION not in dumped and OLD_ANSWER not in dumped
    if path != "/v1/messages":  # Anthropic's instructions are its `system`, outside the messages
        order = [json.dumps(BASE_TEXT), json.dumps(WHOLE_SUMMARY_PREFIX)[:-1], json.dumps(last)]
        positions = [dumped.index(piece) for piece in order]
        assert positions == sorted(positions), positions
    if path == "/v1/messages":
        system = body["system"] if isinstance(body["system"], str) else "".join(b["text"] for b in body["system"])
        assert BASE_TEXT in system
    elif path == "/v1/chat/completions":
        assert {"role": "developer", "content": BASE_TEXT} in body["messages"] or {
            "role": "system",
            "content": BASE_TEXT,
        } in body["messages"]


def answered(scripted: ScriptedUpstream, path: str) -> list[dict[str, Any]]:
    return [r.body for r in scripted.requests if r.path == path and SUMMARY_REQUEST not in json.dumps(r.body)]


Send = Callable[..., dict[str, Any]]


def codex_session(send: Send, model: str) -> None:
    """What Codex does: a turn, a remote compaction of the chain, then a request without
    `previous_response_id` that places its initial context before the compaction item, then a
    turn continuing it."""
    first = send(model=model, input=[BASE, user(OLD_QUESTION)])
    compacted = send(model=model, input=[{"type": "compaction_trigger"}], previous_response_id=first["id"])
    (item,) = compacted["output"]
    assert item["type"] == "compaction"
    after = send(
        model=model,
        input=[
            BASE,
            user("Build the menu."),
            {"type": "compaction", "id": item["id"], "encrypted_content": item["encrypted_content"]},
            user("Go on."),
        ],
    )
    send(model=model, input=[user("And the prices?")], previous_response_id=after["id"])


@pytest.fixture
def kinds(anthropic: Gateway, native: Gateway) -> Gateway:  # noqa: F811 - the fixtures
    return anthropic  # one gateway with the three routes


@pytest.mark.parametrize(("model", "upstream_model", "path"), KINDS)
@pytest.mark.parametrize("transport", ["json", "sse"])
def test_over_http_the_base_instructions_outlive_the_compaction(
    kinds: Gateway, scripted: ScriptedUpstream, model: str, upstream_model: str, path: str, transport: str
) -> None:
    script(scripted, upstream_model)
    with kinds.http() as http:

        def send(**body: Any) -> dict[str, Any]:
            answer = http.post("/v1/responses", json={**body, "stream": transport == "sse"})
            assert answer.status_code == 200, answer.text
            if transport == "sse":
                return validate_sse(answer.content)
            validate_response_object(answer.json())
            return answer.json()

        codex_session(send, model)
    after, continued = answered(scripted, path)[-2:]
    check_after_compaction(after, path=path, last="Go on.")
    # The next turn reads the chain from the database: its instructions are still there.
    check_after_compaction(continued, path=path, last="And the prices?")


@pytest.mark.parametrize(("model", "upstream_model", "path"), KINDS)
def test_over_a_websocket_the_base_instructions_outlive_the_compaction(
    kinds: Gateway, scripted: ScriptedUpstream, model: str, upstream_model: str, path: str
) -> None:
    script(scripted, upstream_model)
    with socket(kinds) as ws:

        def send(**body: Any) -> dict[str, Any]:
            final = validate_events(turn(ws, **body, store=False))  # Codex's: from the connection's memory
            assert final["status"] == "completed", final
            return final

        codex_session(send, model)
    after, continued = answered(scripted, path)[-2:]
    check_after_compaction(after, path=path, last="Go on.")
    check_after_compaction(continued, path=path, last="And the prices?")


def test_in_a_conversation_the_base_instructions_outlive_the_compaction(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """The conversation holds the compaction twice: as the trigger's output (which keeps nothing
    before it) and in the input of the request that placed Codex's context before it (which
    keeps that input's items before it on every later turn)."""
    script(scripted, MODEL)
    client = gateway.openai()
    conversation = client.conversations.create().id

    def send(**body: Any) -> dict[str, Any]:
        body.pop("previous_response_id", None)  # the conversation carries the context
        return client.responses.create(**body, conversation=conversation).model_dump(mode="json")

    codex_session(send, MODEL)
    after, continued = answered(scripted, "/v1/chat/completions")[-2:]
    check_after_compaction(after, path="/v1/chat/completions", last="Go on.")
    check_after_compaction(continued, path="/v1/chat/completions", last="And the prices?")
    assert json.dumps(continued).count(json.dumps(BASE_TEXT)) == 1


@pytest.mark.parametrize("transport", ["json", "websocket"])
def test_a_resumed_codex_session_warms_up_with_its_instructions_then_sends_the_compaction_item(
    gateway: Gateway, scripted: ScriptedUpstream, transport: str
) -> None:
    """`codex exec resume` sends its instructions alone in a warm-up (`generate: false`), then
    the rest of its context, compaction item included, continuing the warm-up: nothing was
    answered between the two, so the instructions are before the item in the same input."""
    script(scripted, MODEL)
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input=[BASE, user(OLD_QUESTION)])
    compacted = client.responses.create(
        model=MODEL, input=[{"type": "compaction_trigger"}], previous_response_id=first.id
    )
    item = compacted.output[0].model_dump(mode="json")
    rest = [
        user("Build the menu."),
        {"type": "compaction", "id": item["id"], "encrypted_content": item["encrypted_content"]},
        user("Go on."),
    ]
    if transport == "json":
        warm = client.responses.create(model=MODEL, input=[BASE], extra_body={"generate": False})
        assert warm.output == []
        client.responses.create(model=MODEL, input=rest, previous_response_id=warm.id)
    else:
        with socket(gateway) as ws:
            warmed = validate_events(turn(ws, model=MODEL, input=[BASE], generate=False, store=False))
            assert warmed["output"] == []
            final = validate_events(turn(ws, model=MODEL, input=rest, previous_response_id=warmed["id"], store=False))
            assert final["status"] == "completed", final
    check_after_compaction(answered(scripted, "/v1/chat/completions")[-1], path="/v1/chat/completions", last="Go on.")


def test_input_tokens_count_what_the_compaction_keeps(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """`POST /v1/responses/input_tokens` counts the context the model would get: Codex's
    instructions before the item included (about 4,200 tokens of them)."""
    script(scripted, MODEL)
    client = gateway.openai()
    compacted = client.responses.create(model=MODEL, input=[user(OLD_QUESTION), {"type": "compaction_trigger"}])
    item = compacted.output[0].model_dump(mode="json")
    body = {
        "model": MODEL,
        "input": [
            BASE,
            {"type": "compaction", "id": item["id"], "encrypted_content": item["encrypted_content"]},
            user("Go on."),
        ],
    }
    counted = gateway.http().post("/v1/responses/input_tokens", json=body)
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] > len(BASE_TEXT) // 5


@pytest.mark.parametrize("later", ["http", "another socket"])
def test_a_stored_response_continuing_an_unstored_compaction_keeps_the_compaction_from_the_database(
    gateway: Gateway, scripted: ScriptedUpstream, later: str
) -> None:
    """A stored response continuing an unstored one from a WebSocket's memory stores its whole
    context as its input. A continuation of it read from the database must drop what the
    compaction item replaced as one on the same connection does: the flattened input holds
    several requests' inputs, and only the request's own before the item is kept."""
    script(scripted, MODEL)
    rules = "RULES-BEFORE-THE-COMPACTION: answer in French."
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": rules}]}
    with socket(gateway) as ws:

        def send(**body: Any) -> dict[str, Any]:
            final = validate_events(turn(ws, model=MODEL, **body))
            assert final["status"] == "completed", final
            return final

        first = send(input=[developer, user(OLD_QUESTION)], store=False)
        compacted = send(input=[{"type": "compaction_trigger"}], previous_response_id=first["id"], store=False)
        stored = send(input=[user("Build the menu.")], previous_response_id=compacted["id"], store=True)
        send(input=[user("Same connection.")], previous_response_id=stored["id"], store=True)
    if later == "http":
        gateway.openai().responses.create(model=MODEL, input=[user("Later.")], previous_response_id=stored["id"])
    else:
        with socket(gateway) as ws:
            final = validate_events(turn(ws, model=MODEL, input=[user("Later.")], previous_response_id=stored["id"]))
            assert final["status"] == "completed", final
    same, later_body = answered(scripted, "/v1/chat/completions")[-2:]
    for body in (same, later_body):
        dumped = json.dumps(body)
        assert OLD_QUESTION not in dumped and OLD_ANSWER not in dumped and rules not in dumped, body
        assert any(t.startswith(WHOLE_SUMMARY_PREFIX) and t.endswith(SUMMARY) for t in strings(body))
        assert "Build the menu." in dumped
    assert same["messages"][:-1] == later_body["messages"][:-1]  # both paths give the same context
