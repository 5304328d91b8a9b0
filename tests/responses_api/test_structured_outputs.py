"""Structured outputs on every upstream kind: `text.format` (and `/v1/chat/completions`'
`response_format`) reaches the upstream in its dialect's field, and the answer is `output_text`
that the openai SDK's `responses.parse` reads into a pydantic model, streamed and not. On an
Anthropic route the field is `output_config.format`; the scripted Messages server checks it as
Anthropic does, and a server that refuses it gives the client its 400, never an unstructured
answer."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel, Field

from responses_api.protocol.anthropic import JSON_OBJECT_INSTRUCTION
from tests.responses_api.test_anthropic import CLAUDE, anthropic, sent  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.errors import error_body
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


class Pet(BaseModel):
    name: str
    age: int


class Owner(BaseModel):
    name: str = Field(min_length=1, description="Full name.")
    pets: list[Pet]
    since: int | None = Field(ge=1900)


ANSWER = '{"name":"Rex","age":3}'


def upstream_schema(kind: str, body: dict) -> dict:
    """The JSON schema the upstream was given, read from its dialect's field."""
    if kind == "anthropic":
        fmt = body["output_config"]["format"]
        assert fmt["type"] == "json_schema" and set(fmt) == {"type", "schema"}
        return fmt["schema"]
    if kind == "responses":
        fmt = body["text"]["format"]
        assert fmt["type"] == "json_schema" and fmt["name"] == "Pet" and fmt["strict"] is True
        return fmt["schema"]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Pet"
    return fmt["json_schema"]["schema"]


@pytest.fixture
def three_kinds(anthropic: Gateway, native: Gateway) -> Gateway:  # noqa: F811 - the fixtures
    return anthropic


ROUTES = [("anthropic", CLAUDE, "claude-up", "/v1/messages"), ("responses", NATIVE, "up-native", "/v1/responses")]
ROUTES.append(("chat_completions", MODEL, MODEL, "/v1/chat/completions"))


@pytest.mark.parametrize(("kind", "model", "upstream_model", "path"), ROUTES)
def test_responses_parse_streamed_and_not(
    three_kinds: Gateway, scripted: ScriptedUpstream, kind: str, model: str, upstream_model: str, path: str
) -> None:
    scripted.set_default(upstream_model, Reply(text=ANSWER, chunk_chars=5))
    client = three_kinds.openai()
    parsed = client.responses.parse(model=model, input="Describe the dog.", text_format=Pet)
    assert parsed.output_parsed == Pet(name="Rex", age=3)
    (request,) = [r for r in scripted.requests if r.path == path]
    schema = upstream_schema(kind, request.body)
    assert schema["properties"] == {
        "name": {"title": "Name", "type": "string"},
        "age": {"title": "Age", "type": "integer"},
    }
    stored = three_kinds.http().get(f"/v1/responses/{parsed.id}").json()
    validate_response_object(stored)
    assert stored["text"]["format"]["type"] == "json_schema" and stored["text"]["format"]["name"] == "Pet"

    with client.responses.stream(model=model, input="Again, streamed.", text_format=Pet) as stream:
        final = stream.get_final_response()
    assert final.output_parsed == Pet(name="Rex", age=3)
    streamed = [r for r in scripted.requests if r.path == path][-1].body
    assert streamed["stream"] is True and upstream_schema(kind, streamed) == schema

    with three_kinds.http() as http:  # the same stream, through the strict validator
        raw = http.post(
            "/v1/responses",
            json={"model": model, "input": "x", "stream": True, "text": {"format": parsed_format(schema)}},
        ).content
    assert json.loads(validate_sse(raw)["output"][0]["content"][0]["text"]) == {"name": "Rex", "age": 3}


def parsed_format(schema: dict) -> dict:
    return {"type": "json_schema", "name": "Pet", "schema": schema, "strict": True}


