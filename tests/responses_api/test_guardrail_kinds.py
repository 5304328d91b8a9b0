"""The remote guardrail kinds against real local servers: `moderation` against a scripted
`/v1/moderations` server on loopback, `judge` against a scripted judge route of the gateway.
Block and log on the input paths, fail-open and fail-closed on a timeout and a broken answer,
the judge's own usage kind, and no secret (the text, the moderation key) in logs or the audit."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.responses_api.test_guardrails import events, guardrail
from tests.support.harness import MODEL, Gateway, make_route
from tests.support.moderation import ModerationServer
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

MOD_KEY = "mod-key-4f9b1c7e2d"
THREAT = "I will hurt the quarterly spreadsheet"
EMAIL = "ann.smith@example.com"
JUDGE = "judge-model"


@pytest.fixture
def moderation() -> Iterator[ModerationServer]:
    server = ModerationServer().start()
    server.words = {"violence": ["hurt"], "hate": ["hateful"]}
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.DEBUG):
        yield


def moderated(server: ModerationServer, action: str = "block", name: str = "moderated", **config: Any):
    return guardrail(name, "moderation", action, {"url": server.url, "timeout": 5, **config})


def judged(action: str = "block", name: str = "judged", **config: Any):
    return guardrail(name, "judge", action, {"route": JUDGE, "policy": "No medical advice.", **config})


def ours(caplog: pytest.LogCaptureFixture) -> str:
    records = [r for r in caplog.records if not r.name.startswith(("websockets", "httpx", "httpcore", "openai"))]
    return "".join(r.getMessage() + str(r.__dict__) for r in records)


def assert_never_leaked(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    from responses_api.models import GuardrailEvent

    audit = repr(list(GuardrailEvent.objects.values()))
    logged = ours(caplog)
    for secret in secrets:
        assert secret not in audit and secret not in logged, secret


def test_moderation_blocks_naming_the_category_and_sends_its_key(
    gateway: Gateway, scripted: ScriptedUpstream, moderation: ModerationServer, monkeypatch, caplog
) -> None:
    monkeypatch.setenv("MODERATION_KEY", MOD_KEY)
    moderation.api_key = MOD_KEY
    moderated(moderation, api_key_env="MODERATION_KEY", model="omni-moderation-latest")
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, instructions="Be brief.", input=THREAT)
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "guardrail_blocked"
    assert "violence" in error["message"] and "moderated" in error["message"] and "hurt" not in error["message"]
    assert scripted.requests == []
    (call,) = moderation.calls
    assert call.headers["authorization"] == f"Bearer {MOD_KEY}"
    assert call.body == {"model": "omni-moderation-latest", "input": f"{THREAT}\n\nBe brief."}
    assert [(e["category"], e["action"], e["where"]) for e in events()] == [("violence", "block", "responses")]
    # Text the server does not flag passes; the chat path asks it too.
    scripted.enqueue(MODEL, Reply(text="fine"), Reply(text="chat fine"))
    assert client.responses.create(model=MODEL, input="A calm day").output_text == "fine"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "so hateful"}])
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    assert chat.choices[0].message.content == "chat fine"
    assert [e["where"] for e in events()] == ["responses", "chat.completions"]
    assert_never_leaked(caplog, THREAT, "hurt", MOD_KEY)


def test_moderation_counts_only_its_categories_log_passes_and_sees_redacted_text(
    gateway: Gateway, scripted: ScriptedUpstream, moderation: ModerationServer, caplog
) -> None:
    guardrail("pii", "pii", "redact", {"categories": ["email"]})
    moderated(moderation, categories=["hate"])  # violence does not count for this one
    moderated(moderation, "log", name="watch")
    scripted.enqueue(MODEL, Reply(text="ok"))
    resp = gateway.openai().responses.create(model=MODEL, input=f"{THREAT}, write to {EMAIL}")
    assert resp.output_text == "ok"
    # Both asked (at once) about the text as redacted: the address never left for the server.
    assert [c.body["input"] for c in moderation.calls] == [f"{THREAT}, write to [REDACTED:email]"] * 2
    assert sorted((e["guardrail_name"], e["category"], e["action"]) for e in events()) == [
        ("pii", "email", "redact"),
        ("watch", "violence", "log"),
    ]
    assert {e["response_id"] for e in events()} == {resp.id}
    assert_never_leaked(caplog, THREAT, EMAIL)


def test_moderation_timeout_fail_open_passes_and_fail_closed_refuses(
    gateway: Gateway, scripted: ScriptedUpstream, moderation: ModerationServer, caplog
) -> None:
    moderation.delay = 3.0  # far beyond the guardrail's timeout
    row = moderated(moderation, timeout=0.2, fail_open=True)
    scripted.enqueue(MODEL, Reply(text="passed"))
    assert gateway.openai().responses.create(model=MODEL, input=THREAT).output_text == "passed"
    assert events() == []  # a pass: nothing to audit
    assert "could not check" in ours(caplog) and "fail_open" in ours(caplog)
    row.config = {**row.config, "fail_open": False}
    row.save()
    from responses_api.orchestration.guardrails import clear_cache

    clear_cache()
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": THREAT})
    assert r.status_code == 503 and r.json()["error"]["code"] == "guardrail_unavailable"
    assert len(scripted.model_calls) == 1  # only the first, fail-open request reached the model
    assert [(e["category"], e["action"]) for e in events()] == [("unavailable", "block")]
    assert_never_leaked(caplog, THREAT)


def test_a_broken_or_failing_server_is_a_failure_too(
    gateway: Gateway, scripted: ScriptedUpstream, moderation: ModerationServer, caplog
) -> None:
    moderated(moderation)  # fail closed by default
    moderation.raw_answer = b"<html>not a verdict</html>"
    with gateway.http() as http:
        assert http.post("/v1/responses", json={"model": MODEL, "input": "calm"}).status_code == 503
        moderation.raw_answer, moderation.status = None, 500
        assert http.post("/v1/responses", json={"model": MODEL, "input": "calm"}).status_code == 503
    assert scripted.requests == []
    # A key the server needs, from a variable the gateway does not have: a failure, not a call without it.
    from responses_api.models import Guardrail
    from responses_api.orchestration.guardrails import clear_cache

    Guardrail.objects.all().delete()
    moderation.status, moderation.api_key = 200, MOD_KEY
    moderated(moderation, api_key_env="NO_SUCH_MODERATION_KEY_VAR")
    clear_cache()
    calls = len(moderation.calls)
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "calm"})
    assert r.status_code == 503 and len(moderation.calls) == calls
    assert "NO_SUCH_MODERATION_KEY_VAR is not set" in ours(caplog)


def test_judge_blocks_with_its_category_bypasses_guardrails_and_counts_its_tokens(
    gateway: Gateway, scripted: ScriptedUpstream, gateway_server, caplog
) -> None:
    make_route(scripted.base_url, name=JUDGE)
    # All traffic, the judge route's own included: its call would recurse if it were guarded.
    judged(categories=["medical", "legal"])
    verdicts = iter(['{"allowed": false, "category": "medical"}', '```json\n{"allowed": true}\n```'])
    scripted.set_responder(
        JUDGE,
        lambda body: Reply(
            text=next(verdicts), usage={"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}
        ),
    )
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="Which dose of ibuprofen for my child?")
    assert isinstance(raised.value.body, dict) and "medical" in raised.value.body["message"]
    (asked,) = scripted.model_calls
    assert asked.body["model"] == JUDGE and "No medical advice." in asked.body["messages"][0]["content"]
    assert "ibuprofen" in asked.body["messages"][-1]["content"]
    scripted.enqueue(MODEL, Reply(text="Paris"))
    assert client.responses.create(model=MODEL, input="Capital of France?").output_text == "Paris"
    assert [c.body["model"] for c in scripted.model_calls] == [JUDGE, JUDGE, MODEL]
    assert [(e["guardrail_name"], e["category"]) for e in events()] == [("judged", "medical")]
    # The judge's tokens: the tenant's, under their own usage kind.
    from responses_api.models import UsageRecord
    from responses_api.store.usage import usage_writer

    gateway_server.call(usage_writer.flush())  # written in batches: now
    records = list(UsageRecord.objects.values_list("tenant_id", "endpoint", "model", "input_tokens", "output_tokens"))
    assert records == [(gateway.tenant_id, "guardrail.judge", JUDGE, 40, 9)] * 2
    usage = gateway.http().get("/v1/usage", params={"group_by": "model"}).json()
    (bucket,) = [b for b in usage["data"] if b["model"] == JUDGE]
    assert (bucket["requests"], bucket["input_tokens"], bucket["output_tokens"]) == (2, 80, 18)
    kinds = gateway.http().get("/v1/usage", params={"group_by": "kind"}).json()["data"]
    assert {b["kind"]: b["requests"] for b in kinds} == {"guardrail.judge": 2, "responses": 1}
    assert_never_leaked(caplog, "ibuprofen")


def test_judge_unclear_answer_and_timeout_follow_fail_open(
    gateway: Gateway, scripted: ScriptedUpstream, caplog
) -> None:
    make_route(scripted.base_url, name=JUDGE)
    row = judged(fail_open=True, timeout=1)
    scripted.enqueue(JUDGE, Reply(text="I think it is probably fine."))
    scripted.enqueue(MODEL, Reply(text="answered"))
    assert gateway.openai().responses.create(model=MODEL, input="hello").output_text == "answered"
    row.config = {**row.config, "fail_open": False}
    row.save()
    from responses_api.orchestration.guardrails import clear_cache

    clear_cache()
    scripted.enqueue(JUDGE, Reply(text='{"allowed": true}', delay=4.0))  # a clear verdict, too late
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "hello"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "guardrail_unavailable"
    assert [c.body["model"] for c in scripted.model_calls] == [JUDGE, MODEL, JUDGE]
    assert "the judge's answer is not JSON" in ours(caplog) and "no verdict within 1 s" in ours(caplog)


@pytest.mark.django_db
def test_remote_kinds_refuse_redact_and_bad_configs_naming_the_field() -> None:
    from django.core.exceptions import ValidationError

    from responses_api.models import Guardrail

    for kind, action, config, field, words in (
        ("moderation", "redact", {"url": "http://m/v1/moderations"}, "action", "block or log"),
        ("judge", "redact", {"route": "x", "policy": "p"}, "action", "block or log"),
        ("moderation", "block", {}, "config", "url"),
        ("moderation", "block", {"url": "ftp://m"}, "config", "url"),
        ("moderation", "block", {"url": "http://m", "api_key_env": "sk-live abc"}, "config", "api_key_env"),
        ("moderation", "block", {"url": "http://m", "timeout": 0}, "config", "timeout"),
        ("moderation", "block", {"url": "http://m", "fail_open": "yes"}, "config", "fail_open"),
        ("judge", "block", {"route": "no-such-route", "policy": "p"}, "config", "no model route"),
        ("judge", "block", {"route": "x"}, "config", "policy"),
    ):
        row = Guardrail(name="g", kind=kind, action=action, config=config)
        with pytest.raises(ValidationError) as raised:
            row.full_clean()
        assert field in raised.value.message_dict, (kind, config, raised.value.message_dict)
        assert words in str(raised.value.message_dict[field]), raised.value.message_dict


def test_automatic_compaction_summariser_call_is_checked_as_input(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """The summariser is sent the whole context, the model's own earlier answers included, which
    no input guardrail saw: its call is checked as input (redact: the summariser gets the redacted
    text; block: the request is refused before the call)."""
    from responses_api.orchestration.guardrails import clear_cache
    from responses_api.protocol.compaction import SUMMARY_REQUEST
    from tests.responses_api.test_auto_compaction import THRESHOLD, last_user_text

    padding = "The count goes on and every earlier number is kept in mind. " * 20

    def reply(body: dict[str, Any]) -> Reply:
        if SUMMARY_REQUEST in last_user_text(body):
            return Reply(text="Summary: the user asked for a contact.")
        return Reply(text=f"Write to {EMAIL} about Project Zeus. {padding}")

    scripted.set_responder(MODEL, reply)
    management = [{"type": "compaction", "compact_threshold": THRESHOLD}]
    with gateway.http() as http:
        first = http.post("/v1/responses", json={"model": MODEL, "input": "Who do I contact?"}).json()
        guardrail("pii", "pii", "redact", {"categories": ["email"]})
        clear_cache()  # the first request cached "no guardrails" for this key and model
        body = {
            "model": MODEL,
            "input": "Thanks.",
            "previous_response_id": first["id"],
            "context_management": management,
        }
        second = http.post("/v1/responses", json=body)
        assert second.status_code == 200, second.text
        assert [i["type"] for i in second.json()["output"]] == ["compaction", "message"]
        (summary_call,) = [c for c in scripted.model_calls if SUMMARY_REQUEST in last_user_text(c.body)]
        sent = repr(summary_call.body["messages"])
        assert EMAIL not in sent and "[REDACTED:email]" in sent
        assert [(e["where"], e["category"], e["response_id"]) for e in events()] == [
            ("responses.autocompact", "email", second.json()["id"])
        ]
        guardrail("no-codenames", "patterns", "block")  # the model's earlier answer names it
        clear_cache()
        calls = len(scripted.model_calls)
        third = http.post("/v1/responses", json={**body, "stream": True})
        assert third.status_code == 400 and third.json()["error"]["code"] == "guardrail_blocked"
        assert len(scripted.model_calls) == calls  # refused before the summariser was called


def test_the_thread_view_shows_each_responses_decisions(
    gateway: Gateway, scripted: ScriptedUpstream, moderation: ModerationServer, admin_client
) -> None:
    from django.contrib.admin.utils import quote

    guardrail("pii", "pii", "redact", {"categories": ["email"]})
    moderated(moderation, "log", name="watch")
    scripted.enqueue(MODEL, Reply(text="first"), Reply(text="second"))
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input=f"{THREAT}, mail {EMAIL}")
    second = client.responses.create(model=MODEL, input="calm", previous_response_id=first.id)
    page = admin_client.get(f"/admin/responses_api/response/{quote(second.id)}/conversation/").content.decode()
    assert page.count('data-role="guardrail-events"') == 1  # the first response's; the second had none
    shown = page.split('data-role="guardrail-events"')[1].split("</div>")[0]
    assert "pii: redact email (responses)" in shown and "watch: log violence (responses)" in shown
    assert f"?q={first.id}" in shown
    assert EMAIL not in page and "hurt" not in shown
    audit = admin_client.get(f"/admin/responses_api/guardrailevent/?q={first.id}&action=log").content.decode()
    assert '<td class="field-category">violence</td>' in audit and '<td class="field-category">email</td>' not in audit


def test_conversation_items_are_checked_when_added(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    """Items added through /v1/conversations reach a model later, as context no input guardrail
    checks again: they are checked as they are added (redacted as stored, or refused)."""
    guardrail("pii", "pii", "redact", {"categories": ["email"]})
    guardrail("no-codenames", "patterns", "block")
    message = {"type": "message", "role": "user", "content": f"Mail {EMAIL}"}
    with gateway.http() as http:
        created = http.post("/v1/conversations", json={"items": [message]})
        assert created.status_code == 200, created.text
        conversation = created.json()["id"]
        refused = http.post(
            f"/v1/conversations/{conversation}/items",
            json={"items": [{"type": "message", "role": "user", "content": "About Project Zeus"}]},
        )
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "guardrail_blocked"
        added = http.post(f"/v1/conversations/{conversation}/items", json={"items": [message]})
        assert EMAIL not in added.text and "[REDACTED:email]" in added.text
        stored = http.get(f"/v1/conversations/{conversation}/items").text
        assert EMAIL not in stored and "Zeus" not in stored
        scripted.enqueue(MODEL, Reply(text="ok"))
        answered = http.post("/v1/responses", json={"model": MODEL, "input": "Go on.", "conversation": conversation})
        assert answered.status_code == 200, answered.text
    assert EMAIL not in repr(scripted.requests[-1].body) and "[REDACTED:email]" in repr(scripted.requests[-1].body)
    assert [(e["where"], e["category"], e["action"]) for e in events()] == [
        ("conversations", "email", "redact"),
        ("conversations", "codename", "block"),
        ("conversations", "email", "redact"),
    ]
    assert_never_leaked(caplog, EMAIL, "Zeus")


def test_remote_kinds_on_the_other_input_paths(
    gateway: Gateway, scripted: ScriptedUpstream, moderation: ModerationServer, caplog
) -> None:
    from tests.websocket.test_websocket_mode import socket, turn

    moderated(moderation)
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input=["fine", THREAT])
    with pytest.raises(openai.BadRequestError):
        client.responses.compact(model=MODEL, input=THREAT)
    with gateway.http() as http:
        r = http.post(
            "/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": THREAT}]}
        )
    assert r.status_code == 400, r.text
    with socket(gateway) as ws:
        (error,) = turn(ws, model=MODEL, input=THREAT)
        assert error["type"] == "error" and error["error"]["code"] == "guardrail_blocked"
    assert scripted.requests == []
    # /compact: the client's text only, not the gateway's summariser prompt after it.
    assert [c.body["input"] for c in moderation.calls] == [f"fine\n\n{THREAT}", THREAT, THREAT, THREAT]
    assert [e["where"] for e in events()] == ["embeddings", "responses.compact", "messages", "responses"]
    assert_never_leaked(caplog, THREAT)
