"""Tool search end to end: the real `openai` SDK against the gateway, over a Chat Completions and
an Anthropic upstream (scripted), with 200+ deferred tools: registry tools and registered MCP
servers from tests/fixtures/mcp_listings.json, and a real MCP server (tests/support/mcp_server.py)
whose `lookup_order` the model finds and calls. Streams go through the strict validator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from tests.support.harness import Gateway, McpServerProcess, call
from tests.support.stream_validator import validate_events, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

LISTINGS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "mcp_listings.json").read_text())
REGISTRY_SERVERS = ("github", "slack", "atlassian")  # their tools become registry tools


@pytest.fixture
def catalogue(
    gateway: Gateway,
    mcp_server: McpServerProcess,
    upstream_model: tuple[str, str],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> int:
    """The model's route gets 200+ deferred tools; returns the bytes of their schemas."""
    from responses_api.models import ModelRoute
    from responses_api.orchestration import toolplan
    from tool_registry.models import McpServer, Tool

    settings.GATEWAY_PYTHON_TOOL_MODULES = frozenset({"tests.tool_registry.pytools"})
    monkeypatch.setenv("SHOP_MCP_TOKEN", f"Bearer {mcp_server.token}")
    route = ModelRoute.objects.get(name=upstream_model[0])
    add = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    registry = [
        Tool(
            name="add_numbers",
            description="Add two integers and return their sum.",
            parameters=add,
            executor="python",
            python_callable="tests.tool_registry.pytools:add",
            defer_loading=True,
        )
    ]
    for label in REGISTRY_SERVERS:
        registry += [
            Tool(
                name=f"{label}_{t['name']}"[:64],
                description=t["description"],
                parameters=t["input_schema"],
                strict=False,
                executor="python",
                python_callable="tests.tool_registry.pytools:add",
                defer_loading=True,
            )
            for t in LISTINGS[label]
        ]
    Tool.objects.bulk_create(registry, ignore_conflicts=True)
    route.tools.add(*Tool.objects.filter(defer_loading=True))
    servers = [
        McpServer(
            label="shop",
            url=mcp_server.url,
            headers_env={"Authorization": "SHOP_MCP_TOKEN"},
            approval="never",
            defer_loading=True,
        )
    ]
    servers += [
        # Listed from the registry's cache: never asked, never called.
        McpServer(
            label=label,
            url=mcp_server.url,
            approval="never",
            defer_loading=True,
            tools_cache=listing,
            tools_fetched_at=timezone.now(),
        )
        for label, listing in LISTINGS.items()
        if label not in REGISTRY_SERVERS
    ]
    McpServer.objects.bulk_create(servers)
    route.mcp_servers.add(*McpServer.objects.all())
    toolplan.clear_cache()
    deferred = len(registry) + 3 + sum(len(v) for k, v in LISTINGS.items() if k not in REGISTRY_SERVERS)
    assert deferred >= 200
    return len(json.dumps([t.parameters for t in registry] + [s.tools_cache for s in servers]))


def _tool_names(body: dict[str, Any]) -> set[str]:
    """The function names a model call offered (Chat Completions or Anthropic Messages)."""
    return {t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools", [])}


def test_the_model_finds_and_calls_a_deferred_tool(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], catalogue: int
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "look up an order by its id"}, "s1")]),
        Reply(tool_calls=[call("lookup_order", {"order_id": "A1"}, "c1")]),
        Reply(text="Order A1 has shipped."),
    )
    client = gateway.openai()
    resp = client.responses.create(model=model, input="Where is order A1?")
    assert resp.status == "completed", resp.error
    kinds = [o.type for o in resp.output if o.type != "mcp_list_tools"]
    assert kinds == ["tool_search_call", "tool_search_output", "mcp_call", "message"]
    search_call, search_output, mcp_call, _ = (o for o in resp.output if o.type != "mcp_list_tools")
    assert search_call.execution == "server" and search_call.arguments == {"query": "look up an order by its id"}
    assert search_output.call_id == search_call.call_id and search_output.execution == "server"
    shop = [t for t in search_output.tools if t.type == "mcp" and t.server_label == "shop"]
    assert shop and "lookup_order" in shop[0].allowed_tools
    assert mcp_call.name == "lookup_order" and mcp_call.output == "order A1: shipped"
    assert resp.output_text == "Order A1 has shipped."
    first, second, third = scripted.model_calls[-3:]
    # The first call offered the search alone: none of the 200+ deferred schemas.
    assert _tool_names(first.body) == {"tool_search"}
    assert len(json.dumps(first.body)) < 2_500 < catalogue
    # The search's description says what can be found: how many tools, of which MCP servers.
    (search,) = first.body["tools"]
    description = (search.get("function") or search)["description"]
    assert "are not loaded yet" in description and "shop (MCP server)" in description
    assert "github (" not in description  # registry tools belong to no server
    assert {"tool_search", "lookup_order"} <= _tool_names(second.body) and len(_tool_names(second.body)) <= 6
    assert "lookup_order" in str(second.body) and "order A1: shipped" in str(third.body)

    # A later turn of the chain has the tool found earlier, without searching again.
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("lookup_order", {"order_id": "B2"}, "c2")]),
        Reply(text="B2 has shipped too."),
    )
    later = client.responses.create(model=model, input="And B2?", previous_response_id=resp.id)
    assert [o.type for o in later.output if o.type != "mcp_list_tools"] == ["mcp_call", "message"]
    assert "lookup_order" in _tool_names(scripted.model_calls[-2].body)


