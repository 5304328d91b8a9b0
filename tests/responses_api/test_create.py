"""POST /v1/responses (non-streaming), retrieve, delete, input_items, chaining: through the real openai SDK."""

from __future__ import annotations

import json
import logging

import openai
import pytest

from tests.support.errors import error_body
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_response_object
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def test_create_text_and_retrieve(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(
        MODEL,
        Reply(
            text="Hello, world",
            usage={
                "prompt_tokens": 11,
                "completion_tokens": 3,
                "total_tokens": 14,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        ),
    )
    client = gateway.openai()
    resp = client.responses.create(
        model=MODEL,
        input="Say hello",
        instructions="Be brief",
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=50,
        metadata={"team": "search"},
    )
    assert resp.status == "completed"
    assert resp.output_text == "Hello, world"
    assert resp.usage.input_tokens == 11 and resp.usage.output_tokens == 3
    assert resp.usage.input_tokens_details.cached_tokens == 4
    assert resp.metadata == {"team": "search"}

    sent = scripted.requests[-1].body
    assert sent["messages"][0] == {"role": "system", "content": "Be brief"}
    assert sent["messages"][1] == {"role": "user", "content": "Say hello"}
    assert sent["temperature"] == 0.2 and sent["top_p"] == 0.9 and sent["max_tokens"] == 50

    with gateway.http() as http:
        raw = http.get(f"/v1/responses/{resp.id}")
        assert raw.status_code == 200 and raw.headers["x-request-id"]
        body = raw.json()
    validate_response_object(body)
    assert client.responses.retrieve(resp.id) == resp  # GET returns what create returned
    assert body["output"][0]["content"][0]["text"] == "Hello, world"


def test_every_emitted_response_is_spec_valid(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="ok"))
    with gateway.http() as http:
        body = http.post("/v1/responses", json={"model": MODEL, "input": "hi"}).json()
    validate_response_object(body)
    for key in ("conversation", "user", "safety_identifier", "prompt_cache_key", "completed_at"):
        assert key in body


def test_chain_with_previous_response_id(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="Paris"), Reply(text="About 2 million"))
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="Capital of France?", instructions="first only")
    second = client.responses.create(model=MODEL, input="Population?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    messages = scripted.requests[-1].body["messages"]
    # instructions are not carried over; context = previous input + output + this input
    assert messages == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "Population?"},
    ]
    items = client.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["message"]


def test_function_call_round_trip_with_parallel_calls(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}, "strict": False},
    ]
    scripted.enqueue(
        MODEL,
        Reply(
            tool_calls=[
                {"id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'},
                {"id": "call_b", "name": "get_time", "arguments": "{}"},
            ]
        ),
        Reply(text="Sunny, 3pm"),
    )
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="Weather and time in Paris?", tools=tools)
    calls = [o for o in first.output if o.type == "function_call"]
    assert [(c.call_id, c.name) for c in calls] == [("call_a", "get_weather"), ("call_b", "get_time")]
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    # strict normalisation when strict is omitted; untouched with strict: false
    assert first.tools[0].strict is True
    assert first.tools[0].parameters["additionalProperties"] is False
    assert first.tools[0].parameters["required"] == ["city"]
    assert first.tools[1].strict is False
    sent_tools = scripted.requests[-1].body["tools"]
    assert sent_tools[0]["function"]["strict"] is True
    assert scripted.requests[-1].body["parallel_tool_calls"] is True

    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": "15:00"},
        ],
    )
    assert second.output_text == "Sunny, 3pm"
    messages = scripted.requests[-1].body["messages"]
    assert messages[1]["role"] == "assistant" and len(messages[1]["tool_calls"]) == 2
    assert messages[1]["content"] == ""  # never null: some upstreams reject it
    assert messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_b", "content": "15:00"}


def test_allowed_tools_enforced(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    tools = [
        {"type": "function", "name": "safe", "parameters": {"type": "object", "properties": {}}},
        {"type": "function", "name": "dangerous", "parameters": {"type": "object", "properties": {}}},
    ]
    scripted.enqueue(
        MODEL,
        Reply(
            tool_calls=[
                {"id": "c1", "name": "dangerous", "arguments": "{}"},
                {"id": "c2", "name": "safe", "arguments": "{}"},
            ]
        ),
    )
    with gateway.http() as http:
        body = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "go",
                "tools": tools,
                "tool_choice": {
                    "type": "allowed_tools",
                    "mode": "auto",
                    "tools": [{"type": "function", "name": "safe"}],
                },
            },
        ).json()
    assert [o["name"] for o in body["output"]] == ["safe"]
    sent = scripted.requests[-1].body
    assert {t["function"]["name"] for t in sent["tools"]} == {"safe", "dangerous"}  # all stay visible
    assert sent["tool_choice"] == "auto"


