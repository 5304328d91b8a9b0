"""Input guardrails (responses_api/orchestration/guardrails.py) through the real openai SDK
against the scripted upstream: block, redact and log on /v1/responses (JSON, SSE, WebSocket,
background), /v1/responses/compact, /v1/chat/completions, /v1/embeddings and prompt templates;
audited (never the matched text), counted in /metrics, scoped to their tenant, key or route."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import openai
import pytest

from tests.reliability.test_metrics import value
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_events, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

EMAIL = "ann.smith@example.com"
CARD = "4111 1111 1111 1111"
IBAN = "DE89370400440532013000"
PHONE = "+1 650-253-0000"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
CODENAME = "Project Zeus"
SECRETS = (EMAIL, CARD, IBAN, PHONE, AWS_KEY, CODENAME, "Zeus")


def guardrail(name: str, kind: str, action: str, config: dict[str, Any] | None = None, **scope: Any):
    from responses_api.models import Guardrail

    if config is None:
        config = {"categories": {"codename": {"words": [CODENAME]}}} if kind == "patterns" else {}
    row = Guardrail(name=name, kind=kind, action=action, config=config, **scope)
    row.full_clean()
    row.save()
    return row


def events() -> list[Any]:
    from responses_api.models import GuardrailEvent

    return list(
        GuardrailEvent.objects.order_by("id").values(
            "tenant_id", "api_key_id", "response_id", "guardrail_name", "category", "action", "where"
        )
    )


def assert_never_leaked(caplog: pytest.LogCaptureFixture) -> None:
    """The matched text is in no audit row and no log line."""
    from responses_api.models import GuardrailEvent

    audit = repr(list(GuardrailEvent.objects.values()))
    # The gateway's records (the test's own clients log what they send: websockets, httpx).
    ours = [r for r in caplog.records if not r.name.startswith(("websockets", "httpx", "httpcore", "openai"))]
    logged = "".join(r.getMessage() + str(r.__dict__) for r in ours)
    for secret in SECRETS:
        assert secret not in audit and secret not in logged, secret


def user_texts(body: dict[str, Any]) -> str:
    return repr(body.get("messages") or body.get("input"))


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.DEBUG):
        yield


def test_block_is_a_400_naming_the_category_before_any_upstream_call(
    gateway: Gateway, scripted: ScriptedUpstream, caplog
) -> None:
    guardrail("no-codenames", "patterns", "block")
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input=f"Tell me about {CODENAME.lower()} please")
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "guardrail_blocked"
    assert "codename" in error["message"] and "no-codenames" in error["message"]
    assert "zeus" not in error["message"].lower()
    with gateway.http() as http:  # streamed: the same 400, no stream opened
        r = http.post("/v1/responses", json={"model": MODEL, "input": f"{CODENAME}!", "stream": True})
    assert r.status_code == 400 and r.json()["error"]["code"] == "guardrail_blocked"
    assert scripted.requests == []
    rows = events()
    assert len(rows) == 2 and {r["action"] for r in rows} == {"block"} and rows[0]["where"] == "responses"
    assert rows[0]["category"] == "codename" and rows[0]["tenant_id"] == gateway.tenant_id
    assert rows[0]["response_id"] == ""  # refused: no response was made
    # Unmatched text passes untouched, and is not audited.
    scripted.enqueue(MODEL, Reply(text="fine"))
    assert client.responses.create(model=MODEL, input="Zeusberg is a town").output_text == "fine"
    assert len(events()) == 2
    assert_never_leaked(caplog)


def test_redact_reaches_the_upstream_and_the_store(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    guardrail("pii", "pii", "redact")
    scripted.enqueue(MODEL, Reply(text="noted"))
    client = gateway.openai()
    text = f"Mail {EMAIL}, call {PHONE}, card {CARD}, IBAN {IBAN}, key {AWS_KEY}."
    resp = client.responses.create(model=MODEL, instructions=f"The user is {EMAIL}", input=text)
    sent = scripted.requests[-1].body["messages"]
    redacted = (
        "Mail [REDACTED:email], call [REDACTED:phone], card [REDACTED:card], "
        "IBAN [REDACTED:iban], key [REDACTED:credential]."
    )
    assert sent == [
        {"role": "system", "content": "The user is [REDACTED:email]"},
        {"role": "user", "content": redacted},
    ]
    stored = client.responses.input_items.list(resp.id).data
    assert stored[0].content[0].text == redacted
    assert resp.instructions == "The user is [REDACTED:email]"
    assert {r["category"] for r in events()} == {"email", "phone", "card", "iban", "credential"}
    assert {r["action"] for r in events()} == {"redact"}
    assert {r["response_id"] for r in events()} == {resp.id}  # recorded once the response has its id
    assert_never_leaked(caplog)


def test_streamed_redact_is_strictly_valid_and_log_passes(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    guardrail("pii", "pii", "redact", {"categories": ["email"]})
    guardrail("watch", "patterns", "log")
    scripted.enqueue(MODEL, Reply(text="streamed answer", chunk_chars=4))
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": f"{CODENAME}: write to {EMAIL}", "stream": True})
    assert r.status_code == 200
    assert validate_sse(r.content)["status"] == "completed"
    # `log` passes the text as sent; `redact` replaces its own match.
    assert scripted.requests[-1].body["messages"][-1]["content"] == f"{CODENAME}: write to [REDACTED:email]"
    assert sorted((e["guardrail_name"], e["action"]) for e in events()) == [("pii", "redact"), ("watch", "log")]
    assert_never_leaked(caplog)


def test_websocket_create(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    from tests.websocket.test_websocket_mode import socket, turn

    guardrail("no-codenames", "patterns", "block")
    guardrail("pii", "pii", "redact", {"categories": ["card"]})
    scripted.enqueue(MODEL, Reply(text="over the socket"))
    with socket(gateway) as ws:
        (error,) = turn(ws, model=MODEL, input=f"About {CODENAME}")
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["code"] == "guardrail_blocked" and "Zeus" not in str(error)
        final = validate_events(turn(ws, model=MODEL, input=f"Card {CARD}"))
        assert final["status"] == "completed"
    assert [c.body["messages"][-1]["content"] for c in scripted.model_calls] == ["Card [REDACTED:card]"]
    assert_never_leaked(caplog)


def test_background_run_gets_the_redacted_text(gateway: Gateway, scripted: ScriptedUpstream, worker, caplog) -> None:
    from tests.responses_api.test_background import poll

    guardrail("pii", "pii", "redact", {"categories": ["email"]})
    scripted.enqueue(MODEL, Reply(text="done"))
    created = gateway.openai().responses.create(model=MODEL, input=f"Reply to {EMAIL}", background=True)
    assert poll(gateway, created.id)["status"] == "completed"
    assert scripted.requests[-1].body["messages"][-1]["content"] == "Reply to [REDACTED:email]"
    with gateway.http() as http:
        items = http.get(f"/v1/responses/{created.id}/input_items").json()["data"]
    assert EMAIL not in repr(items) and "[REDACTED:email]" in repr(items)
    assert [(e["response_id"], e["category"]) for e in events()] == [(created.id, "email")]


def test_prompt_template_variables_are_checked(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from tests.responses_api.test_prompts import make_prompt

    guardrail("no-codenames", "patterns", "block")
    prompt_id = make_prompt()
    with pytest.raises(openai.BadRequestError):
        gateway.openai().responses.create(
            prompt={"id": prompt_id, "variables": {"topic": "billing", "customer": CODENAME}}, input="Hi"
        )
    assert scripted.requests == []


def test_compact_is_checked(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    guardrail("no-codenames", "patterns", "block")
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.openai().responses.compact(model=MODEL, input=f"We discussed {CODENAME}")
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "guardrail_blocked"
    assert scripted.requests == []
    assert [e["where"] for e in events()] == ["responses.compact"]


def test_chat_completions_and_embeddings(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    guardrail("no-codenames", "patterns", "block")
    guardrail("pii", "pii", "redact", {"categories": ["email", "credential"]})
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"{CODENAME}?"}])
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "guardrail_blocked"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input=["fine", f"about {CODENAME}"])
    assert scripted.requests == []
    scripted.enqueue(MODEL, Reply(text="ok"))
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [{"type": "text", "text": f"I am {EMAIL}"}]}],
    )
    assert scripted.requests[-1].body["messages"][0]["content"][0]["text"] == "I am [REDACTED:email]"
    client.embeddings.create(model=MODEL, input=[f"key {AWS_KEY}", "plain"])
    assert scripted.requests[-1].path == "/v1/embeddings"
    assert scripted.requests[-1].body["input"] == ["key [REDACTED:credential]", "plain"]
    assert [e["where"] for e in events()] == ["chat.completions", "embeddings", "chat.completions", "embeddings"]
    # Token ids are no way around them: not text a guardrail can read, so refused while one
    # that blocks or redacts applies (a key no such guardrail covers sends them as before).
    calls = len(scripted.requests)
    for ids in ([1, 2, 3], [[1, 2], [3]]):
        with gateway.http() as http:
            r = http.post("/v1/embeddings", json={"model": MODEL, "input": ids})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input", r.text
    assert len(scripted.requests) == calls
    assert_never_leaked(caplog)


def test_scopes_tenant_key_and_route_never_cross(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey, ModelRoute

    other_key, other_tenant = make_key(tenant="globex", name="other")
    second_key, _ = make_key(name="second")  # acme's second key
    guardrail("acme-only", "patterns", "block", tenant_id=gateway.tenant_id)
    second = ApiKey.objects.get(name="second")
    guardrail("second-key", "pii", "block", {"categories": ["email"]}, api_key=second)
    guardrail(
        "route",
        "patterns",
        "block",
        {"categories": {"swear": {"words": ["darn"]}}},
        route=ModelRoute.objects.get(name=MODEL),
    )
    scripted.enqueue(MODEL, Reply(text="globex may"), Reply(text="acme's first key may"))
    assert gateway.openai(other_key).responses.create(model=MODEL, input=CODENAME).output_text == "globex may"
    with pytest.raises(openai.BadRequestError):
        gateway.openai().responses.create(model=MODEL, input=CODENAME)
    # The key's guardrail is the second key's alone; the tenant's applies to both (a union).
    assert gateway.openai().responses.create(model=MODEL, input=EMAIL).output_text == "acme's first key may"
    for text in (EMAIL, CODENAME):
        with pytest.raises(openai.BadRequestError):
            gateway.openai(second_key).responses.create(model=MODEL, input=text)
    with pytest.raises(openai.BadRequestError):  # the route's: every tenant on that model
        gateway.openai(other_key).responses.create(model=MODEL, input="darn it")
    assert {e["tenant_id"] for e in events() if e["guardrail_name"] == "acme-only"} == {gateway.tenant_id}
    assert other_tenant not in {e["tenant_id"] for e in events() if e["guardrail_name"] != "route"}


@pytest.mark.django_db
def test_bad_definitions_are_refused() -> None:
    from django.core.exceptions import ValidationError

    from responses_api.models import Guardrail

    for fields, field in (
        ({"applies_to": "everything"}, "applies_to"),
        ({"config": {"categories": {"x": {"words": ["y"]}}, "on_stream": "later"}}, "config"),
        ({"config": {"categories": {"x": {"regex": ["(unclosed"]}}}}, "config"),
        ({"config": {"categories": ["email", "ssn"]}, "kind": "pii"}, "config"),
        ({"action": "warn"}, "action"),
    ):
        row = Guardrail(name="g", **({"kind": "patterns", "config": {"categories": {"x": {"words": ["y"]}}}} | fields))
        with pytest.raises(ValidationError) as raised:
            row.full_clean()
        assert field in raised.value.message_dict, (fields, raised.value.message_dict)


def test_audit_is_counted_listed_and_filtered(
    gateway: Gateway, scripted: ScriptedUpstream, settings, admin_client
) -> None:
    settings.GATEWAY_METRICS_TOKEN = "scrape-secret-123"

    def decisions() -> float:
        scrape = httpx.get(f"{gateway.url}/metrics", headers={"Authorization": "Bearer scrape-secret-123"}).text
        return value(
            scrape,
            "gateway_guardrail_decisions_total",
            guardrail="no-codenames",
            category="codename",
            action="block",
            where="responses",
        )

    guardrail("no-codenames", "patterns", "block")
    guardrail("watch", "pii", "log", {"categories": ["email"]})
    before = decisions()
    with pytest.raises(openai.BadRequestError):
        gateway.openai().responses.create(model=MODEL, input=CODENAME)
    scripted.enqueue(MODEL, Reply(text="ok"))
    gateway.openai().responses.create(model=MODEL, input=EMAIL)
    assert decisions() - before == 1
    listing = admin_client.get("/admin/responses_api/guardrailevent/?action=block").content.decode()
    assert '<td class="field-category">codename</td>' in listing and "Zeus" not in listing
    assert '<td class="field-category">email</td>' not in listing  # the `log` decision: filtered out
    logged = admin_client.get("/admin/responses_api/guardrailevent/?action=log").content.decode()
    assert '<td class="field-category">email</td>' in logged and EMAIL not in logged
    assert admin_client.get("/admin/responses_api/guardrail/").status_code == 200
