"""/v1/chat/completions routed to a native Responses or an Anthropic upstream: translated both
ways, with the openai SDK as the client (streaming and not, tool calls, usage, errors)."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.errors import error_body
from tests.support.harness import Gateway, call
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

DIALECTS = {"via-responses": ("responses", "/v1/responses"), "via-anthropic": ("anthropic", "/v1/messages")}


@pytest.fixture
def routes(gateway: Gateway, scripted: ScriptedUpstream) -> Gateway:
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    for name, (kind, _) in DIALECTS.items():
        provider = Provider.objects.create(name=f"p-{kind}", kind=kind, base_url=scripted.base_url)
        route = ModelRoute.objects.create(name=name)
        RouteTarget.objects.create(route=route, provider=provider, upstream_model=f"up-{kind}")
    routing.clear_cache()
    return gateway


@pytest.mark.parametrize("model", list(DIALECTS))
def test_a_chat_completion_is_translated(routes: Gateway, scripted: ScriptedUpstream, model: str) -> None:
    kind, path = DIALECTS[model]
    scripted.set_default(
        f"up-{kind}",
        Reply(text="Translated answer.", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}),
    )
    client = routes.openai()
    completion = client.chat.completions.create(
        model=model,
        max_tokens=50,
        temperature=0.2,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
    )
    assert completion.object == "chat.completion" and completion.model == model
    assert completion.choices[0].message.content == "Translated answer."
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 3)
    upstream = [r for r in scripted.requests if r.path == path][-1].body
    if kind == "responses":
        assert upstream["instructions"] == "Be brief." and upstream["max_output_tokens"] == 50
        assert upstream["input"][0]["content"] == [{"type": "input_text", "text": "hello"}]
    else:
        assert upstream["system"] == "Be brief." and upstream["max_tokens"] == 50
    stream = client.chat.completions.create(
        model=model,
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "again"}],
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Translated answer."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.total_tokens == 10 and not chunks[-1].choices


@pytest.mark.parametrize("model", list(DIALECTS))
def test_tool_calls_round_trip(routes: Gateway, scripted: ScriptedUpstream, model: str) -> None:
    kind, path = DIALECTS[model]
    scripted.enqueue(
        f"up-{kind}", Reply(tool_calls=[call("get_weather", {"city": "Oslo"}, "call_7")]), Reply(text="Sunny.")
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    client = routes.openai()
    messages: list = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=tools)
    (tool_call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    assert (tool_call.id, tool_call.function.name, json.loads(tool_call.function.arguments)) == (
        "call_7",
        "get_weather",
        {"city": "Oslo"},
    )
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 21 C"},
    ]
    second = client.chat.completions.create(model=model, messages=messages, tools=tools)
    assert second.choices[0].message.content == "Sunny."
    upstream = [r for r in scripted.requests if r.path == path][-1].body
    text = json.dumps(upstream)
    assert "call_7" in text and "sunny, 21 C" in text


def test_what_cannot_be_translated_is_a_400_naming_it(routes: Gateway, scripted: ScriptedUpstream) -> None:
    client = routes.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="via-anthropic", n=2, messages=[{"role": "user", "content": "x"}])
    assert error_body(refused.value)["param"] == "n"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="via-responses", messages=[{"role": "user", "content": "x"}], logit_bias={"1": 1}
        )
    assert error_body(refused.value)["param"] == "logit_bias"
    # Read as a Responses request: below its floor of 16, named as the client sent it.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="via-responses", messages=[{"role": "user", "content": "x"}], max_tokens=8)
    assert error_body(refused.value)["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="via-anthropic", input="x")
    assert error_body(refused.value)["code"] == "model_not_supported"


def test_an_upstream_failure_mid_stream_ends_with_an_error_chunk(routes: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue("up-anthropic", Reply(text="this breaks off soon", chunk_chars=3, disconnect_after=5))
    with routes.http() as http:
        raw = http.post(
            "/v1/chat/completions",
            json={"model": "via-anthropic", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        ).text
    frames = [line[6:] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert frames[-1] != "[DONE]" and json.loads(frames[-1])["error"]["type"] == "server_error"


def test_a_cap_under_sixteen_reaches_an_anthropic_upstream_as_sent(routes: Gateway, scripted: ScriptedUpstream) -> None:
    """The Responses API's floor of 16 is not the Chat Completions client's: an Anthropic upstream
    takes a smaller cap, and gets exactly the one the client sent."""
    scripted.set_default("up-anthropic", Reply(text="Hi."))
    completion = routes.openai().chat.completions.create(
        model="via-anthropic", max_tokens=8, messages=[{"role": "user", "content": "x"}]
    )
    assert completion.choices[0].message.content == "Hi."
    assert [r for r in scripted.requests if r.path == "/v1/messages"][-1].body["max_tokens"] == 8


def test_a_fallback_of_another_kind_reads_the_cap_by_its_own_floor(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """The Anthropic target fails before its first byte; its Responses fallback must not be sent
    the Anthropic reading of a cap under 16 (which that API refuses): it is refused here, naming
    the field the client sent."""
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    route = ModelRoute.objects.create(name="anthropic-then-responses")
    for priority, kind in enumerate(("anthropic", "responses")):
        provider = Provider.objects.create(name=f"fb-{kind}", kind=kind, base_url=scripted.base_url)
        RouteTarget.objects.create(route=route, provider=provider, upstream_model=f"fb-{kind}", priority=priority)
    routing.clear_cache()
    scripted.set_default("fb-anthropic", Reply(status=503))
    scripted.set_default("fb-responses", Reply(text="from the fallback"))
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.openai().chat.completions.create(
            model="anthropic-then-responses", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert error_body(refused.value)["param"] == "max_tokens"
    assert not [r for r in scripted.requests if r.path == "/v1/responses"]
