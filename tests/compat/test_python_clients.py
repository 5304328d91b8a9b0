"""The OpenAI Agents SDK and LangChain against the gateway, with a function tool.

Each client runs a tool loop: the scripted upstream asks for the tool, the client
runs it and sends its output back, the upstream answers. Streams the clients
consume are also fetched raw and put through the strict validator.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from typing import Any

import pytest

from tests.compat.conftest import need
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def weather_tool_call() -> Reply:
    return Reply(tool_calls=[{"id": "call_w", "name": "get_weather", "arguments": {"city": "Paris"}}])


def tool_output_sent(scripted: ScriptedUpstream) -> str:
    """What the client sent back as the tool's output, as the model received it."""
    return next(m["content"] for m in scripted.requests[-1].body["messages"] if m["role"] == "tool")


# -- OpenAI Agents SDK --------------------------------------------------------------------------


def _agent(gateway: Gateway, model: str = MODEL, *, websocket: bool = False) -> Any:
    """The Agents SDK's forecaster with a function tool, over HTTP (OpenAIResponsesModel) or
    its WebSocket transport (OpenAIResponsesWSModel)."""
    need("openai-agents", importlib.util.find_spec("agents") is not None)
    from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesWSModel
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}, 21C"

    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
    transport = OpenAIResponsesWSModel if websocket else OpenAIResponsesModel
    return Agent(
        name="forecaster",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=transport(model=model, openai_client=client),
    )


def test_agents_sdk_run_sync(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    agent = _agent(gateway)
    from agents import Runner

    scripted.enqueue(MODEL, weather_tool_call(), Reply(text="It is sunny in Paris."))
    result = Runner.run_sync(agent, "Weather in Paris?")
    assert result.final_output == "It is sunny in Paris."
    assert tool_output_sent(scripted) == "Sunny in Paris, 21C"


def test_agents_sdk_run_streamed(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    agent = _agent(gateway)
    from agents import Runner

    scripted.enqueue(MODEL, weather_tool_call(), Reply(text="It is sunny in Paris."))

    async def run() -> tuple[str, list[str]]:
        result = Runner.run_streamed(agent, "Weather in Paris?")
        kinds: list[str] = [event.type async for event in result.stream_events()]
        return result.final_output, kinds

    final, kinds = asyncio.run(run())
    assert final == "It is sunny in Paris."
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert tool_output_sent(scripted) == "Sunny in Paris, 21C"
    # The same stream, raw: what the SDK consumed passes the strict validator.
    scripted.enqueue(MODEL, Reply(text="It is sunny in Paris."))
    with gateway.http() as http:
        validate_sse(http.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}).text)


# -- The Agents SDK's WebSocket transport, and the openai SDK's responses.connect ---------------


def test_agents_sdk_websocket_transport_run_and_run_streamed(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    """The Agents SDK forces `stream: true` into every `response.create` frame."""
    model, upstream = upstream_model
    from agents import Runner

    agent = _agent(gateway, model, websocket=True)
    scripted.enqueue(upstream, weather_tool_call(), Reply(text="It is sunny in Paris."))
    scripted.enqueue(upstream, weather_tool_call(), Reply(text="Still sunny in Paris."))

    async def run() -> tuple[str, str, list[str]]:
        first = await Runner.run(agent, "Weather in Paris?")
        streamed = Runner.run_streamed(agent, "And now?")
        kinds: list[str] = [event.type async for event in streamed.stream_events()]
        return first.final_output, streamed.final_output, kinds

    first, second, kinds = asyncio.run(run())
    assert (first, second) == ("It is sunny in Paris.", "Still sunny in Paris.")
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert "Sunny in Paris, 21C" in str(scripted.requests[-1].body)


def test_openai_sdk_responses_connect_runs_a_tool_loop(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    from tests.support.stream_validator import validate_events

    model, upstream = upstream_model
    scripted.enqueue(upstream, weather_tool_call(), Reply(text="It is sunny in Paris."))
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    client = gateway.openai()

    def one_turn(connection: Any, **body: Any) -> dict:
        connection.response.create(model=model, tools=[tool], store=False, **body)
        events = []
        while True:
            raw = connection.recv_bytes()
            event = connection.parse_event(raw)  # the SDK parses each event ...
            events.append(json.loads(raw))  # ... and the strict validator checks it as sent
            if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
                return validate_events(events)

    with client.responses.connect() as connection:
        first = one_turn(connection, input="Weather in Paris?")
        (call,) = [item for item in first["output"] if item["type"] == "function_call"]
        second = one_turn(
            connection,
            previous_response_id=first["id"],
            input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny in Paris, 21C"}],
        )
    assert second["output"][-1]["content"][0]["text"] == "It is sunny in Paris."


# -- LangChain ----------------------------------------------------------------------------------


def _chat(gateway: Gateway) -> Any:
    need("langchain-openai", importlib.util.find_spec("langchain_openai") is not None)
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(
        model=MODEL, base_url=f"{gateway.url}/v1", api_key=SecretStr(gateway.key), use_responses_api=True, max_retries=0
    )


def test_langchain_invoke_and_stream(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    chat = _chat(gateway)
    scripted.enqueue(MODEL, Reply(text="Bonjour"), Reply(text="Hello there", chunk_chars=2))
    assert chat.invoke("Say hi in French").text == "Bonjour"
    chunks = list(chat.stream("Say hi"))
    assert len(chunks) > 2
    assert "".join(c.text for c in chunks) == "Hello there"


def test_langchain_bound_tools(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    chat = _chat(gateway)
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}, 21C"

    bound = chat.bind_tools([get_weather])
    scripted.enqueue(MODEL, weather_tool_call(), Reply(text="It is sunny in Paris."))
    messages: list[Any] = [HumanMessage("Weather in Paris?")]
    first = bound.invoke(messages)
    [call] = first.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"}
    messages += [first, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    assert bound.invoke(messages).text == "It is sunny in Paris."
    assert tool_output_sent(scripted) == "Sunny in Paris, 21C"
