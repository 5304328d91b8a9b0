"""Prompt caching on every upstream kind: `prompt_cache_breakpoint` on content parts and the
request's cache options become `cache_control` marks on Anthropic routes (the scripted Messages
server refuses more than 4, or a 1-hour mark after a 5-minute one, as Anthropic does), pass
through to native Responses upstreams, and reach Chat Completions upstreams only where the
provider takes them; `service_tier` likewise; cached tokens come back in
`usage.input_tokens_details.cached_tokens` from each dialect's usage."""

from __future__ import annotations

import openai
import pytest

from tests.responses_api.test_anthropic import CLAUDE, anthropic, sent  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

CACHE_FIELDS = ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "service_tier")


def marked(text: str, ttl: str | None = None) -> dict:
    breakpoint_ = {"mode": "explicit", **({"ttl": ttl} if ttl else {})}
    return {"type": "input_text", "text": text, "prompt_cache_breakpoint": breakpoint_}


def turns(count: int) -> list[dict]:
    """`count` user turns, each ending at an explicit breakpoint, with answers between them."""
    items: list[dict] = []
    for n in range(count):
        items.append({"role": "user", "content": [{"type": "input_text", "text": f"context {n}"}, marked(f"end {n}")]})
        items.append({"role": "assistant", "content": f"noted {n}"})
    items.append({"role": "user", "content": "And now?"})
    return items


def cache_marks(body: dict) -> list[tuple[str, dict]]:
    """(text or type, cache_control) of each marked block of a Messages request, in order."""
    return [
        (block.get("text") or block["type"], block["cache_control"])
        for message in body["messages"]
        for block in message["content"]
        if "cache_control" in block
    ]


def test_anthropic_breakpoints_within_the_limit_streamed_and_not(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    scripted.set_default(
        "claude-up",
        Reply(text="Cached.", usage={"input_tokens": 12, "cache_read_input_tokens": 300, "output_tokens": 2}),
    )
    client = anthropic.openai()
    # Six explicit breakpoints and a cache key (implicit mode): the prompt's end and the latest three.
    response = client.responses.create(model=CLAUDE, input=turns(6), prompt_cache_key="session-1")
    assert cache_marks(sent(scripted)[-1].body) == [
        ("end 3", {"type": "ephemeral"}),
        ("end 4", {"type": "ephemeral"}),
        ("end 5", {"type": "ephemeral"}),
        ("And now?", {"type": "ephemeral"}),
    ]
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 300
    assert response.usage.input_tokens == 312
    stored = anthropic.http().get(f"/v1/responses/{response.id}").json()
    validate_response_object(stored)
    assert stored["usage"]["input_tokens_details"]["cached_tokens"] == 300

    # Explicit mode: the latest four explicit ones, none at the end; a request ttl makes them 1 hour.
    with anthropic.http() as http:
        raw = http.post(
            "/v1/responses",
            json={
                "model": CLAUDE,
                "input": turns(5),
                "stream": True,
                "prompt_cache_options": {"mode": "explicit", "ttl": "12h"},
            },
        ).content
    assert validate_sse(raw)["usage"]["input_tokens_details"]["cached_tokens"] == 300
    long = {"type": "ephemeral", "ttl": "1h"}
    assert cache_marks(sent(scripted)[-1].body) == [("end 1", long), ("end 2", long), ("end 3", long), ("end 4", long)]

    # No cache field, no breakpoint: no mark (Anthropic charges for cache writes).
    client.responses.create(model=CLAUDE, input="plain")
    assert cache_marks(sent(scripted)[-1].body) == []


def test_anthropic_lifetimes_breakpoints_from_the_chain_and_tool_results(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    scripted.set_default("claude-up", Reply(text="ok"))
    client = anthropic.openai()
    # A 5-minute breakpoint before a long one would be refused: it is made long as well.
    first = client.responses.create(
        model=CLAUDE,
        input=[{"role": "user", "content": [marked("system prompt"), marked("repo map", ttl="30m")]}],
        prompt_cache_options={"mode": "explicit"},
    )
    long = {"type": "ephemeral", "ttl": "1h"}
    assert cache_marks(sent(scripted)[-1].body) == [("system prompt", long), ("repo map", long)]
    # The next turn of the chain keeps the stored breakpoints; a tool result's breakpoint marks
    # its tool_result block; a long one after short ones is fine.
    scripted.enqueue("claude-up", Reply(tool_calls=[{"id": "call_1", "name": "read", "arguments": "{}"}]))
    tools = [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}]
    second = client.responses.create(model=CLAUDE, previous_response_id=first.id, input="read it", tools=tools)
    client.responses.create(
        model=CLAUDE,
        previous_response_id=second.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "call_1", "output": [marked("file contents")]}],
        prompt_cache_retention="24h",
    )
    assert cache_marks(sent(scripted)[-1].body) == [
        ("system prompt", long),
        ("repo map", long),
        ("tool_result", long),  # the breakpoint and the prompt's end: one block, one mark
    ]


