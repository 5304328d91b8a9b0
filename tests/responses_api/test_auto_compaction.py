"""Automatic compaction (`context_management: [{"type": "compaction", "compact_threshold": N}]`)
on every upstream kind: when a model call's context passes N tokens the gateway first has the
model summarise it, the stream shows the `compaction` item as OpenAI's does (added, then
`response.compaction.compacting`, then done, before the answer), and the call and later turns
start from it, so that a 50-turn session's upstream bodies stay bounded, chained by
`previous_response_id` or by sending the output back as input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from responses_api.protocol.compaction import SUMMARY_REQUEST, WHOLE_CONTEXT_INSTRUCTIONS, WHOLE_SUMMARY_PREFIX
from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

THRESHOLD = 300  # tokens, by the gateway's estimate: about 1,200 characters of context
ANSWER = "Noted; the count goes on and every earlier number is kept in mind. " * 2
KINDS = [
    ("chat_completions", MODEL, MODEL, "/v1/chat/completions"),
    ("responses", NATIVE, "up-native", "/v1/responses"),
    ("anthropic", CLAUDE, "claude-up", "/v1/messages"),
]


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def script(scripted: ScriptedUpstream, upstream_model: str) -> list[str]:
    """Answers every turn; writes a numbered summary when asked for one. Returns the summaries."""
    summaries: list[str] = []

    def reply(body: dict[str, Any]) -> Reply:
        if SUMMARY_REQUEST in last_user_text(body):
            summaries.append(f"Summary {len(summaries) + 1}: the user counts turns; the assistant keeps count.")
            return Reply(text=summaries[-1])
        return Reply(text=ANSWER, chunk_chars=16)

    scripted.set_responder(upstream_model, reply)
    return summaries


def answers(scripted: ScriptedUpstream, path: str) -> list[dict[str, Any]]:
    """The bodies of the upstream calls that answered a turn (not the summary calls)."""
    calls = [r.body for r in scripted.model_calls if r.path == path]
    return [b for b in calls if SUMMARY_REQUEST not in json.dumps(b)]


@pytest.fixture
def three_kinds(anthropic: Gateway, native: Gateway) -> Gateway:  # noqa: F811 - the fixtures
    return anthropic


@pytest.mark.parametrize(("kind", "model", "upstream_model", "path"), KINDS)
def test_a_50_turn_chain_keeps_the_upstream_body_bounded(
    three_kinds: Gateway, scripted: ScriptedUpstream, kind: str, model: str, upstream_model: str, path: str
) -> None:
    summaries = script(scripted, upstream_model)
    management = [{"type": "compaction", "compact_threshold": THRESHOLD}]
    previous: str | None = None
    compacted_turns = []
    with three_kinds.http() as http:
        for turn in range(50):
            body = {
                "model": model,
                "input": f"Turn {turn}: please note the number {turn} and keep counting with me.",
                "context_management": management,
                "previous_response_id": previous,
                "stream": turn % 2 == 0,
            }
            answered = http.post("/v1/responses", json=body)
            assert answered.status_code == 200, answered.text
            final = validate_sse(answered.content) if body["stream"] else answered.json()
            if not body["stream"]:
                validate_response_object(final)
            types = [item["type"] for item in final["output"]]
            assert types in (["message"], ["compaction", "message"]), types
            if types[0] == "compaction":
                compacted_turns.append(turn)
            previous = final["id"]
    sizes = [len(json.dumps(b)) for b in answers(scripted, path)]
    assert len(sizes) == 50 and len(summaries) == len(compacted_turns) >= 5
    # Without compaction the 50th body would hold 100 messages (about 13,000 characters of text).
    assert max(sizes[10:]) < 3000, sizes
    # A turn that compacted answered from the summary alone; the one after it, from the summary on.
    first = compacted_turns[0]
    after = answers(scripted, path)[first + 1]
    assert json.dumps(WHOLE_SUMMARY_PREFIX + summaries[0])[1:-1] in json.dumps(after)
    assert f"Turn {first - 1}:" not in json.dumps(after)
    summary_calls = [r.body for r in scripted.model_calls if r.path == path and SUMMARY_REQUEST in json.dumps(r.body)]
    assert WHOLE_CONTEXT_INSTRUCTIONS in json.dumps(summary_calls[0]) and not summary_calls[0].get("tools")


def test_the_stream_shows_the_compaction_as_openai_does(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    summaries = script(scripted, MODEL)
    rules = {"role": "developer", "content": "Count in French."}
    history = [{"role": "user", "content": f"Earlier message {n}: " + "some context " * 30} for n in range(4)]
    client = gateway.openai()
    stream = client.responses.create(
        model=MODEL,
        input=[rules, *history, {"role": "user", "content": "And now?"}],
        context_management=[{"type": "compaction", "compact_threshold": THRESHOLD}],
        store=False,
        stream=True,
    )
    events = list(stream)  # parsed into the SDK's own event types
    kinds = [type(e).__name__ for e in events]
    assert kinds[:5] == [
        "ResponseCreatedEvent",
        "ResponseInProgressEvent",
        "ResponseOutputItemAddedEvent",
        "ResponseCompactionCompactingEvent",
        "ResponseOutputItemDoneEvent",
    ], kinds
    final = events[-1].response
    compaction, message = final.output
    assert compaction.type == "compaction" and summaries[0] not in compaction.encrypted_content
    assert message.type == "message" and final.output_text == ANSWER
    assert final.usage is not None and final.usage.input_tokens > 0
    # Stateless chaining: the client sends everything back, compaction item included (OpenAI's
    # guide: append the output items as usual); the upstream gets the instructions, the summary
    # and what came after it, not the turns the summary stands for: the context shrinks.
    sent_back = [rules, *history, {"role": "user", "content": "And now?"}, *[o.model_dump() for o in final.output]]
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={"model": MODEL, "input": [*sent_back, {"role": "user", "content": "Next?"}], "store": False},
        ).content
    validate_sse(raw) if raw.startswith(b"event") else validate_response_object(json.loads(raw))
    messages = scripted.model_calls[-1].body["messages"]
    assert [m["role"] for m in messages][1:] == ["user", "assistant", "user"], messages
    assert messages[0]["role"] in ("system", "developer") and messages[0]["content"] == "Count in French."
    assert messages[1]["content"] == WHOLE_SUMMARY_PREFIX + summaries[0] and messages[-1]["content"] == "Next?"
    assert "Earlier message" not in json.dumps(messages)


def test_below_the_threshold_nothing_is_compacted(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    summaries = script(scripted, MODEL)
    response = gateway.openai().responses.create(
        model=MODEL, input="short", context_management=[{"type": "compaction", "compact_threshold": 10_000}]
    )
    assert [o.type for o in response.output] == ["message"] and summaries == []
    assert len(scripted.model_calls) == 1


@pytest.mark.parametrize(
    ("entries", "param"),
    [
        ([{"type": "truncate"}], "context_management[0].type"),
        ([{"type": "compaction", "compact_threshold": "big"}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": 0}], "context_management[0].compact_threshold"),
        (["compaction"], "context_management[0]"),
    ],
)
def test_bad_context_management_is_a_400_naming_the_field(gateway: Gateway, entries: list, param: str) -> None:
    answer = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "x", "context_management": entries})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


def test_a_background_run_compacts_on_the_worker_and_its_log_replays_valid(
    gateway: Gateway, scripted: ScriptedUpstream, worker
) -> None:
    from tests.responses_api.test_background import poll, read_log

    summaries = script(scripted, MODEL)
    history = [{"role": "user", "content": f"Earlier message {n}: " + "some context " * 30} for n in range(4)]
    created = gateway.openai().responses.create(
        model=MODEL,
        input=[*history, {"role": "user", "content": "And now?"}],
        context_management=[{"type": "compaction", "compact_threshold": THRESHOLD}],
        background=True,
    )
    final = poll(gateway, created.id)
    assert [o["type"] for o in final["output"]] == ["compaction", "message"] and len(summaries) == 1
    events = validate_sse(read_log(gateway, created.id), background=True, final_response=final)
    assert events["id"] == created.id
    raw = read_log(gateway, created.id).decode()
    assert raw.count("response.compaction.compacting") == 2  # the event line and its type


def test_between_the_steps_of_a_tool_loop(tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook) -> None:
    """A server tool's long output passes the threshold: the next step starts from a compaction
    made after it, and the stream stays valid."""
    from tests.support.harness import call
    from tests.support.webhook import Route

    webhook.routes["/weather"] = Route(handler=lambda c: {"city": c.json["city"], "forecast": "sunny and warm " * 150})
    summaries: list[str] = []

    def reply(body: dict[str, Any]) -> Reply | None:
        if SUMMARY_REQUEST in last_user_text(body):
            summaries.append("Summary: Paris is sunny and warm; the user wants the weather.")
            return Reply(text=summaries[-1])
        return None  # the queue answers

    scripted.set_responder(MODEL, reply)
    scripted.enqueue(MODEL, Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]), Reply(text="Sunny."))
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "Weather in Paris?",
                "tools": [{"type": "function", "name": "get_weather"}],
                "context_management": [{"type": "compaction", "compact_threshold": THRESHOLD}],
                "stream": True,
            },
        ).content
    final = validate_sse(raw)
    assert [o["type"] for o in final["output"]] == ["function_call", "function_call_output", "compaction", "message"]
    last = scripted.model_calls[-1].body["messages"]
    assert len(summaries) == 1 and [m["role"] for m in last] == ["user"]
    assert last[0]["content"] == WHOLE_SUMMARY_PREFIX + summaries[0]
