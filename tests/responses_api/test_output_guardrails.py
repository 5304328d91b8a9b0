"""Output guardrails (protocol/output_guard.py in the engine and the translating writers) through
the real openai and anthropic SDKs against the scripted upstream: block, redact and log on the
model's text, the tool-call arguments it emits and the outputs of the tools the gateway runs, on
/v1/responses (JSON, SSE, WebSocket, background), /v1/chat/completions and /v1/messages; every
guarded stream strictly valid, no byte of a blocked match sent, the audit without the matched
text, a tenant's guardrail never applied to another tenant."""

from __future__ import annotations

import json
import logging
from typing import Any

import anthropic
import pytest

from tests.responses_api.test_guardrails import AWS_KEY, CODENAME, EMAIL, assert_never_leaked, events, guardrail
from tests.support.anthropic_stream import validate_messages_sse
from tests.support.harness import MODEL, Gateway, call, make_key
from tests.support.stream_validator import parse_sse, validate_events, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.webhook import Route, WebhookServer

pytestmark = pytest.mark.embedded

# Longer than the hold-back (32 characters here, more than any match below) so that text is
# released before the match arrives.
BEFORE = "Here is the whole plan, step by step, for "
ANSWER = f"{BEFORE}{CODENAME}: first we go north, then south."
REDACTED_ANSWER = f"Write to {EMAIL} for details, or ask the desk downstairs today."


@pytest.fixture(autouse=True)
def _small_holdback(settings, caplog: pytest.LogCaptureFixture):
    settings.GATEWAY_GUARDRAIL_HOLDBACK_CHARS = 32
    with caplog.at_level(logging.DEBUG):
        yield


def block_codenames(**scope: Any) -> None:
    guardrail("no-codenames", "patterns", "block", applies_to="output", **scope)


def redact_email(applies_to: str = "output") -> None:
    guardrail(f"pii-{applies_to}", "pii", "redact", {"categories": ["email", "credential"]}, applies_to=applies_to)


def stream_raw(gateway: Gateway, body: dict[str, Any], path: str = "/v1/responses") -> bytes:
    with gateway.http() as http, http.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        return r.read()


def stored(gateway: Gateway, response_id: str) -> dict[str, Any]:
    with gateway.http() as http:
        return http.get(f"/v1/responses/{response_id}").json()


def test_block_ends_the_response_incomplete_on_json_and_sse(
    gateway: Gateway, scripted: ScriptedUpstream, caplog
) -> None:
    block_codenames()
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3), Reply(text=ANSWER, chunk_chars=3))
    resp = gateway.openai().responses.create(model=MODEL, input="plan?")
    assert resp.status == "incomplete" and resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "content_filter"
    assert resp.output_text == BEFORE  # the text up to the match
    assert stored(gateway, resp.id)["output"][0]["content"][0]["text"] == BEFORE
    # Closed at the block, before the upstream's usage came: counted as estimated, not as free.
    assert resp.usage is not None and resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    raw = stream_raw(gateway, {"model": MODEL, "input": "plan?"})
    assert b"Zeus" not in raw and b"Project" not in raw  # no byte of the match was sent
    final = validate_sse(raw)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "content_filter"}
    assert parse_sse(raw)[-1]["type"] == "response.incomplete"
    validate_sse(raw, final_response=stored(gateway, final["id"]))  # the stored response agrees
    rows = events()
    assert [(r["where"], r["action"], r["category"]) for r in rows] == [("responses", "block", "codename")] * 2
    assert [r["response_id"] for r in rows] == [resp.id, final["id"]]
    assert_never_leaked(caplog)


def test_redact_reaches_the_client_and_the_store_and_log_passes(
    gateway: Gateway, scripted: ScriptedUpstream, caplog
) -> None:
    redact_email()
    guardrail("watch", "patterns", "log", {"categories": {"desk": {"words": ["desk"]}}}, applies_to="output")
    expected = REDACTED_ANSWER.replace(EMAIL, "[REDACTED:email]")
    scripted.enqueue(MODEL, Reply(text=REDACTED_ANSWER, chunk_chars=4), Reply(text=REDACTED_ANSWER, chunk_chars=4))
    resp = gateway.openai().responses.create(model=MODEL, input="contact?")
    assert resp.status == "completed" and resp.output_text == expected
    raw = stream_raw(gateway, {"model": MODEL, "input": "contact?"})
    assert EMAIL.encode() not in raw and b"smith@" not in raw
    final = validate_sse(raw)
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == expected
    validate_sse(raw, final_response=stored(gateway, final["id"]))
    assert sorted({(e["guardrail_name"], e["action"]) for e in events()}) == [
        ("pii-output", "redact"),
        ("watch", "log"),
    ]
    assert_never_leaked(caplog)


