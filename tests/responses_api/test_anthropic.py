"""Provider kind `anthropic`: Anthropic's Messages API scripted on loopback, the openai SDK as
the client, every gateway stream checked by the strict validator. And one gateway config
routing three model names to three dialects, driven by the same client code."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.errors import error_body
from tests.support.harness import Gateway, call
from tests.support.stream_validator import validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

CLAUDE = "claude-house"


@pytest.fixture
def anthropic(gateway: Gateway, scripted: ScriptedUpstream) -> Gateway:
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    provider = Provider.objects.create(
        name="anthropic",
        kind="anthropic",
        base_url=scripted.base_url,
        api_key_encrypted=routing.encrypt_secret("sk-ant-test"),
        options={"max_tokens": 1000},
    )
    route = ModelRoute.objects.create(name=CLAUDE)
    RouteTarget.objects.create(route=route, provider=provider, upstream_model="claude-up")
    routing.clear_cache()
    return gateway


def sent(scripted: ScriptedUpstream) -> list:
    return [r for r in scripted.requests if r.path == "/v1/messages"]


def test_text_streamed_and_not_with_anthropics_headers(anthropic: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default("claude-up", Reply(text="Hello from Claude.", chunk_chars=4))
    client = anthropic.openai()
    response = client.responses.create(model=CLAUDE, input="hi", instructions="Be brief.")
    assert response.output_text == "Hello from Claude."
    validate_response_object(anthropic.http().get(f"/v1/responses/{response.id}").json())
    (request,) = sent(scripted)
    assert request.headers["x-api-key"] == "sk-ant-test" and request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    body = request.body
    assert body["system"] == "Be brief." and body["max_tokens"] == 1000 and body["model"] == "claude-up"
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    with anthropic.http() as http:
        raw = http.post(
            "/v1/responses", json={"model": CLAUDE, "input": "again", "stream": True, "max_output_tokens": 64}
        ).content
    final = validate_sse(raw)
    assert final["output"][0]["content"][0]["text"] == "Hello from Claude."
    assert sent(scripted)[-1].body["max_tokens"] == 64 and sent(scripted)[-1].body["stream"] is True


def test_tool_use_and_tool_result_round_trip(anthropic: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(
        "claude-up",
        Reply(text="Let me look.", tool_calls=[call("lookup", {"q": "x"}, "toolu_1")], chunk_chars=3),
        Reply(text="x is 42."),
    )
    tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        }
    ]
    with anthropic.http() as http:
        raw = http.post(
            "/v1/responses",
            json={"model": CLAUDE, "input": "find x", "tools": tools, "tool_choice": "required", "stream": True},
        ).content
    first = validate_sse(raw)
    (fc,) = [i for i in first["output"] if i["type"] == "function_call"]
    assert (fc["name"], fc["call_id"], json.loads(fc["arguments"])) == ("lookup", "toolu_1", {"q": "x"})
    body = sent(scripted)[-1].body
    assert body["tools"] == [
        {
            "name": "lookup",
            "description": "Look up.",  # strict by default, as OpenAI's
            "input_schema": {**tools[0]["parameters"], "additionalProperties": False},
        }
    ]
    assert body["tool_choice"] == {"type": "any"}
    answer = anthropic.openai().responses.create(
        model=CLAUDE,
        previous_response_id=first["id"],
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "toolu_1", "output": "42"}],
    )
    assert answer.output_text == "x is 42."
    messages = sent(scripted)[-1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]  # alternating, turns merged
    assert messages[1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}},
    ]
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"}]


def test_thinking_usage_with_cache_and_stop_reasons(anthropic: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(
        "claude-up",
        Reply(
            reasoning="Consider it.",
            text="Cut",
            finish_reason="length",
            usage={
                "input_tokens": 10,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 5,
                "output_tokens": 9,
            },
        ),
    )
    with anthropic.http() as http:
        raw = http.post(
            "/v1/responses", json={"model": CLAUDE, "input": "q", "stream": True, "reasoning": {"effort": "low"}}
        ).content
    final = validate_sse(raw)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["input_tokens"] == 115 and final["usage"]["output_tokens"] == 9
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 100
    body = sent(scripted)[-1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048} and body["max_tokens"] >= 3072
    scripted.enqueue("claude-up", Reply(text="Fine.", usage={"input_tokens": 3, "output_tokens": 2}))
    plain = anthropic.openai().responses.create(model=CLAUDE, input="q")
    assert plain.status == "completed" and plain.usage.input_tokens == 3


def test_errors_and_a_dropped_stream(anthropic: Gateway, scripted: ScriptedUpstream) -> None:
    client = anthropic.openai()
    scripted.enqueue(
        "claude-up",
        Reply(
            status=400,
            error_body={"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}},
        ),
    )
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=CLAUDE, input="x")
    assert "prompt is too long" in error_body(bad.value)["message"]
    scripted.enqueue(
        "claude-up",
        Reply(status=529, error_body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    with pytest.raises(openai.APIStatusError) as overloaded:
        client.responses.create(model=CLAUDE, input="x")
    assert overloaded.value.status_code == 502
    scripted.enqueue("claude-up", Reply(text="this will break off", chunk_chars=3, disconnect_after=5))
    with anthropic.http() as http:
        raw = http.post("/v1/responses", json={"model": CLAUDE, "input": "x", "stream": True}).content
    assert validate_sse(raw)["status"] == "failed"
    error_events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded mid-way"}},
    ]
    scripted.enqueue("claude-up", Reply(raw_chunks=error_events))
    with anthropic.http() as http:
        raw = http.post("/v1/responses", json={"model": CLAUDE, "input": "x", "stream": True}).content
    final = validate_sse(raw)
    assert final["status"] == "failed" and "Overloaded mid-way" in final["error"]["message"]


def test_one_config_three_dialects_the_same_client_code(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    transactional_db,
) -> None:
    from responses_api.ops.config_sync import sync_config
    from responses_api.orchestration import routing

    sync_config(
        {
            "providers": [
                {"name": "chat-dialect", "kind": "chat_completions", "base_url": scripted.base_url},
                {"name": "native-dialect", "kind": "responses", "base_url": scripted.base_url},
                {"name": "anthropic-dialect", "kind": "anthropic", "base_url": scripted.base_url, "api_key": "k"},
            ],
            "models": [
                {"name": "via-chat", "targets": [{"provider": "chat-dialect", "model": "weather"}]},
                {"name": "via-responses", "targets": [{"provider": "native-dialect", "model": "weather"}]},
                {"name": "via-anthropic", "targets": [{"provider": "anthropic-dialect", "model": "weather"}]},
            ],
        }
    )
    routing.clear_cache()
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ]
    client = gateway.openai()
    paths = set()
    for model in ("via-chat", "via-responses", "via-anthropic"):
        scripted.enqueue(
            "weather",
            Reply(tool_calls=[call("get_weather", {"city": "Oslo"}, f"call_{model}")]),
            Reply(text="Sunny in Oslo."),
        )
        first = client.responses.create(model=model, input="Weather in Oslo?", tools=tools)
        (fc,) = [i for i in first.output if i.type == "function_call"]
        assert json.loads(fc.arguments) == {"city": "Oslo"}
        with client.responses.stream(
            model=model,
            previous_response_id=first.id,
            tools=tools,
            input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}],
        ) as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        assert text == "Sunny in Oslo.", model
        paths.add(scripted.requests[-1].path)
    assert paths == {"/v1/chat/completions", "/v1/responses", "/v1/messages"}


def test_signed_thinking_goes_back_with_its_signature(anthropic: Gateway, scripted: ScriptedUpstream) -> None:
    """Extended thinking with tool use: Anthropic wants the thinking block, signature and all,
    back in the assistant turn that made the call; the gateway seals it into the reasoning
    item's encrypted_content, for stored chains and for clients that carry items themselves."""
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    for stored in (True, False):
        scripted.enqueue(
            "claude-up",
            Reply(reasoning="I should look it up.", tool_calls=[call("lookup", {}, "toolu_s")], chunk_chars=5),
            Reply(text="Done."),
        )
        with anthropic.http() as http:
            body = {
                "model": CLAUDE,
                "input": "go",
                "tools": tools,
                "stream": True,
                "store": stored,
                "reasoning": {"effort": "low"},
            }
            first = validate_sse(http.post("/v1/responses", json=body).content)
            reasoning = next(i for i in first["output"] if i["type"] == "reasoning")
            assert reasoning["encrypted_content"]  # sealed by the gateway: not the raw signature
            assert "sig-" not in reasoning["encrypted_content"]
            output = {"type": "function_call_output", "call_id": "toolu_s", "output": "found"}
            follow: dict[str, Any] = {"model": CLAUDE, "tools": tools, "reasoning": {"effort": "low"}}
            if stored:
                follow.update(previous_response_id=first["id"], input=[output])
            else:  # stateless: the client sends the whole conversation back, items as received
                follow.update(store=False, input=[{"role": "user", "content": "go"}, *first["output"], output])
            assert http.post("/v1/responses", json=follow).json()["output"][-1]["content"][0]["text"] == "Done."
        assistant = sent(scripted)[-1].body["messages"][1]
        assert assistant["role"] == "assistant"
        thinking, tool_use = assistant["content"][0], assistant["content"][-1]
        assert thinking["type"] == "thinking" and thinking["thinking"] == "I should look it up."
        assert thinking["signature"].startswith("sig-") and tool_use["type"] == "tool_use"