def test_json_object_and_chat_response_format_on_an_anthropic_route(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    scripted.set_default("claude-up", Reply(text=ANSWER))
    client = anthropic.openai()
    # JSON mode has no Anthropic counterpart (its structured outputs take closed object schemas
    # only): the model is asked in the system prompt.
    answer = client.responses.create(
        model=CLAUDE, input="JSON please", instructions="Be brief.", text={"format": {"type": "json_object"}}
    )
    assert json.loads(answer.output_text) == {"name": "Rex", "age": 3}
    body = sent(scripted)[-1].body
    assert "output_config" not in body and body["system"] == f"Be brief.\n\n{JSON_OBJECT_INSTRUCTION}"

    completion = client.chat.completions.parse(
        model=CLAUDE, messages=[{"role": "user", "content": "Describe the dog."}], response_format=Pet
    )
    assert completion.choices[0].message.parsed == Pet(name="Rex", age=3)
    assert upstream_schema("anthropic", sent(scripted)[-1].body)["required"] == ["name", "age"]
    with anthropic.http() as http:
        raw = http.post(
            "/v1/chat/completions",
            json={
                "model": CLAUDE,
                "messages": [{"role": "user", "content": "JSON"}],
                "response_format": {"type": "json_object"},
                "stream": True,
            },
        ).text
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert json.loads(text) == {"name": "Rex", "age": 3}
    assert sent(scripted)[-1].body["system"] == JSON_OBJECT_INSTRUCTION


def test_a_server_that_refuses_the_field_is_the_clients_error(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    """An Anthropic-compatible server without structured outputs: its 400 reaches the client,
    streamed or not; no unstructured answer is made up instead."""
    scripted.set_default("claude-up", Reply(text="Rex is a three-year-old dog."))
    scripted.refused_fields = {"output_config"}
    client = anthropic.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.parse(model=CLAUDE, input="Describe the dog.", text_format=Pet)
    assert "output_config" in error_body(refused.value)["message"]
    with (
        pytest.raises(openai.BadRequestError),
        client.responses.stream(model=CLAUDE, input="Describe the dog.", text_format=Pet) as stream,
    ):
        stream.get_final_response()
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.parse(
            model=CLAUDE, messages=[{"role": "user", "content": "Describe the dog."}], response_format=Pet
        )
    assert all("output_config" in r.body for r in sent(scripted))
    # Without a format the same server answers: only the structured request was refused.
    assert client.responses.create(model=CLAUDE, input="Describe the dog.").output_text.startswith("Rex")


def test_the_beta_shape_for_servers_that_speak_only_the_beta(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import Provider
    from responses_api.orchestration import routing

    Provider.objects.filter(name="anthropic").update(
        options={"max_tokens": 1000, "structured_outputs": "output_format"}, headers={"anthropic-beta": "other-beta"}
    )
    routing.clear_cache()
    scripted.set_default("claude-up", Reply(text=ANSWER))
    parsed = anthropic.openai().responses.parse(model=CLAUDE, input="Describe the dog.", text_format=Pet)
    assert parsed.output_parsed == Pet(name="Rex", age=3)
    request = sent(scripted)[-1]
    assert "output_config" not in request.body and request.body["output_format"]["type"] == "json_schema"
    assert request.headers["anthropic-beta"] == "other-beta,structured-outputs-2025-11-13"


def test_schemas_outside_anthropics_subset_are_brought_into_it(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    """Constraints Anthropic's decoder does not take move into the description (as Anthropic's
    SDKs do), objects are closed; the scripted server refuses what Anthropic refuses."""
    answer = '{"name":"Ann","pets":[{"name":"Rex","age":3}],"since":2001}'
    scripted.set_default("claude-up", Reply(text=answer))
    client = anthropic.openai()
    parsed = client.responses.parse(model=CLAUDE, input="Who owns Rex?", text_format=Owner)
    assert parsed.output_parsed == Owner(name="Ann", pets=[Pet(name="Rex", age=3)], since=2001)
    schema = upstream_schema("anthropic", sent(scripted)[-1].body)
    assert schema["properties"]["name"]["description"] == "Full name.\n\n{minLength: 1}"
    since = schema["properties"]["since"]
    assert since["anyOf"] == [{"type": "integer", "description": "{minimum: 1900}"}, {"type": "null"}]
    # A schema sent without `strict` (objects left open): closed for Anthropic, answered.
    open_schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"}}}
    loose = client.responses.create(
        model=CLAUDE,
        input="x",
        text={"format": {"type": "json_schema", "name": "loose", "schema": open_schema}},
    )
    assert loose.output_text == answer
    assert upstream_schema("anthropic", sent(scripted)[-1].body) == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
        "additionalProperties": False,
    }