def test_the_sdk_stream_and_the_websocket_get_the_same_decision(
    gateway: Gateway, scripted: ScriptedUpstream, caplog
) -> None:
    from tests.websocket.test_websocket_mode import socket, turn

    block_codenames()
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=2), Reply(text=ANSWER, chunk_chars=5))
    # (The SDK's `responses.stream` helper insists on response.completed; the events it parses.)
    streamed = list(gateway.openai().responses.create(model=MODEL, input="plan?", stream=True))
    texts = [e.delta for e in streamed if e.type == "response.output_text.delta"]
    assert "".join(texts) == BEFORE
    assert streamed[-1].type == "response.incomplete" and streamed[-1].response.status == "incomplete"
    with socket(gateway) as ws:
        messages = turn(ws, model=MODEL, input="plan?")
    assert "Zeus" not in json.dumps(messages)
    done = validate_events(messages)
    assert done["status"] == "incomplete" and done["incomplete_details"] == {"reason": "content_filter"}
    assert_never_leaked(caplog)


def test_background_run_stored_events_and_resumed_streams_agree(
    gateway: Gateway, scripted: ScriptedUpstream, worker, caplog
) -> None:
    from tests.responses_api.test_background import poll, read_log

    block_codenames()
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3))
    created = gateway.openai().responses.create(model=MODEL, input="plan?", background=True)
    final = poll(gateway, created.id)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "content_filter"}
    assert final["output"][0]["content"][0]["text"] == BEFORE
    log = read_log(gateway, created.id)
    assert b"Zeus" not in log
    full = parse_sse(log)
    validate_events(full, background=True, final_response=final)
    n = len(full) // 2
    assert full[: n + 1] + parse_sse(read_log(gateway, created.id, after=n)) == full
    assert [(e["where"], e["response_id"]) for e in events()] == [("background", created.id)]
    assert_never_leaked(caplog)


def test_chat_completions_block_and_redact(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    block_codenames()
    redact_email()
    client = gateway.openai()
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3), Reply(text=REDACTED_ANSWER, chunk_chars=3))
    blocked = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "plan?"}])
    assert blocked.choices[0].finish_reason == "content_filter"
    assert blocked.choices[0].message.content == BEFORE
    assert blocked.usage is not None and blocked.usage.prompt_tokens > 0 and blocked.usage.completion_tokens > 0
    redacted = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "mail?"}])
    assert redacted.choices[0].message.content == REDACTED_ANSWER.replace(EMAIL, "[REDACTED:email]")
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3))
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "plan?"}], stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == BEFORE
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "content_filter"
    ]
    assert {e["where"] for e in events()} == {"chat.completions"}
    assert_never_leaked(caplog)