def test_a_streamed_search_is_valid_and_a_registry_tool_runs(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], catalogue: int
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "add two integers"}, "s1")]),
        Reply(tool_calls=[call("add_numbers", {"a": 2, "b": 40}, "c1")]),
        Reply(text="42."),
    )
    with (
        gateway.http() as http,
        http.stream("POST", "/v1/responses", json={"model": model, "input": "2+40?", "stream": True}) as r,
    ):
        assert r.status_code == 200
        raw = r.read()
    terminal = validate_sse(raw)
    with gateway.http() as http:
        stored = http.get(f"/v1/responses/{terminal['id']}").json()
    validate_sse(raw, final_response=stored)
    output = [o for o in stored["output"] if o["type"] != "mcp_list_tools"]
    assert [o["type"] for o in output] == [
        "tool_search_call",
        "tool_search_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert "add_numbers" in {t.get("name") for t in output[1]["tools"]}
    assert json.loads(output[3]["output"]) == {"sum": 42}


def test_over_websocket_a_search_loop_runs_and_the_chain_keeps_what_was_found(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], catalogue: int
) -> None:
    """A search, a call of what it found and the answer in one WebSocket turn; the next turn (and
    a later one over HTTP) calls the found tool without searching again."""
    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "order lookup"}, "s1")]),
        Reply(tool_calls=[call("lookup_order", {"order_id": "C2"}, "c2")]),
        Reply(text="C2 has shipped."),
        Reply(tool_calls=[call("lookup_order", {"order_id": "C3"}, "c3")]),
        Reply(text="C3 has shipped."),
        Reply(tool_calls=[call("lookup_order", {"order_id": "C4"}, "c4")]),
        Reply(text="C4 has shipped."),
    )

    def turn(connection: Any, **body: Any) -> dict:
        connection.response.create(model=model, **body)
        events = []
        while True:
            raw = connection.recv_bytes()
            event = connection.parse_event(raw)  # the SDK parses each event ...
            events.append(json.loads(raw))  # ... and the strict validator checks it as sent
            if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
                return validate_events(events)

    def kinds(response: dict) -> list[str]:
        return [o["type"] for o in response["output"] if o["type"] != "mcp_list_tools"]

    with gateway.openai().responses.connect() as connection:
        first = turn(connection, input="Where is C2?")
        assert kinds(first) == ["tool_search_call", "tool_search_output", "mcp_call", "message"]
        second = turn(connection, input="And C3?", previous_response_id=first["id"])
    assert kinds(second) == ["mcp_call", "message"]
    assert "lookup_order" in _tool_names(scripted.model_calls[-2].body)
    third = gateway.openai().responses.create(model=model, input="And C4?", previous_response_id=second["id"])
    assert kinds(third.model_dump()) == ["mcp_call", "message"] and third.output_text == "C4 has shipped."


