"""The shared dialect tests: every upstream dialect, the real ones against the scripted upstream
(tests/support/upstream.py) and the test-only "ndjson" one (ndjson_protocol.py and
ndjson_adapter.py, registered by one line in the fixture below) against its own scripted server,
does the same through `upstreams.open_call`: plain text, a stream, a function tool call and its
output sent back, an upstream error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from responses_api.domain import ProviderConfig, Target
from responses_api.protocol import dialects as wire_dialects
from responses_api.protocol import surface
from responses_api.protocol.deltas import Delta, Finish, TextDelta, ToolCallDelta
from responses_api.protocol.errors import UpstreamError, UpstreamUnavailable
from responses_api.protocol.request import parse_create_request
from responses_api.upstreams import UpstreamRequest, dialects, open_call
from responses_api.upstreams.http import close_session
from tests.support.harness import Gateway
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply

from .ndjson_adapter import open_ndjson
from .ndjson_protocol import WIRE
from .ndjson_upstream import NdjsonUpstream

pytestmark = pytest.mark.embedded

KINDS = ["chat_completions", "responses", "anthropic", "ndjson"]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def ndjson_dialect() -> Iterator[None]:
    dialects.register(dialects.UpstreamDialect(WIRE, open_ndjson))  # the test dialect's registry line
    yield
    dialects.unregister(WIRE.name)


@pytest.fixture(params=KINDS)
async def wire(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Target]]:
    """The scripted upstream of a dialect, and a target of that kind pointing at it."""
    kind = request.param
    if kind == "ndjson":
        request.getfixturevalue("ndjson_dialect")
        server: Any = await NdjsonUpstream().start()
    else:
        server = request.getfixturevalue("scripted")
    provider = ProviderConfig(
        name="p", kind=kind, base_url=server.base_url, api_key="sk-test", timeout=10.0, connect_timeout=5.0
    )
    try:
        yield server, Target(provider, "m", 1)
    finally:
        await close_session()
        if isinstance(server, NdjsonUpstream):
            await server.stop()


async def _call(target: Target, body: dict[str, Any], *, stream: bool) -> list[Delta]:
    req = parse_create_request({"model": "m", **body})
    call = await open_call(target, UpstreamRequest(request=req, items=req.input_items, tools=req.tools, stream=stream))
    try:
        return [delta async for delta in call.deltas()]
    finally:
        await call.aclose()


def _text(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


def _finish(deltas: list[Delta]) -> str | None:
    return next((d.reason for d in deltas if isinstance(d, Finish)), None)


async def test_plain_text(wire: tuple[Any, Target]) -> None:
    server, target = wire
    server.enqueue("m", Reply(text="Hello there, traveller."))
    deltas = await _call(target, {"input": "Say hello.", "instructions": "Be brief."}, stream=False)
    assert _text(deltas) == "Hello there, traveller."
    assert _finish(deltas) == "stop"
    sent = json.dumps(server.requests[-1].body)
    assert "Say hello." in sent and "Be brief." in sent


async def test_a_stream_comes_in_pieces(wire: tuple[Any, Target]) -> None:
    server, target = wire
    server.enqueue("m", Reply(text="One, two, three, four.", chunk_chars=4))
    deltas = await _call(target, {"input": "Count.", "stream": True}, stream=True)
    assert _text(deltas) == "One, two, three, four."
    assert len([d for d in deltas if isinstance(d, TextDelta)]) > 1
    assert _finish(deltas) == "stop"


async def test_a_function_tool_call_and_its_output_round_trip(wire: tuple[Any, Target]) -> None:
    server, target = wire
    server.enqueue("m", Reply(tool_calls=[{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]))
    deltas = await _call(target, {"input": "Weather in Paris?", "tools": [WEATHER]}, stream=True)
    calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert {d.call_id for d in calls if d.call_id} == {"call_1"}
    assert {d.name for d in calls if d.name} == {"get_weather"}
    assert json.loads("".join(d.arguments for d in calls)) == {"city": "Paris"}
    assert _finish(deltas) == "tool_calls"
    assert "get_weather" in json.dumps(server.requests[-1].body)

    server.enqueue("m", Reply(text="Sunny in Paris."))
    history = [
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
    ]
    deltas = await _call(target, {"input": history, "tools": [WEATHER]}, stream=False)
    assert _text(deltas) == "Sunny in Paris."
    sent = json.dumps(server.requests[-1].body)
    assert "sunny, 21 C" in sent and "call_1" in sent


async def test_an_upstream_error_is_the_gateways_error(wire: tuple[Any, Target]) -> None:
    server, target = wire
    server.enqueue("m", Reply(status=503, error_body={"error": {"message": "overloaded"}}))
    with pytest.raises(UpstreamUnavailable) as caught:
        await _call(target, {"input": "Hi."}, stream=True)
    assert "overloaded" in caught.value.message

    server.enqueue("m", Reply(status=500, error_body={"error": {"message": "boom"}}))
    with pytest.raises(UpstreamError, match="answered HTTP 500: boom"):
        await _call(target, {"input": "Hi."}, stream=False)


@pytest.mark.usefixtures("ndjson_dialect")
def test_a_dialect_declares_its_surface_column_and_takes_it_away() -> None:
    """The test dialect's column: the fields it names, the gateway's own as on every dialect,
    those every dialect refuses still refused by the parser; gone once it is unregistered."""
    assert surface.UPSTREAM_KINDS[-1] == "ndjson"
    assert surface.REQUEST_FIELDS["tools"].on("ndjson").to == "functions"
    assert "temperature" in surface.ANNOUNCED_FIELDS["ndjson"]
    assert "previous_response_id" not in surface.ANNOUNCED_FIELDS["ndjson"]
    assert surface.REQUEST_FIELDS["messages"].treatment is surface.Treatment.REFUSED
    assert surface.unapplied_fields(("temperature",), {"ndjson"}) == ["temperature"]
    assert "| `ndjson` |" in surface.markdown_tables()
    assert ("ndjson", "Test-only newline-delimited JSON") in wire_dialects.choices()
    from responses_api.models import Provider

    assert "ndjson" in dict(Provider._meta.get_field("kind").choices or ())  # an admin choice, no migration
    assert dialects.known("ndjson")  # and a kind the config file may name


@pytest.mark.usefixtures("ndjson_dialect")
def test_the_gateway_serves_a_route_to_the_test_dialect(gateway: Gateway) -> None:
    """The whole request path with nothing but the registry line: the openai SDK streams a
    response from an ndjson upstream (strictly validated), and a field the dialect's column
    announces is named in x-gateway-ignored-fields."""
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    with NdjsonUpstream().in_thread() as server:
        provider = Provider.objects.create(name="nd", kind="ndjson", base_url=server.base_url)
        route = ModelRoute.objects.create(name="nd-model")
        RouteTarget.objects.create(route=route, provider=provider, upstream_model="m")
        routing.clear_cache()
        server.enqueue("m", Reply(text="Lines all the way down."), Reply(text="Again."))
        response = gateway.openai().responses.create(model="nd-model", input="hi", instructions="Be brief.")
        assert response.output_text == "Lines all the way down."
        assert server.requests[0].body["turns"] == [
            {"who": "system", "text": "Be brief."},
            {"who": "user", "text": "hi"},
        ]
        with gateway.http() as http:
            answer = http.post(
                "/v1/responses", json={"model": "nd-model", "input": "hi", "stream": True, "temperature": 0.5}
            )
        assert answer.headers["x-gateway-ignored-fields"] == "temperature"
        final = validate_sse(answer.content)
        assert final["output"][0]["content"][0]["text"] == "Again."


def test_the_built_in_surface_is_the_same_without_the_test_dialect() -> None:
    assert surface.UPSTREAM_KINDS == ("chat_completions", "responses", "anthropic")
    assert "ndjson" not in surface.ANNOUNCED_FIELDS
    assert "`ndjson`" not in surface.markdown_tables()