def test_anthropic_service_tier(anthropic: Gateway, scripted: ScriptedUpstream) -> None:  # noqa: F811
    scripted.set_default("claude-up", Reply(text="ok"))
    client = anthropic.openai()
    for asked, given in (("priority", "auto"), ("default", "standard_only"), ("auto", "auto"), ("flex", None)):
        client.responses.create(model=CLAUDE, input="x", service_tier=asked)
        assert sent(scripted)[-1].body.get("service_tier") == given


def test_chat_completions_translated_to_anthropic_carry_the_marks(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    scripted.set_default("claude-up", Reply(text="ok", usage={"input_tokens": 1, "cache_read_input_tokens": 40}))
    completion = anthropic.openai().chat.completions.create(
        model=CLAUDE,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "big prefix", "prompt_cache_breakpoint": {"mode": "explicit"}},
                    {"type": "text", "text": "question"},
                ],
            }
        ],
        prompt_cache_key="k",
        service_tier="priority",
    )
    body = sent(scripted)[-1].body
    assert cache_marks(body) == [("big prefix", {"type": "ephemeral"}), ("question", {"type": "ephemeral"})]
    assert body["service_tier"] == "auto"
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 40


def test_native_responses_upstreams_take_them_as_they_are(
    native: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    scripted.set_default(
        "up-native",
        Reply(text="ok", usage={"input_tokens": 50, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 32}}),
    )
    response = native.openai().responses.create(
        model=NATIVE,
        input=[{"role": "user", "content": [marked("prefix", ttl="12h"), {"type": "input_text", "text": "q"}]}],
        prompt_cache_key="k",
        prompt_cache_retention="24h",
        prompt_cache_options={"mode": "explicit", "ttl": "12h"},
        service_tier="flex",
    )
    body = next(r for r in reversed(scripted.requests) if r.path == "/v1/responses").body
    assert {name: body.get(name) for name in CACHE_FIELDS} == {
        "prompt_cache_key": "k",
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {"mode": "explicit", "ttl": "12h"},
        "service_tier": "flex",
    }
    assert body["input"][0]["content"][0]["prompt_cache_breakpoint"] == {"mode": "explicit", "ttl": "12h"}
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 32


def test_chat_completions_upstreams_only_where_the_provider_takes_them(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import Provider
    from responses_api.orchestration import routing

    usage = {"prompt_tokens": 90, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 64}}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage))
    scripted.refused_fields = set(CACHE_FIELDS)  # a strict server: it refuses what it does not know
    client = gateway.openai()
    ask = {
        "model": MODEL,
        "input": [{"role": "user", "content": [marked("prefix"), {"type": "input_text", "text": "q"}]}],
        "prompt_cache_key": "k",
        "prompt_cache_options": {"ttl": "30m"},
        "service_tier": "priority",
    }
    response = client.responses.create(**ask)
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 64
    body = scripted.model_calls[-1].body
    assert not set(CACHE_FIELDS) & set(body) and body["messages"][0]["content"] == "prefix\nq"

    with pytest.raises(openai.BadRequestError):  # the server refuses them once the provider sends them
        Provider.objects.filter(name="scripted").update(options={"send_prompt_cache": True})
        routing.clear_cache()
        client.responses.create(**ask)
    scripted.refused_fields = set()
    Provider.objects.filter(name="scripted").update(options={"send_prompt_cache": True, "send_service_tier": True})
    routing.clear_cache()
    client.responses.create(**ask)
    body = scripted.model_calls[-1].body
    assert {name: body.get(name) for name in CACHE_FIELDS} == {
        "prompt_cache_key": "k",
        "prompt_cache_retention": None,
        "prompt_cache_options": {"ttl": "30m"},
        "service_tier": "priority",
    }
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "prefix", "prompt_cache_breakpoint": {"mode": "explicit"}},
        {"type": "text", "text": "q"},
    ]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt_cache_retention": "forever"}, "prompt_cache_retention"),
        ({"prompt_cache_options": {"mode": "sometimes"}}, "prompt_cache_options.mode"),
        ({"prompt_cache_options": {"ttl": 30}}, "prompt_cache_options.ttl"),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {}}]}
                ]
            },
            "input[0].content[0].prompt_cache_breakpoint.mode",
        ),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{**marked("x"), "prompt_cache_breakpoint": {"mode": "explicit", "ttl": 1}}],
                    }
                ]
            },
            "input[0].content[0].prompt_cache_breakpoint.ttl",
        ),
    ],
)
def test_bad_cache_fields_are_a_400_naming_them(gateway: Gateway, extra: dict, param: str) -> None:
    answer = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "x", **extra})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt_cache_retention": ["24h"]}, "prompt_cache_retention"),
        ({"prompt_cache_options": {"mode": {"a": 1}}}, "prompt_cache_options.mode"),
        (
            {"context_management": [{"type": "compaction", "compact_threshold": 2.5}]},
            "context_management[0].compact_threshold",
        ),
    ],
)
def test_values_of_the_wrong_type_are_a_400_not_a_500(gateway: Gateway, extra: dict, param: str) -> None:
    answer = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "x", **extra})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param