def test_client_executed_search_and_additional_tools(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    """`execution: "client"`: the call is the client's to answer, and its answer loads the tools
    it returns; an output answering no call is a 400. `additional_tools` add tools at once."""
    model, upstream = upstream_model
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    tools = [{"type": "tool_search", "execution": "client"}, {**weather, "defer_loading": True}]
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "weather"}, "s1")]),
        Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "w1")]),
    )
    client = gateway.openai()
    first = client.responses.create(model=model, input="Weather in Paris?", tools=tools)
    (search,) = first.output
    assert search.type == "tool_search_call" and search.execution == "client"
    assert _tool_names(scripted.model_calls[-1].body) == {"tool_search"}
    answer = {"type": "tool_search_output", "execution": "client", "call_id": search.call_id, "tools": [weather]}
    second = client.responses.create(model=model, input=[answer], tools=tools, previous_response_id=first.id)
    assert [o.type for o in second.output] == ["function_call"] and second.output[0].name == "get_weather"
    assert _tool_names(scripted.model_calls[-1].body) == {"tool_search", "get_weather"}
    with gateway.http() as http:
        orphan = http.post(
            "/v1/responses",
            json={"model": model, "tools": tools, "input": [{**answer, "call_id": "nope"}]},
        )
    assert orphan.status_code == 400 and orphan.json()["error"]["param"] == "input[0].call_id"

    scripted.enqueue(upstream, Reply(tool_calls=[call("get_weather", {"city": "Oslo"}, "w2")]))
    added = client.responses.create(
        model=model,
        input=[
            {"type": "additional_tools", "role": "developer", "tools": [weather]},
            {"role": "user", "content": "Weather in Oslo?"},
        ],
    )
    assert [o.type for o in added.output] == ["function_call"]
    assert _tool_names(scripted.model_calls[-1].body) == {"get_weather"}


def test_a_background_run_searches_and_the_sdk_stream_helper_reads_it(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], catalogue: int, worker: Any
) -> None:
    """A worker's run plans the same deferred tools and answers the same search; the SDK's
    stream helper (which accumulates items by type) reads a streamed search."""
    import time

    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "order"}, "s1")]),
        Reply(tool_calls=[call("lookup_order", {"order_id": "D4"}, "c4")]),
        Reply(text="D4 has shipped."),
    )
    client = gateway.openai()
    started = client.responses.create(model=model, input="Where is D4?", background=True)
    deadline = time.monotonic() + 30
    resp = started
    while resp.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        resp = client.responses.retrieve(started.id)
    assert resp.status == "completed", resp.error
    assert [o.type for o in resp.output if o.type != "mcp_list_tools"] == [
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "message",
    ]

    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "add two integers"}, "s2")]),
        Reply(text="Found an adder."),
    )
    with client.responses.stream(model=model, input="Can you add?") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.output_item.done" in kinds and final.output_text == "Found an adder."
    found = next(o for o in final.output if o.type == "tool_search_output")
    assert "add_numbers" in {getattr(t, "name", None) for t in found.tools}


def test_a_request_defers_an_mcp_server_it_names(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], mcp_server: McpServerProcess
) -> None:
    model, upstream = upstream_model
    shop = {
        "type": "mcp",
        "server_label": "shop",
        "server_url": mcp_server.url,
        "headers": {"Authorization": f"Bearer {mcp_server.token}"},
        "require_approval": "never",
        "defer_loading": True,
    }
    with gateway.http() as http:
        refused = http.post("/v1/responses", json={"model": model, "input": "x", "tools": [shop]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools[0].defer_loading"
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "add integers"}, "s1")]),
        Reply(tool_calls=[call("add", {"a": 1, "b": 2}, "c1")]),
        Reply(text="3."),
    )
    resp = gateway.openai().responses.create(model=model, input="1+2?", tools=[{"type": "tool_search"}, shop])
    assert [o.type for o in resp.output] == [
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "message",
    ]
    (found,) = resp.output[2].tools
    assert found.type == "mcp" and found.server_label == "shop" and "add" in found.allowed_tools
    assert resp.output[3].output == "3" and mcp_server.counts() == {"add": 1}
    assert _tool_names(scripted.model_calls[-3].body) == {"tool_search"}
    assert {"add", "tool_search"} <= _tool_names(scripted.model_calls[-2].body)
    assert [t.defer_loading for t in resp.tools if t.type == "mcp"] == [True]


def test_a_store_false_history_sent_back_keeps_what_was_found(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], catalogue: int
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("tool_search", {"query": "look up an order"}, "s1")]),
        Reply(text="I can look orders up."),
        Reply(tool_calls=[call("lookup_order", {"order_id": "E5"}, "c5")]),
        Reply(text="E5 has shipped."),
    )
    client = gateway.openai()
    first = client.responses.create(model=model, input="Can you track orders?", store=False)
    history = [{"role": "user", "content": "Can you track orders?"}]
    history += [o.model_dump(exclude_none=True) for o in first.output if o.type != "mcp_list_tools"]
    second = client.responses.create(model=model, input=[*history, {"role": "user", "content": "E5?"}], store=False)
    assert [o.type for o in second.output if o.type != "mcp_list_tools"] == ["mcp_call", "message"]
    assert "lookup_order" in _tool_names(scripted.model_calls[-2].body)
