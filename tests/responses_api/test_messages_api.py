"""Anthropic's Messages front door (`/v1/messages`, issue 57) on every upstream kind, with the
`anthropic` SDK as the client: Chat Completions and native Responses routes translated through
the protocol core, an Anthropic route sent in substance as is; every stream checked by the strict
checker (tests/support/anthropic_stream.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_stream import validate_messages_sse
from tests.support.harness import Gateway, call
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

# model name -> (provider kind, the upstream path it is sent to)
ROUTES = {
    "via-chat": ("chat_completions", "/v1/chat/completions"),
    "via-responses": ("responses", "/v1/responses"),
    "via-claude": ("anthropic", "/v1/messages"),
}
TRANSLATED = ["via-chat", "via-responses"]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def routes(gateway: Gateway, scripted: ScriptedUpstream) -> Gateway:
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    for name, (kind, _) in ROUTES.items():
        provider = Provider.objects.create(
            name=f"p-{kind}",
            kind=kind,
            base_url=scripted.base_url,
            api_key_encrypted=routing.encrypt_secret("sk-up-test"),
        )
        route = ModelRoute.objects.create(name=name)
        RouteTarget.objects.create(route=route, provider=provider, upstream_model=f"up-{kind}")
    routing.clear_cache()
    return gateway


def client(gateway: Gateway, **kwargs: Any) -> Any:
    """The SDK's client (typed Any: its overloads want literal params, these tests send dicts)."""
    return anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30.0, **kwargs)


def raw_stream(gateway: Gateway, body: dict[str, Any], **headers: str) -> httpx.Response:
    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        return http.post(
            "/v1/messages",
            json={**body, "stream": True},
            headers={"x-api-key": gateway.key, "anthropic-version": "2023-06-01", **headers},
        )


def sent(scripted: ScriptedUpstream, model: str) -> list[dict[str, Any]]:
    path = ROUTES[model][1]
    return [r.body for r in scripted.requests if r.path == path]