def test_reasoning_content_becomes_reasoning_item(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(reasoning="Think first.", text="Answer."))
    resp = gateway.openai().responses.create(model=MODEL, input="q", reasoning={"effort": "low"})
    assert [o.type for o in resp.output] == ["reasoning", "message"]
    assert resp.output[0].content[0].text == "Think first."
    assert resp.reasoning.effort == "low"
    assert scripted.requests[-1].body["reasoning_effort"] == "low"


def test_length_finish_is_incomplete(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="partial", finish_reason="length"))
    resp = gateway.openai().responses.create(model=MODEL, input="q", max_output_tokens=16)
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output[0].status == "incomplete"


def test_text_format_json_schema_and_images(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text='{"a": 1}'))
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    gateway.openai().responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                    {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"},
                    {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
                ],
            }
        ],
        text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}},
    )
    sent = scripted.requests[-1].body
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": schema, "strict": True},
    }
    parts = sent["messages"][0]["content"]
    assert parts[1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
    }
    assert parts[2]["image_url"]["detail"] == "low"
    assert parts[3] == {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
    }


def test_store_false_is_not_retrievable_nor_chainable(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="secret"))
    client = gateway.openai()
    resp = client.responses.create(model=MODEL, input="q", store=False)
    assert resp.store is False and resp.output_text == "secret"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="again", previous_response_id=resp.id)
    assert error_body(err.value)["code"] == "previous_response_not_found"
    assert error_body(err.value)["param"] == "previous_response_id"


def test_delete_then_everything_404s(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="x"))
    client = gateway.openai()
    resp = client.responses.create(model=MODEL, input="q")
    with gateway.http() as http:
        deleted = http.delete(f"/v1/responses/{resp.id}")
        assert deleted.json() == {"id": resp.id, "object": "response", "deleted": True}
        assert http.get(f"/v1/responses/{resp.id}").status_code == 404
        assert http.get(f"/v1/responses/{resp.id}/input_items").status_code == 404
        assert http.delete(f"/v1/responses/{resp.id}").status_code == 404
        chained = http.post("/v1/responses", json={"model": MODEL, "input": "x", "previous_response_id": resp.id})
        assert chained.status_code == 400 and chained.json()["error"]["code"] == "previous_response_not_found"


def test_other_tenant_is_exactly_like_unknown(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="mine"))
    mine = gateway.openai().responses.create(model=MODEL, input="q")
    other_key, _ = make_key(tenant="other-co")
    with gateway.http(other_key) as other, gateway.http() as me:
        for method, path in [
            ("GET", f"/v1/responses/{mine.id}"),
            ("DELETE", f"/v1/responses/{mine.id}"),
            ("GET", f"/v1/responses/{mine.id}/input_items"),
        ]:
            foreign = other.request(method, path)
            unknown = me.request(method, path.replace(mine.id, "resp_" + "0" * 48))
            assert foreign.status_code == unknown.status_code == 404
            assert foreign.json()["error"]["code"] == unknown.json()["error"]["code"] == "not_found"
        chained = other.post("/v1/responses", json={"model": MODEL, "input": "x", "previous_response_id": mine.id})
        assert chained.status_code == 400 and chained.json()["error"]["code"] == "previous_response_not_found"
        assert me.get(f"/v1/responses/{mine.id}").status_code == 200  # untouched


