"""Reusable prompts (`prompt: {id, version, variables}`) from the gateway's registry, through the
real openai SDK: applied with variables, the request's fields first, echoed, errors before any
upstream call, tenants kept apart, streamed, chained, on a worker and over the WebSocket."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_events, validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

PNG = "data:image/png;base64,iVBORw0KGgo="


def make_prompt(prompt_id: str = "pmpt_support", tenant_id: int | None = None, versions: int = 1, **fields: Any) -> str:
    """A prompt with `versions` versions; version n's instructions end with "(vN)"."""
    from responses_api.models import Prompt, PromptVersion

    prompt = Prompt.objects.create(id=prompt_id, name=prompt_id, tenant_id=tenant_id)
    for n in range(1, versions + 1):
        values: dict[str, Any] = {
            "instructions": f"You help with {{{{topic}}}} (v{n}).",
            "input": [{"role": "user", "content": "Customer: {{customer}}"}],
            "model": MODEL,
        }
        PromptVersion.objects.create(prompt=prompt, version=n, **(values | fields))
    return prompt.id


def test_applied_with_variables_and_echoed(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    prompt_id = make_prompt()
    scripted.enqueue(MODEL, Reply(text="Hello Ann"))
    client = gateway.openai()
    variables = {"topic": "billing", "customer": {"type": "input_text", "text": "Ann"}}
    raw = client.responses.with_raw_response.create(prompt={"id": prompt_id, "variables": variables}, input="Hi")
    assert "prompt" not in raw.headers.get("x-gateway-ignored-fields", "")
    resp = raw.parse()
    assert resp.model == MODEL  # from the template: the request named none
    assert resp.instructions == "You help with billing (v1)."
    assert resp.prompt is not None and resp.prompt.id == prompt_id and resp.prompt.version == "1"
    assert resp.prompt.variables is not None and resp.prompt.variables["topic"] == "billing"
    assert scripted.requests[-1].body["messages"] == [
        {"role": "system", "content": "You help with billing (v1)."},
        {"role": "user", "content": "Customer: Ann"},
        {"role": "user", "content": "Hi"},
    ]
    with gateway.http() as http:
        body = http.get(f"/v1/responses/{resp.id}").json()
    validate_response_object(body)
    assert body["prompt"] == {"id": prompt_id, "version": "1", "variables": variables}


def test_request_fields_take_precedence_and_versions(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    prompt_id = make_prompt(versions=2, text_format={"type": "json_schema", "name": "answer", "schema": schema})
    client = gateway.openai()
    vars_ = {"topic": "billing", "customer": "Bo"}
    scripted.enqueue(MODEL, Reply(text='{"a": "x"}'), Reply(text="plain"), Reply(text="v1"))
    default = client.responses.create(prompt={"id": prompt_id, "variables": vars_})
    assert default.prompt is not None and default.prompt.version == "2"  # no default set: the newest
    assert default.text.format.type == "json_schema"
    sent = scripted.requests[-1].body
    assert sent["response_format"]["json_schema"]["name"] == "answer"
    assert sent["messages"][-1] == {"role": "user", "content": "Customer: Bo"}  # input: the template's alone
    # The request's own instructions, model and text.format win over the template's.
    own = client.responses.create(
        model=MODEL,
        prompt={"id": prompt_id, "variables": vars_},
        instructions="Mine",
        text={"format": {"type": "text"}},
        input="q",
    )
    assert own.instructions == "Mine" and own.text.format.type == "text"
    assert "response_format" not in scripted.requests[-1].body
    assert scripted.requests[-1].body["messages"][0] == {"role": "system", "content": "Mine"}
    pinned = client.responses.create(prompt={"id": prompt_id, "version": "1", "variables": vars_})
    assert pinned.prompt is not None and pinned.prompt.version == "1"
    assert pinned.instructions == "You help with billing (v1)."


def test_image_variable_is_a_content_part(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    prompt_id = make_prompt(instructions="", input=[{"role": "user", "content": "Describe {{photo}} briefly"}])
    scripted.enqueue(MODEL, Reply(text="a cat"))
    image = {"type": "input_image", "image_url": PNG, "detail": "low"}
    gateway.openai().responses.create(prompt={"id": prompt_id, "variables": {"photo": image}})
    (message,) = scripted.requests[-1].body["messages"]
    assert [p["type"] for p in message["content"]] == ["text", "image_url", "text"]
    assert message["content"][0]["text"] == "Describe " and message["content"][2]["text"] == " briefly"
    assert message["content"][1]["image_url"] == {"url": PNG, "detail": "low"}


def test_bad_references_are_4xx_naming_the_field_before_any_upstream_call(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    _, other_tenant = make_key(tenant="globex", name="other")
    prompt_id = make_prompt()
    foreign = make_prompt("pmpt_foreign", tenant_id=other_tenant)
    good = {"topic": "t", "customer": "c"}
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"id": "pmpt_nonexistent_12345"}, 404, "prompt.id"),
        ({"id": foreign, "variables": good}, 404, "prompt.id"),  # another tenant's: the same 404
        ({"id": "not-a-prompt-id"}, 404, "prompt.id"),
        ({"id": prompt_id, "version": "9", "variables": good}, 404, "prompt.version"),
        ({"id": prompt_id, "version": "latest", "variables": good}, 400, "prompt.version"),
        ({"id": prompt_id, "variables": {"topic": "t"}}, 400, "prompt.variables.customer"),
        ({"id": prompt_id, "variables": {**good, "extra": "x"}}, 400, "prompt.variables.extra"),
        ({"id": prompt_id, "variables": {**good, "topic": 3}}, 400, "prompt.variables.topic"),
        (
            {"id": prompt_id, "variables": {"topic": {"type": "input_image", "image_url": PNG}, "customer": "c"}},
            400,
            "prompt.variables.topic",
        ),
    ]
    with gateway.http() as http:
        for prompt, status, param in cases:
            for stream in (False, True):
                r = http.post("/v1/responses", json={"prompt": prompt, "input": "x", "stream": stream})
                assert r.status_code == status, (prompt, r.text)
                assert r.json()["error"]["param"] == param, (prompt, r.text)
        unknown = http.post("/v1/responses", json={"prompt": {"id": "pmpt_nope"}, "input": "x"}).json()
        foreign_answer = http.post("/v1/responses", json={"prompt": {"id": "pmpt_nope"}, "input": "x"}).json()
    assert unknown["error"]["message"].replace("pmpt_nope", "") == foreign_answer["error"]["message"].replace(
        "pmpt_nope", ""
    )
    assert scripted.requests == []


def test_shared_prompt_serves_every_tenant(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    prompt_id = make_prompt("pmpt_shared", tenant_id=None)
    other_key, _ = make_key(tenant="globex", name="other")
    scripted.enqueue(MODEL, Reply(text="one"), Reply(text="two"))
    for key in (gateway.key, other_key):
        resp = gateway.openai(key).responses.create(
            prompt={"id": prompt_id, "variables": {"topic": "a", "customer": "b"}}
        )
        assert resp.status == "completed" and resp.prompt is not None


def test_streamed_run_is_strictly_valid(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    prompt_id = make_prompt()
    scripted.enqueue(MODEL, Reply(text="streamed answer", chunk_chars=4))
    with gateway.http() as http:
        r = http.post(
            "/v1/responses",
            json={
                "prompt": {"id": prompt_id, "variables": {"topic": "a", "customer": "b"}},
                "input": "x",
                "stream": True,
            },
        )
        assert r.status_code == 200
    final = validate_sse(r.content)
    assert final["status"] == "completed" and final["prompt"]["id"] == prompt_id and final["model"] == MODEL


def test_chain_applies_the_template_each_turn(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    prompt_id = make_prompt()
    client = gateway.openai()
    vars_ = {"topic": "a", "customer": "b"}
    scripted.enqueue(MODEL, Reply(text="first"), Reply(text="second"))
    first = client.responses.create(prompt={"id": prompt_id, "variables": vars_}, input="one")
    second = client.responses.create(
        prompt={"id": prompt_id, "variables": {**vars_, "customer": "c"}}, input="two", previous_response_id=first.id
    )
    assert second.prompt is not None and second.previous_response_id == first.id
    messages = scripted.requests[-1].body["messages"]
    assert messages[0] == {"role": "system", "content": "You help with a (v1)."}
    assert [m["content"] for m in messages[1:]] == ["Customer: b", "one", "first", "Customer: c", "two"]


def test_background_run_gets_the_applied_request(gateway: Gateway, scripted: ScriptedUpstream, worker) -> None:
    from tests.responses_api.test_background import poll

    prompt_id = make_prompt()
    scripted.enqueue(MODEL, Reply(text="done"))
    created = gateway.openai().responses.create(
        prompt={"id": prompt_id, "variables": {"topic": "a", "customer": "b"}}, background=True
    )
    assert created.prompt is not None and created.prompt.id == prompt_id
    final = poll(gateway, created.id)
    assert final["status"] == "completed" and final["prompt"]["version"] == "1"
    assert scripted.requests[-1].body["messages"] == [
        {"role": "system", "content": "You help with a (v1)."},
        {"role": "user", "content": "Customer: b"},
    ]


def test_websocket_create(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from tests.websocket.test_websocket_mode import socket, turn

    prompt_id = make_prompt()
    scripted.enqueue(MODEL, Reply(text="over the socket"))
    with socket(gateway) as ws:
        final = validate_events(turn(ws, prompt={"id": prompt_id, "variables": {"topic": "a", "customer": "b"}}))
        assert final["status"] == "completed" and final["prompt"]["id"] == prompt_id
        (error,) = turn(ws, prompt={"id": "pmpt_unknown"}, input="x")
        assert error["type"] == "error" and error["status"] == 404 and error["error"]["param"] == "prompt.id"
    assert scripted.requests[-1].body["messages"][1] == {"role": "user", "content": "Customer: b"}


def test_usage_groups_by_prompt_and_the_admin_thread_names_it(
    gateway: Gateway, scripted: ScriptedUpstream, admin_client
) -> None:
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    prompt_id = make_prompt(versions=2)
    client = gateway.openai()
    vars_ = {"topic": "a", "customer": "b"}
    scripted.enqueue(
        MODEL,
        *(Reply(text="x", usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}) for _ in range(4)),
    )
    client.responses.create(model=MODEL, input="no prompt")
    first = client.responses.create(prompt={"id": prompt_id, "version": "1", "variables": vars_})
    client.responses.create(prompt={"id": prompt_id, "version": "1", "variables": vars_})
    head = client.responses.create(prompt={"id": prompt_id, "variables": vars_}, previous_response_id=first.id)
    with gateway.http() as http:
        data = http.get("/v1/usage", params={"group_by": "prompt"}).json()["data"]
        csv_text = http.get("/v1/usage", params={"group_by": "prompt", "format": "csv"}).text
    by_prompt = {(b["prompt"], b["prompt_version"]): b["requests"] for b in data}
    assert by_prompt == {(None, None): 1, (prompt_id, "1"): 2, (prompt_id, "2"): 1}
    assert csv_text.splitlines()[0].startswith("prompt,prompt_version,")

    page = admin_client.get(reverse("admin:responses_api_response_conversation", args=[quote(head.id)]))
    body = page.content.decode()
    assert page.status_code == 200
    assert f"<code>{prompt_id}</code></a> version 1" in body and f"<code>{prompt_id}</code></a> version 2" in body
    assert reverse("admin:responses_api_prompt_change", args=[quote(prompt_id)]) in body


def test_admin_adds_versions_and_never_changes_a_saved_one(admin_client) -> None:
    from django.urls import reverse

    from responses_api.models import Prompt, PromptVersion

    prompt_id = make_prompt()
    url = reverse("admin:responses_api_prompt_change", args=[prompt_id])
    page = admin_client.get(url)
    assert page.status_code == 200 and "You help with {{topic}} (v1)." in page.content.decode()
    form = {
        "name": "renamed",
        "tenant": "",
        "description": "",
        "default_version": "",
        "versions-TOTAL_FORMS": "2",
        "versions-INITIAL_FORMS": "1",
        "versions-MIN_NUM_FORMS": "0",
        "versions-MAX_NUM_FORMS": "1000",
        "versions-0-id": str(PromptVersion.objects.get(prompt_id=prompt_id).pk),
        "versions-0-prompt": prompt_id,
        "versions-0-instructions": "tampered",  # not an editable field: ignored
        "versions-1-prompt": prompt_id,
        "versions-1-instructions": "Second {{topic}}",
        "versions-1-input": "[]",
        "versions-1-model": "",
        "versions-1-tools": "null",
        "versions-1-text_format": "null",
        "versions-1-reasoning": "null",
    }
    reply = admin_client.post(url, form)
    assert reply.status_code == 302, reply.content.decode()[-3000:]
    versions = {v.version: v.instructions for v in PromptVersion.objects.filter(prompt_id=prompt_id)}
    assert versions == {1: "You help with {{topic}} (v1).", 2: "Second {{topic}}"}
    assert Prompt.objects.get(id=prompt_id).name == "renamed"
    saved = PromptVersion.objects.get(prompt_id=prompt_id, version=1)
    saved.instructions = "changed"
    with pytest.raises(ValueError, match="immutable"):
        saved.save()
    bad = dict(form, **{"versions-1-instructions": "", "versions-1-input": '[{"role": "robot", "content": "x"}]'})
    reply = admin_client.post(url, bad)
    assert reply.status_code == 200 and PromptVersion.objects.filter(prompt_id=prompt_id).count() == 2


def test_input_tokens_counts_the_applied_prompt(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    prompt_id = make_prompt(instructions="A long template about {{topic}}. " * 40)
    prompt = {"id": prompt_id, "variables": {"topic": "billing", "customer": "Ann"}}
    with gateway.http() as http:
        bare = http.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "Hi"}).json()["input_tokens"]
        with_prompt = http.post("/v1/responses/input_tokens", json={"prompt": prompt, "input": "Hi"})
        unknown = http.post("/v1/responses/input_tokens", json={"prompt": {"id": "pmpt_gone"}, "input": "Hi"})
    assert with_prompt.status_code == 200, with_prompt.text
    assert with_prompt.json()["input_tokens"] > bare + 200
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "prompt.id"


def test_template_tools_and_a_tool_choice_naming_one(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    lookup = {
        "type": "function",
        "name": "lookup",
        "description": "Find an order",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
    }
    prompt_id = make_prompt(tools=[lookup])
    prompt = {"id": prompt_id, "variables": {"topic": "a", "customer": "b"}}
    scripted.enqueue(MODEL, Reply(text="ok"))
    resp = gateway.openai().responses.create(prompt=prompt, tool_choice={"type": "function", "name": "lookup"})
    assert [getattr(t, "name", None) for t in resp.tools] == ["lookup"]
    sent = scripted.requests[-1].body
    assert sent["tools"][0]["function"]["name"] == "lookup"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    with gateway.http() as http:  # a choice naming no tool of the request or the template
        r = http.post("/v1/responses", json={"prompt": prompt, "tool_choice": {"type": "function", "name": "nope"}})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("tool_choice"), r.text