@pytest.mark.parametrize("model", list(ROUTES))
def test_a_message_created_and_streamed(routes: Gateway, scripted: ScriptedUpstream, model: str) -> None:
    kind = ROUTES[model][0]
    scripted.set_default(f"up-{kind}", Reply(text="Hello from the gateway.", chunk_chars=5))
    claude = client(routes)
    message = claude.messages.create(
        model=model, max_tokens=100, system="Be brief.", messages=[{"role": "user", "content": "hi"}]
    )
    assert message.type == "message" and message.role == "assistant" and message.model in (model, f"up-{kind}")
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello from the gateway." and message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 0 and message.usage.input_tokens > 0
    upstream = sent(scripted, model)[-1]
    if kind == "chat_completions":
        assert upstream["messages"][0] == {"role": "system", "content": "Be brief."}
    elif kind == "responses":
        assert upstream["instructions"] == "Be brief." and upstream["store"] is False
    else:
        assert upstream["system"] == "Be brief." and upstream["model"] == "up-anthropic"
    raw = raw_stream(routes, {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": "again"}]})
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    streamed = validate_messages_sse(raw.content)
    assert streamed["content"] == [{"type": "text", "text": "Hello from the gateway."}]
    assert streamed["stop_reason"] == "end_turn" and streamed["usage"]["output_tokens"] > 0
    with claude.messages.stream(
        model=model, max_tokens=100, messages=[{"role": "user", "content": "and again"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello from the gateway." and final.stop_reason == "end_turn"


@pytest.mark.parametrize("model", list(ROUTES))
def test_tool_use_round_trip(routes: Gateway, scripted: ScriptedUpstream, model: str) -> None:
    kind = ROUTES[model][0]
    scripted.enqueue(
        f"up-{kind}",
        Reply(text="Let me look.", tool_calls=[call("get_weather", {"city": "Oslo"}, "toolu_7")], chunk_chars=3),
        Reply(text="Sunny."),
        Reply(tool_calls=[call("get_weather", {"city": "Bergen"}, "toolu_8")], chunk_chars=3),
    )
    claude = client(routes)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = claude.messages.create(model=model, max_tokens=200, messages=messages, tools=[WEATHER])
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    use = first.content[1]
    assert (use.id, use.name, use.input) == ("toolu_7", "get_weather", {"city": "Oslo"})
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_7", "content": "sunny, 21 C"}]},
    ]
    second = claude.messages.create(
        model=model,
        max_tokens=200,
        messages=messages,
        tools=[WEATHER],
        tool_choice={"type": "auto"},
    )
    assert second.content[0].text == "Sunny."
    upstream = json.dumps(sent(scripted, model)[-1])
    assert "toolu_7" in upstream and "sunny, 21 C" in upstream and "get_weather" in upstream
    raw = raw_stream(
        routes,
        {"model": model, "max_tokens": 200, "messages": [{"role": "user", "content": "Bergen?"}], "tools": [WEATHER]},
    )
    streamed = validate_messages_sse(raw.content)
    assert streamed["stop_reason"] == "tool_use"
    (tool,) = [b for b in streamed["content"] if b["type"] == "tool_use"]
    assert (tool["id"], tool["name"], tool["input"]) == ("toolu_8", "get_weather", {"city": "Bergen"})


@pytest.mark.parametrize("model", TRANSLATED)
def test_thinking_is_streamed_as_thinking_blocks(routes: Gateway, scripted: ScriptedUpstream, model: str) -> None:
    kind = ROUTES[model][0]
    scripted.set_default(f"up-{kind}", Reply(reasoning="Pondering the sky.", text="Blue.", chunk_chars=4))
    body = {
        "model": model,
        "max_tokens": 4000,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [{"role": "user", "content": "Sky colour?"}],
    }
    streamed = validate_messages_sse(raw_stream(routes, body).content)
    assert [b["type"] for b in streamed["content"]] == ["thinking", "text"]
    assert streamed["content"][0]["thinking"] == "Pondering the sky." and streamed["content"][1]["text"] == "Blue."
    upstream = sent(scripted, model)[-1]
    effort = upstream.get("reasoning_effort") or (upstream.get("reasoning") or {}).get("effort")
    assert effort == "low"
    message = client(routes).messages.create(**body)
    assert [b.type for b in message.content] == ["thinking", "text"]


def test_an_anthropic_route_gets_the_request_in_substance_as_sent(routes: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default(
        "up-anthropic",
        Reply(
            text="Cached.",
            usage={
                "input_tokens": 10,
                "output_tokens": 4,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
            },
        ),
    )
    body: dict[str, Any] = {
        "model": "via-claude",
        "max_tokens": 300,
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Project rules.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read it.", "cache_control": {"type": "ephemeral"}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need the file.", "signature": "sig-abc"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ],
            },
        ],
        "tools": [{**WEATHER, "name": "Read"}, {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "user-42"},
        "stop_sequences": ["STOP"],
        "temperature": 1,
    }
    beta = "interleaved-thinking-2025-05-14,context-management-2025-06-27"
    with httpx.Client(base_url=routes.url, timeout=30.0) as http:
        answer = http.post(
            "/v1/messages",
            json=body,
            headers={"x-api-key": routes.key, "anthropic-version": "2023-06-01", "anthropic-beta": beta},
        )
    assert answer.status_code == 200, answer.text
    message = answer.json()
    assert message["content"] == [{"type": "text", "text": "Cached."}]
    assert message["usage"]["cache_read_input_tokens"] == 1000
    assert message["usage"]["cache_creation_input_tokens"] == 200
    request = [r for r in scripted.requests if r.path == "/v1/messages"][-1]
    assert request.body == {**body, "model": "up-anthropic"}  # in substance as sent: only the model is the route's
    assert request.headers["anthropic-beta"] == beta and request.headers["x-api-key"] == "sk-up-test"
    assert "x-gateway-ignored-fields" not in answer.headers
    from responses_api.models import Response

    # Stored too (its messages; Anthropic's server tool has no bearing on that).
    assert Response.objects.filter(tenant_id=routes.tenant_id, model="via-claude").count() == 1
    raw = raw_stream(routes, body, **{"anthropic-beta": beta})
    streamed = validate_messages_sse(raw.content)
    assert streamed["content"] == [{"type": "text", "text": "Cached."}]
    assert streamed["usage"]["cache_read_input_tokens"] == 1000


def test_usage_records_count_cache_reads_and_writes(routes: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import UsageRecord
    from responses_api.store.usage import usage_writer

    scripted.set_default(
        "up-anthropic",
        Reply(
            text="ok",
            usage={
                "input_tokens": 3,
                "output_tokens": 2,
                "cache_read_input_tokens": 50,
                "cache_creation_input_tokens": 7,
            },
        ),
    )
    # Not stored (the client opts out): each call leaves a usage record instead of a response.
    claude = client(routes, default_headers={"x-gateway-store": "false"})
    claude.messages.create(model="via-claude", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    raw_stream(
        routes,
        {"model": "via-claude", "max_tokens": 10, "messages": [{"role": "user", "content": "y"}]},
        **{"x-gateway-store": "false"},
    )
    scripted.set_default("up-chat_completions", Reply(text="hi"))
    claude.messages.create(model="via-chat", max_tokens=10, messages=[{"role": "user", "content": "z"}])
    routes_server_flush(usage_writer)
    records = list(UsageRecord.objects.filter(endpoint="messages").order_by("id"))
    assert len(records) == 3
    for record in records[:2]:
        assert (record.input_tokens, record.output_tokens) == (60, 2)
        assert (record.cached_tokens, record.cache_write_tokens) == (50, 7)
        assert record.upstream and record.status == 200
    assert records[2].model == "via-chat" and records[2].output_tokens and records[2].input_tokens


def routes_server_flush(writer: Any) -> None:
    """Wait for the usage writer's next batch (it writes within half a second)."""

    from responses_api.models import UsageRecord

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and UsageRecord.objects.filter(endpoint="messages").count() < 3:
        time.sleep(0.1)


def test_errors_are_in_anthropics_shape_naming_the_field(routes: Gateway) -> None:
    claude = client(routes)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="via-chat", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"].startswith("max_tokens")
    with httpx.Client(base_url=routes.url, timeout=30.0) as http:
        headers = {"x-api-key": routes.key, "anthropic-version": "2023-06-01"}
        missing = http.post("/v1/messages", json={"model": "via-chat", "messages": []}, headers=headers)
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "max_tokens"
        bad_block = http.post(
            "/v1/messages",
            json={"model": "via-chat", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]},
            headers=headers,
        )
        assert bad_block.json()["error"]["param"] == "messages.0.content.0"
        server_tool = http.post(
            "/v1/messages",
            json={
                "model": "via-chat",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            headers=headers,
        )
        assert server_tool.status_code == 400 and server_tool.json()["error"]["param"] == "tools.0.type"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        claude.messages.create(model="nope", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert _body(unknown.value)["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError) as denied:
        client(routes, default_headers={}).with_options(api_key="sk-gw-wrong_key").messages.create(
            model="via-chat", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert _body(denied.value)["error"]["type"] == "authentication_error"


def test_keys_in_x_api_key_or_bearer_and_models_in_anthropics_shape(
    routes: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.set_default("up-chat_completions", Reply(text="hi"))
    bearer: Any = anthropic.Anthropic(base_url=routes.url, auth_token=routes.key, max_retries=0)
    assert bearer.messages.create(model="via-chat", max_tokens=5, messages=[{"role": "user", "content": "x"}]).content
    models = client(routes).models.list()
    assert {m.id for m in models.data} >= set(ROUTES) and all(m.type == "model" for m in models.data)
    assert models.data[0].display_name and models.data[0].created_at
    with httpx.Client(base_url=routes.url, timeout=30.0) as http:
        openai_shape = http.get("/v1/models", headers={"Authorization": f"Bearer {routes.key}"}).json()
        assert openai_shape["object"] == "list" and "has_more" not in openai_shape
        anthropic_shape = http.get(
            "/v1/models", headers={"x-api-key": routes.key, "anthropic-version": "2023-06-01"}
        ).json()
        assert anthropic_shape["has_more"] is False and anthropic_shape["data"][0]["type"] == "model"
    assert client(routes).models.retrieve("via-chat").id == "via-chat"


def test_count_tokens_exact_on_anthropic_routes_estimated_elsewhere(
    routes: Gateway, scripted: ScriptedUpstream
) -> None:
    claude = client(routes)
    messages: list[Any] = [{"role": "user", "content": "How many tokens is this?"}]
    exact = claude.messages.count_tokens(model="via-claude", messages=messages, system="Be brief.")
    counted = [r for r in scripted.requests if r.path == "/v1/messages/count_tokens"][-1]
    assert counted.body["model"] == "up-anthropic" and counted.headers["x-api-key"] == "sk-up-test"
    assert exact.input_tokens == len(json.dumps(["Be brief.", messages, None])) // 4
    estimate = claude.messages.with_raw_response.count_tokens(model="via-chat", messages=messages)
    assert estimate.headers["x-gateway-token-count"] == "estimate" and estimate.parse().input_tokens > 0
    raw = claude.messages.with_raw_response.count_tokens(model="via-claude", messages=messages)
    assert raw.headers["x-gateway-token-count"] == "exact"


def test_batches_are_refused_clearly(routes: Gateway) -> None:
    with pytest.raises(anthropic.NotFoundError) as refused:
        client(routes).messages.batches.create(
            requests=[
                {
                    "custom_id": "a",
                    "params": {"model": "via-chat", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
                }
            ]
        )
    assert "not served by this gateway" in _body(refused.value)["error"]["message"]


def test_a_translated_route_announces_what_it_does_not_apply(routes: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default("up-chat_completions", Reply(text="hi"))
    with httpx.Client(base_url=routes.url, timeout=30.0) as http:
        answer = http.post(
            "/v1/messages",
            json={
                "model": "via-chat",
                "max_tokens": 5,
                "stop_sequences": ["x"],
                "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": "x"}],
            },
            headers={
                "x-api-key": routes.key,
                "anthropic-version": "2023-06-01",
                "anthropic-beta": "interleaved-thinking-2025-05-14",
            },
        )
    assert answer.status_code == 200
    ignored = answer.headers["x-gateway-ignored-fields"].split(",")
    assert ignored == ["stop_sequences", "cache_control", "anthropic-beta%3Ainterleaved-thinking-2025-05-14"]


def _body(error: anthropic.APIStatusError) -> Any:
    return error.body


def test_claude_codes_recorded_request_replayed_on_a_translated_route(
    routes: Gateway, scripted: ScriptedUpstream
) -> None:
    """The first request of a `claude -p` session (tests/fixtures/claude_code_request.json: its
    headers, betas, `?beta=true`, a system message mid-conversation, adaptive thinking,
    `output_config.effort`, `context_management`, a tool with `defer_loading`) is served on a
    Chat Completions route; what it does not apply is announced, never refused."""
    from pathlib import Path

    recorded = json.loads((Path(__file__).parents[1] / "fixtures" / "claude_code_request.json").read_text())
    scripted.set_default("up-chat_completions", Reply(text="Ready.", chunk_chars=2))
    with httpx.Client(base_url=routes.url, timeout=30.0) as http:
        answer = http.post(
            recorded["path"],
            json={**recorded["body"], "model": "via-chat"},
            headers={**recorded["headers"], "x-api-key": routes.key},
        )
    assert answer.status_code == 200, answer.text
    streamed = validate_messages_sse(answer.content)
    assert streamed["content"] == [{"type": "text", "text": "Ready."}]
    ignored = answer.headers["x-gateway-ignored-fields"].split(",")
    assert "context_management" in ignored and "cache_control" in ignored
    betas = recorded["headers"]["anthropic-beta"].split(",")
    assert [name.split("%3A", 1)[1] for name in ignored if name.startswith("anthropic-beta")] == betas
    upstream = sent(scripted, "via-chat")[-1]
    assert upstream["reasoning_effort"] == "high"  # output_config.effort
    roles = [m["role"] for m in upstream["messages"]]
    assert roles.count("system") >= 2  # the system prompt and the system message mid-conversation
    assert {t["function"]["name"] for t in upstream["tools"]} >= {"Bash", "Write", "Read"}


def test_an_upstream_failure_mid_stream_ends_with_an_error_event(routes: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue("up-chat_completions", Reply(text="this breaks off soon", chunk_chars=3, disconnect_after=4))
    raw = raw_stream(routes, {"model": "via-chat", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]})
    streamed = validate_messages_sse(raw.content)
    assert streamed["error"]["type"] in ("api_error", "overloaded_error")
    assert streamed["content"][0]["text"].startswith("thi")


def test_rate_limits_apply_and_answer_in_anthropics_shape(
    routes: Gateway, scripted: ScriptedUpstream, fresh_limits
) -> None:
    from responses_api.api import auth
    from responses_api.models import ApiKey

    ApiKey.objects.filter(prefix=routes.key.split("_")[0].removeprefix("sk-gw-")).update(requests_per_minute=1)
    auth.clear_cache()
    scripted.set_default("up-chat_completions", Reply(text="ok"))
    claude = client(routes)
    first = claude.messages.with_raw_response.create(
        model="via-chat", max_tokens=5, messages=[{"role": "user", "content": "x"}]
    )
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="via-chat", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert _body(limited.value)["error"]["type"] == "rate_limit_error"


def test_count_tokens_is_estimated_where_an_anthropic_upstream_does_not_count(
    routes: Gateway, scripted: ScriptedUpstream
) -> None:
    """An Anthropic-compatible server without a working count_tokens (here: it refuses the
    provider's missing key) leaves the count to the gateway's estimate, said so."""
    from responses_api.models import Provider
    from responses_api.orchestration import routing

    Provider.objects.filter(kind="anthropic").update(api_key_encrypted="")
    routing.clear_cache()
    raw = client(routes).messages.with_raw_response.count_tokens(
        model="via-claude", messages=[{"role": "user", "content": "count me"}]
    )
    assert raw.headers["x-gateway-token-count"] == "estimate" and raw.parse().input_tokens > 0


def test_a_session_is_stored_linear_in_its_new_messages(
    routes: Gateway, scripted: ScriptedUpstream, admin_client
) -> None:
    """Claude Code resends the whole conversation each turn: 50 turns store 50 chained responses
    and items at most twice the messages of the conversation, not the square of it; the history's
    thread of the last turn is the whole conversation."""
    from responses_api.models import Item, Response

    scripted.set_responder("up-chat_completions", lambda body: Reply(text=f"answer {len(body['messages'])}"))
    claude = client(routes)
    messages: list[dict[str, Any]] = []
    for turn in range(50):
        # As Claude Code does: the cache mark on the newest message only, moved every turn.
        for message in messages:
            if isinstance(message["content"], list):
                message["content"] = [{k: v for k, v in b.items() if k != "cache_control"} for b in message["content"]]
        mark = {"cache_control": {"type": "ephemeral"}}
        messages.append({"role": "user", "content": [{"type": "text", "text": f"question {turn}", **mark}]})
        answer = claude.messages.create(model="via-chat", max_tokens=20, system="Be brief.", messages=messages)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]})
    responses = list(Response.objects.filter(tenant_id=routes.tenant_id).order_by("created_at"))
    assert len(responses) == 50
    assert all(r.previous_response_id == p.id for p, r in zip(responses, responses[1:], strict=False))
    assert responses[0].instructions == "Be brief." and responses[1].instructions is None
    items = Item.objects.filter(tenant_id=routes.tenant_id).count()
    assert items <= 2 * len(messages), (items, len(messages))
    with routes.http() as http:
        thread = http.get(f"/v1/responses/{responses[-1].id}/thread", params={"limit": 100}).json()
    texts = [part["text"] for entry in thread["data"] for part in entry["item"].get("content") or []]
    assert len(texts) == 100 and texts[::2] == [f"question {n}" for n in range(50)]
    assert all(text.startswith("answer ") for text in texts[1::2])
    from django.contrib.admin.utils import quote

    page = admin_client.get(f"/admin/responses_api/response/{quote(responses[-1].id)}/conversation/")
    html = page.content.decode()
    assert page.status_code == 200 and "question 0" in html and "question 49" in html and "Be brief." in html


def test_a_streamed_anthropic_turn_is_stored_with_its_tool_call(routes: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Response

    scripted.set_default(
        "up-anthropic", Reply(text="Writing.", tool_calls=[call("Write", {"path": "a"}, "toolu_9")], chunk_chars=3)
    )
    body = {"model": "via-claude", "max_tokens": 50, "messages": [{"role": "user", "content": "write a"}]}
    validate_messages_sse(raw_stream(routes, body).content)
    stored = Response.objects.get(tenant_id=routes.tenant_id)
    with routes.http() as http:
        thread = [entry["item"] for entry in http.get(f"/v1/responses/{stored.id}/thread").json()["data"]]
    assert [i["type"] for i in thread] == ["message", "message", "function_call"]
    assert thread[-1]["call_id"] == "toolu_9" and json.loads(thread[-1]["arguments"]) == {"path": "a"}
    assert stored.input_tokens and stored.output_tokens


def test_budgets_and_the_usage_api_price_cache_reads_and_writes(
    routes: Gateway, scripted: ScriptedUpstream, fresh_limits
) -> None:
    """A /v1/messages call (stored, and not) is priced by its route with its cache reads and
    writes, in /v1/usage and against the key's USD budget."""
    from decimal import Decimal

    from responses_api.api import auth
    from responses_api.models import ApiKey, ModelRoute
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name="via-claude").update(
        input_usd_per_million=Decimal(1),
        output_usd_per_million=Decimal(2),
        cached_input_usd_per_million=Decimal("0.1"),
        cache_write_usd_per_million=Decimal(2),
    )
    ApiKey.objects.filter(prefix=routes.key.split("_")[0].removeprefix("sk-gw-")).update(budget_usd=Decimal(1))
    routing.clear_cache()
    auth.clear_cache()
    usage = {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 200}
    scripted.set_default("up-anthropic", Reply(text="ok", usage=usage))
    body: dict[str, Any] = {"max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    client(routes).messages.create(model="via-claude", **body)
    client(routes, default_headers={"x-gateway-store": "false"}).messages.create(model="via-claude", **body)
    one_call = (10 * 1 + 100 * 0.1 + 200 * 2 + 3 * 2) / 1e6
    deadline = time.monotonic() + 10
    while True:  # the budget settles after the answer
        with routes.http() as http:
            summary = http.get("/v1/usage", params={"group_by": "model"}).json()
        (bucket,) = [b for b in summary["data"] if b["model"] == "via-claude"] or [None]
        limits = [limit for limit in summary["limits"] if limit.get("usd") is not None]
        if bucket and bucket["requests"] == 2 and limits and limits[0]["used_usd"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert bucket and (bucket["cached_tokens"], bucket["cache_write_tokens"]) == (200, 400)
    assert bucket["cost_usd"] == pytest.approx(2 * one_call)
    spent = [limit for limit in summary["limits"] if limit.get("usd") is not None]
    assert spent and spent[0]["used_usd"] == pytest.approx(2 * one_call, rel=0.01)


def test_the_router_falls_back_across_upstream_kinds(routes: Gateway, scripted: ScriptedUpstream) -> None:
    """A route's Anthropic target failing before the first byte: the router's fallback serves the
    request on its Chat Completions target, translated, within one /v1/messages call."""
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    route = ModelRoute.objects.create(name="via-fallback")
    RouteTarget.objects.create(
        route=route, provider=Provider.objects.get(name="p-anthropic"), upstream_model="up-down", priority=0
    )
    RouteTarget.objects.create(
        route=route, provider=Provider.objects.get(name="p-chat_completions"), upstream_model="up-backup", priority=1
    )
    routing.clear_cache()
    down = Reply(status=503, error_body={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    scripted.set_default("up-down", down)
    scripted.set_default("up-backup", Reply(text="From the backup."))
    raw = raw_stream(
        routes, {"model": "via-fallback", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}]}
    )
    assert validate_messages_sse(raw.content)["content"] == [{"type": "text", "text": "From the backup."}]
    paths = [r.path for r in scripted.requests]
    assert "/v1/messages" in paths and paths[-1] == "/v1/chat/completions"


@pytest.mark.parametrize("model", ["via-chat", "via-claude"])
def test_a_stream_the_client_leaves_is_not_stored_as_whole(
    routes: Gateway, scripted: ScriptedUpstream, model: str
) -> None:
    """A client gone mid-stream: no stored turn claims the cut answer is whole; its usage is
    recorded."""
    from responses_api.models import Response, UsageRecord

    kind = ROUTES[model][0]
    scripted.set_default(f"up-{kind}", Reply(text="a long answer " * 40, chunk_chars=2, interval=0.02))
    body = {"model": model, "max_tokens": 500, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.Client(base_url=routes.url, timeout=30.0) as http:
        headers = {"x-api-key": routes.key, "anthropic-version": "2023-06-01"}
        with http.stream("POST", "/v1/messages", json=body, headers=headers) as answer:
            for _ in answer.iter_bytes():
                break  # leave after the first bytes
    deadline = time.monotonic() + 10
    while not UsageRecord.objects.filter(endpoint="messages").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert UsageRecord.objects.filter(endpoint="messages", model=model).exists()
    assert not Response.objects.filter(tenant_id=routes.tenant_id).exists()


@pytest.mark.parametrize("model", ["via-chat", "via-claude"])
def test_the_sdks_beta_namespace_is_served(routes: Gateway, scripted: ScriptedUpstream, model: str) -> None:
    """`client.beta.messages` (`?beta=true` with `anthropic-beta`, as Claude Code calls): served,
    not refused as OpenAI's beta surface; the betas passed on to an Anthropic route."""
    kind = ROUTES[model][0]
    scripted.set_default(f"up-{kind}", Reply(text="Beta ok."))
    message = client(routes).beta.messages.create(
        model=model,
        max_tokens=20,
        betas=["interleaved-thinking-2025-05-14"],
        messages=[{"role": "user", "content": "x"}],
    )
    assert message.content[0].text == "Beta ok."
    counted = client(routes).beta.messages.count_tokens(
        model=model, betas=["token-counting-2024-11-01"], messages=[{"role": "user", "content": "x"}]
    )
    assert counted.input_tokens > 0
    if kind == "anthropic":
        request = [r for r in scripted.requests if r.path == "/v1/messages"][-1]
        assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


@pytest.mark.parametrize("model", ["via-chat", "via-claude"])
def test_input_guardrails_hold_on_the_messages_front_door(
    routes: Gateway, scripted: ScriptedUpstream, model: str
) -> None:
    """The front door's input goes through the same guardrails as /v1/responses: a block is a 400
    in Anthropic's error shape before any upstream call (on the route sent in substance as is,
    too), and a redaction reaches the upstream."""
    from responses_api.models import Guardrail, GuardrailEvent

    kind = ROUTES[model][0]
    for name, kind_, action, config in (
        ("no-codenames", "patterns", "block", {"categories": {"codename": {"words": ["Project Zeus"]}}}),
        ("pii", "pii", "redact", {"categories": ["email"]}),
    ):
        row = Guardrail(name=name, kind=kind_, action=action, config=config)
        row.full_clean()
        row.save()
    claude = client(routes)
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.messages.create(
            model=model, max_tokens=50, messages=[{"role": "user", "content": "What is Project Zeus?"}]
        )
    assert isinstance(raised.value.body, dict) and raised.value.body["type"] == "error"
    assert "codename" in raised.value.body["error"]["message"] and "Zeus" not in raised.value.body["error"]["message"]
    assert sent(scripted, model) == []
    scripted.set_default(f"up-{kind}", Reply(text="Noted."))
    claude.messages.create(
        model=model,
        max_tokens=50,
        system="Reply to ann.smith@example.com",
        messages=[{"role": "user", "content": [{"type": "text", "text": "I am ann.smith@example.com"}]}],
    )
    upstream = repr(sent(scripted, model)[-1])
    assert "ann.smith@example.com" not in upstream and upstream.count("[REDACTED:email]") == 2
    assert {e.where for e in GuardrailEvent.objects.all()} == {"messages"}