def test_input_items_paging(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="ok"))
    client = gateway.openai()
    inputs = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    resp = client.responses.create(model=MODEL, input=inputs)
    texts = lambda page: [i.content[0].text for i in page.data]  # noqa: E731 - a one-line helper
    first = client.responses.input_items.list(resp.id, limit=2)
    assert texts(first) == ["m4", "m3"] and first.has_more
    rest = client.responses.input_items.list(resp.id, limit=10, after=first.data[-1].id)
    assert texts(rest) == ["m2", "m1", "m0"] and not rest.has_more
    asc = client.responses.input_items.list(resp.id, order="asc", limit=3)
    assert texts(asc) == ["m0", "m1", "m2"]
    assert all(i.id for i in asc.data)
    every = [i.content[0].text for i in client.responses.input_items.list(resp.id, limit=1, order="asc")]
    assert every == ["m0", "m1", "m2", "m3", "m4"]  # SDK auto-pagination follows `after`


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, "messages"),
        ({"input": "hi"}, "model"),
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"model": MODEL, "input": ["x", {"role": "robot", "content": "x"}]}, "input[0]"),
        (
            {"model": MODEL, "input": [{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}]},
            "input[1].role",
        ),
        ({"model": MODEL, "input": "x", "temperature": 5}, "temperature"),
        ({"model": MODEL, "input": "x", "background": True, "store": False}, "background"),
        ({"model": MODEL, "input": "x", "tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
        (
            {
                "model": MODEL,
                "input": "x",
                "tools": [
                    {
                        "type": "function",
                        "name": "f",
                        "strict": True,
                        "parameters": {"type": "object", "additionalProperties": True},
                    }
                ],
            },
            "tools[0].parameters",
        ),
        ({"model": MODEL, "input": "x", "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
        ({"model": MODEL, "input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.name"),
        ({"model": MODEL, "input": "x", "include": ["bogus"]}, "include[0]"),
        ({"model": MODEL, "input": "x", "metadata": {"k": 1}}, "metadata.k"),
        ({"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ],
)
def test_invalid_requests_name_the_field(gateway: Gateway, body: dict, param: str) -> None:
    with gateway.http() as http:
        r = http.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert r.headers["x-request-id"]


def test_unknown_fields_are_ignored_and_easy_forms_accepted(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="ok"))
    with gateway.http() as http:
        r = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "some_future_field": {"x": 1},
                "input": [
                    {"role": "developer", "content": "rules"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello", "phase": "final_answer"},
                    {"role": "user", "content": [{"type": "input_text", "text": "again"}]},
                ],
            },
        )
    assert r.status_code == 200, r.text
    assert [m["role"] for m in scripted.requests[-1].body["messages"]] == ["system", "user", "assistant", "user"]


def test_auth_errors(gateway: Gateway) -> None:
    with gateway.http(key="sk-gw-nope_nope") as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        gateway.openai(key="wrong").responses.create(model=MODEL, input="x")
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": "no-such-model", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_models_endpoint(gateway: Gateway) -> None:
    models = gateway.openai().models.list()
    assert [m.id for m in models.data] == [MODEL]


@pytest.mark.parametrize(
    ("reply", "status", "code"),
    [
        (Reply(status=500), 502, "upstream_error"),
        (Reply(status=503), 503, "upstream_unavailable"),
        (Reply(raw_body="this is not json"), 502, "upstream_malformed"),
        (Reply(raw_body={"unexpected": True}), 502, "upstream_error"),
        (Reply(status=400, error_body={"error": {"message": "context too long"}}), 400, "upstream_bad_request"),
    ],
)
def test_upstream_failures_are_clean_and_stored_failed(
    gateway: Gateway, scripted: ScriptedUpstream, reply: Reply, status: int, code: str
) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, reply)
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "x"})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    stored = Response.objects.get()
    assert stored.status == "failed" and stored.error is not None and stored.error["code"] == code
    assert stored.response_items.filter(role=1).count() == 0


def test_upstream_down_and_timeout(gateway: Gateway, scripted: ScriptedUpstream, caplog) -> None:
    from responses_api.engine.failover import target_health
    from responses_api.models import ModelRoute, Provider, Response, RouteTarget

    dead = Provider.objects.create(name="dead", base_url="http://127.0.0.1:9/v1")
    slow = Provider.objects.create(name="slow", base_url=scripted.base_url, timeout=0.3)
    for name, provider in (("dead-model", dead), ("slow-model", slow)):
        route = ModelRoute.objects.create(name=name)
        RouteTarget.objects.create(route=route, provider=provider, upstream_model=MODEL)
    scripted.enqueue(MODEL, Reply(text="late", delay=2))
    with gateway.http() as http, caplog.at_level(logging.WARNING, logger="gateway.upstreams"):
        down = http.post("/v1/responses", json={"model": "dead-model", "input": "x"})
        slow_r = http.post("/v1/responses", json={"model": "slow-model", "input": "x"})
    assert down.status_code == 502 and down.json()["error"]["code"] == "upstream_unreachable"
    # The client learns the provider, the model and why; where the operator keeps the provider
    # (its base_url) goes to the log line and the admin's route health only.
    assert (
        down.json()["error"]["message"] == "Cannot connect to provider 'dead' (model 'test-model'): Connection refused."
    )
    stored = Response.objects.get(model="dead-model").error
    assert stored is not None and "127.0.0.1:9" not in stored["message"]
    logged = [r.getMessage() for r in caplog.records if r.name == "gateway.upstreams"]
    assert any("dead:test-model" in m and "http://127.0.0.1:9/v1" in m for m in logged), logged
    health = target_health(["dead:test-model"])["dead:test-model"][0]
    assert "http://127.0.0.1:9/v1" in health.last_error and "Connection refused" in health.last_error
    assert slow_r.status_code == 504 and slow_r.json()["error"]["code"] == "upstream_timeout"
    assert set(Response.objects.values_list("status", flat=True)) == {"failed"}


def test_fallback_to_second_target_before_first_byte(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ModelRoute, Provider, RouteTarget

    dead = Provider.objects.create(name="dead", base_url="http://127.0.0.1:9/v1")
    route = ModelRoute.objects.get(name=MODEL)
    RouteTarget.objects.filter(route=route).update(weight=0)  # the live one becomes fallback-only
    RouteTarget.objects.create(route=route, provider=dead, upstream_model=MODEL, weight=1)
    scripted.enqueue(MODEL, Reply(text="from the fallback"))
    resp = gateway.openai().responses.create(model=MODEL, input="x")
    assert resp.output_text == "from the fallback"