def test_messages_front_door_refuses_on_every_route_kind(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    """A Chat Completions route (translated) and an Anthropic route (which a guard reads as
    deltas instead of relaying its bytes) end with `stop_reason: "refusal"`."""
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing
    from tests.responses_api.test_messages_api import ROUTES, raw_stream

    for name in ("via-chat", "via-claude"):
        kind = ROUTES[name][0]
        provider = Provider.objects.create(
            name=f"p-{kind}", kind=kind, base_url=scripted.base_url, api_key_encrypted=routing.encrypt_secret("sk-up")
        )
        RouteTarget.objects.create(
            route=ModelRoute.objects.create(name=name), provider=provider, upstream_model=f"up-{kind}"
        )
    routing.clear_cache()
    block_codenames()
    claude: Any = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30.0)
    for model in ("via-chat", "via-claude"):
        upstream = f"up-{ROUTES[model][0]}"
        scripted.enqueue(upstream, Reply(text=ANSWER, chunk_chars=3), Reply(text=ANSWER, chunk_chars=3))
        body = {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": "plan?"}]}
        message = claude.messages.create(**body)
        assert message.stop_reason == "refusal", model
        assert "".join(b.text for b in message.content if b.type == "text") == BEFORE
        r = raw_stream(gateway, body)
        assert r.status_code == 200 and b"Zeus" not in r.content
        validate_messages_sse(r.content)
        assert b'"stop_reason":"refusal"' in r.content.replace(b" ", b"")
    assert {e["where"] for e in events()} == {"messages"} and len(events()) == 4
    assert_never_leaked(caplog)


def test_tool_arguments_block_and_redact_in_a_server_side_loop(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer, caplog
) -> None:
    guardrail("no-codenames", "patterns", "block", applies_to="tool_arguments")
    redact_email("tool_arguments")
    weather = [{"type": "function", "name": "get_weather"}]
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("get_weather", {"city": f"{CODENAME} base"}, "c1")], chunk_chars=3),
        Reply(tool_calls=[call("get_weather", {"city": EMAIL}, "c2")], chunk_chars=3),
        Reply(text="It is sunny."),
    )
    raw = stream_raw(gateway, {"model": MODEL, "input": "weather?", "tools": weather})
    assert b"Zeus" not in raw
    final = validate_sse(raw)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "content_filter"}
    assert [o["type"] for o in final["output"]] == ["function_call"]
    assert final["output"][0]["status"] == "incomplete"
    assert webhook.calls_to("/weather") == []  # a blocked call is never run
    resp = gateway.openai().responses.create(model=MODEL, input="weather?", tools=weather)
    assert resp.status == "completed" and resp.output_text == "It is sunny."
    assert json.loads(resp.output[0].arguments) == {"city": "[REDACTED:email]"}
    (hook,) = webhook.calls_to("/weather")
    assert hook.json == {"city": "[REDACTED:email]"}  # the tool the gateway runs gets it redacted
    assert {(e["guardrail_name"], e["action"]) for e in events()} == {
        ("no-codenames", "block"),
        ("pii-tool_arguments", "redact"),
    }
    assert_never_leaked(caplog)


def test_tool_output_redacted_or_withheld(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer, caplog
) -> None:
    redact_email("tool_output")
    guardrail("no-codenames", "patterns", "block", applies_to="tool_output")
    weather = [{"type": "function", "name": "get_weather"}]
    webhook.routes["/weather"] = Route(handler=lambda c: {"contact": EMAIL, "forecast": "sunny"})
    scripted.enqueue(
        MODEL, Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]), Reply(text="Sunny in Paris.")
    )
    resp = gateway.openai().responses.create(model=MODEL, input="weather?", tools=weather)
    assert resp.status == "completed"
    assert json.loads(resp.output[1].output) == {"contact": "[REDACTED:email]", "forecast": "sunny"}
    assert EMAIL not in json.dumps(scripted.requests[-1].body)  # nor does the model see it
    webhook.routes["/weather"] = Route(handler=lambda c: {"forecast": f"{CODENAME} weather"})
    scripted.enqueue(MODEL, Reply(tool_calls=[call("get_weather", {"city": "Rome"}, "c2")]))
    calls_before = len(scripted.model_calls)
    raw = stream_raw(gateway, {"model": MODEL, "input": "weather?", "tools": weather})
    assert b"Zeus" not in raw
    final = validate_sse(raw)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "content_filter"}
    assert final["output"][1]["output"] == "[BLOCKED:codename]"
    assert len(scripted.model_calls) == calls_before + 1  # the output never went back to the model
    assert_never_leaked(caplog)


def test_a_tenants_output_guardrail_never_applies_to_another_and_costs_nothing_unconfigured(
    gateway: Gateway, scripted: ScriptedUpstream, monkeypatch
) -> None:
    from responses_api.protocol.output_guard import OutputGuard

    other_key, other_tenant = make_key(tenant="globex", name="other")
    block_codenames(tenant_id=other_tenant)
    guardrail("input-only", "pii", "redact", {"categories": ["email"]})  # an input guardrail: no output work

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an output guard ran where none applies")

    monkeypatch.setattr(OutputGuard, "feed", never)
    monkeypatch.setattr(OutputGuard, "end", never)
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3), Reply(text=ANSWER, chunk_chars=3))
    assert gateway.openai().responses.create(model=MODEL, input="plan?").output_text == ANSWER
    assert validate_sse(stream_raw(gateway, {"model": MODEL, "input": "plan?"}))["status"] == "completed"
    monkeypatch.undo()
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3))
    blocked = gateway.openai(other_key).responses.create(model=MODEL, input="plan?")
    assert blocked.status == "incomplete"
    assert {(e["tenant_id"], e["guardrail_name"]) for e in events()} == {(other_tenant, "no-codenames")}


def test_the_holdback_bounds_what_waits(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    """With a guardrail on, text is released as it goes, the last hold-back characters behind."""
    block_codenames()
    text = "a harmless sentence " * 20
    scripted.enqueue(MODEL, Reply(text=text, chunk_chars=4))
    events_ = parse_sse(stream_raw(gateway, {"model": MODEL, "input": "talk"}))
    deltas = [e["delta"] for e in events_ if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == text and len(deltas) > 10  # streamed, not buffered whole
    assert AWS_KEY not in text


def test_mcp_call_outputs_are_guarded_in_the_loop_and_in_an_approved_call(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server, caplog
) -> None:
    from tests.tool_registry.test_mcp import adhoc

    answer = {"categories": {"answer": {"regex": [r"\b42\b"]}}}
    guardrail("hide-answers", "patterns", "redact", answer, applies_to="tool_output")
    client = gateway.openai()
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 20, "b": 22}, "c1")]), Reply(text="Done."))
    looped = client.responses.create(model=MODEL, input="20+22?", tools=[adhoc(mcp_server)])
    assert [o.type for o in looped.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert looped.output[1].output == "[REDACTED:answer]"
    assert scripted.requests[-1].body["messages"][-1]["content"] == "[REDACTED:answer]"  # the model's too

    from responses_api.models import Guardrail

    Guardrail.objects.filter(name="hide-answers").update(action="block")
    from responses_api.orchestration.guardrails import clear_cache

    clear_cache()
    tools = [adhoc(mcp_server, require_approval="always")]
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 40, "b": 2}, "c2")]))
    first = client.responses.create(model=MODEL, input="40+2?", tools=tools)
    request = first.output[1]
    calls_before = len(scripted.model_calls)
    approval = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    raw = stream_raw(gateway, {"model": MODEL, "previous_response_id": first.id, "tools": tools, "input": [approval]})
    final = validate_sse(raw)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "content_filter"}
    assert [o["type"] for o in final["output"]] == ["mcp_call"]
    assert final["output"][0]["output"] == "[BLOCKED:answer]" and b'"42"' not in raw
    assert len(scripted.model_calls) == calls_before  # the approved call's output never reached the model
    assert [(e["action"], e["category"]) for e in events()] == [("redact", "answer"), ("block", "answer")]


def test_whole_text_guardrails_buffer_or_only_log_as_the_operator_chose(
    gateway: Gateway, scripted: ScriptedUpstream, monkeypatch, caplog
) -> None:
    """A test-only kind that needs the whole answer (a patterns guardrail marked whole_text, as a
    moderation endpoint or a judge is): `on_stream: buffer` holds the answer back until its end
    and blocks it whole; `on_stream: log` streams it as it goes and audits after the end."""
    import dataclasses

    from responses_api.orchestration import guardrails as orchestration
    from responses_api.protocol.guardrails import compile_detector

    def whole_text(*args: Any) -> Any:
        return dataclasses.replace(compile_detector(*args), whole_text=True)

    monkeypatch.setattr(orchestration, "compile_detector", whole_text)
    words = {"categories": {"codename": {"words": [CODENAME]}}}
    guardrail("judge", "patterns", "block", words, applies_to="output")
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3))
    events_ = parse_sse(stream_raw(gateway, {"model": MODEL, "input": "plan?"}))
    deltas = [e["delta"] for e in events_ if e["type"] == "response.output_text.delta"]
    assert deltas == [BEFORE]  # held whole until the end, then checked: one delta, up to the match
    final = validate_events(events_)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "content_filter"}

    from responses_api.models import Guardrail

    Guardrail.objects.filter(name="judge").update(config={**words, "on_stream": "log"})
    orchestration.clear_cache()
    scripted.enqueue(MODEL, Reply(text=ANSWER, chunk_chars=3))
    events_ = parse_sse(stream_raw(gateway, {"model": MODEL, "input": "plan?"}))
    deltas = [e["delta"] for e in events_ if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == ANSWER and len(deltas) > 1  # streamed as it went, whole
    assert validate_events(events_)["status"] == "completed"
    assert [(e["action"], e["category"]) for e in events()] == [("block", "codename"), ("log", "codename")]
    assert_never_leaked(caplog)
