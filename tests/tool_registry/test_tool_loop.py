"""Server-side tool loops with registry tools: real webhook server, real upstream, real SDK."""

from __future__ import annotations

import json
import threading

import pytest

from tests.support.harness import MODEL, Gateway, call
from tests.support.stream_validator import parse_sse, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.webhook import Route, WebhookServer
from tool_registry.executors import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

pytestmark = pytest.mark.embedded


def test_one_step_loop_signed_webhook(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    scripted.enqueue(
        MODEL, Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "call_1")]), Reply(text="It is sunny in Paris.")
    )
    resp = gateway.openai().responses.create(
        model=MODEL, input="Weather in Paris?", tools=[{"type": "function", "name": "get_weather"}]
    )
    assert resp.status == "completed"
    assert [o.type for o in resp.output] == ["function_call", "function_call_output", "message"]
    assert json.loads(resp.output[1].output) == {"city": "Paris", "forecast": "sunny"}
    assert resp.output_text == "It is sunny in Paris."
    # the registry definition was filled in and reported
    assert resp.tools[0].description == "get_weather tool" and resp.tools[0].parameters["required"] == ["city"]
    (hook,) = webhook.calls_to("/weather")
    assert hook.json == {"city": "Paris"}
    assert hook.headers["authorization"] == "Bearer tool-token"
    expected = sign("s3cret", hook.headers[TIMESTAMP_HEADER.lower()], hook.body)
    assert hook.headers[SIGNATURE_HEADER.lower()] == expected
    # second model call saw the call and its output
    second = scripted.requests[-1].body["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_1"
    assert second[-1]["role"] == "tool" and "sunny" in second[-1]["content"]
    # usage sums both upstream calls
    assert resp.usage.output_tokens >= 2 and resp.usage.input_tokens >= 2


def test_three_step_loop_streamed_is_valid(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]),
        Reply(tool_calls=[call("get_weather", {"city": "Rome"}, "c2")]),
        Reply(tool_calls=[call("get_weather", {"city": "Oslo"}, "c3")]),
        Reply(text="Paris, Rome and Oslo are sunny."),
    )
    with (
        gateway.http() as http,
        http.stream(
            "POST",
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "Weather tour",
                "stream": True,
                "tools": [{"type": "function", "name": "get_weather"}],
            },
        ) as r,
    ):
        raw = r.read()
    terminal = validate_sse(raw)
    assert [o["type"] for o in terminal["output"]] == ["function_call", "function_call_output"] * 3 + ["message"]
    assert len(webhook.calls_to("/weather")) == 3
    with gateway.http() as http:
        stored = http.get(f"/v1/responses/{terminal['id']}").json()
    validate_sse(raw, final_response=stored)


def test_parallel_tools_run_concurrently(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    # Each tool answers only once both are in flight (a barrier, not a stopwatch): run one
    # after the other, the first would wait out the barrier and become an error output. So
    # no elapsed-time bound that a loaded machine could fail.
    both_in_flight = threading.Barrier(2, timeout=20)

    def meet(body: dict[str, int]):
        def handler(call) -> dict[str, int] | dict[str, str]:
            try:
                both_in_flight.wait()
            except threading.BrokenBarrierError:
                return {"error": "ran alone"}
            return body

        return handler

    tools_env("slow_a", "/slow_a", timeout=30)
    tools_env("slow_b", "/slow_b", timeout=30)
    webhook.routes["/slow_a"] = Route(handler=meet({"a": 1}))
    webhook.routes["/slow_b"] = Route(handler=meet({"b": 2}))
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("slow_a", {"city": "x"}, "a"), call("slow_b", {"city": "y"}, "b")]),
        Reply(text="done"),
    )
    resp = gateway.openai().responses.create(
        model=MODEL, input="go", tools=[{"type": "function", "name": "slow_a"}, {"type": "function", "name": "slow_b"}]
    )
    assert resp.output_text == "done"
    outputs = {o.call_id: json.loads(o.output) for o in resp.output if o.type == "function_call_output"}
    assert outputs == {"a": {"a": 1}, "b": {"b": 2}}, f"the tools did not run concurrently: {outputs}"


def test_failing_and_timing_out_tools_become_error_outputs(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    tools_env("broken", "/broken")
    tools_env("sleepy", "/sleepy", timeout=0.3)
    webhook.routes["/broken"] = Route(status=500, body={"error": "db down"})
    webhook.routes["/sleepy"] = Route(delay=2.0)
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("broken", {"city": "x"}, "b1"), call("sleepy", {"city": "y"}, "s1")]),
        Reply(text="Sorry, the tools failed."),
    )
    resp = gateway.openai().responses.create(
        model=MODEL, input="go", tools=[{"type": "function", "name": "broken"}, {"type": "function", "name": "sleepy"}]
    )
    assert resp.status == "completed"
    outputs = [json.loads(o.output) for o in resp.output if o.type == "function_call_output"]
    assert "HTTP 500" in outputs[0]["error"]
    assert "timed out" in outputs[1]["error"]


def test_max_tool_calls_ends_incomplete(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]),
        Reply(tool_calls=[call("get_weather", {"city": "Rome"}, "c2")]),
    )
    resp = gateway.openai().responses.create(
        model=MODEL, input="go", max_tool_calls=1, tools=[{"type": "function", "name": "get_weather"}]
    )
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_tool_calls"
    assert len(webhook.calls_to("/weather")) == 1


def test_allowed_tools_never_runs_a_disallowed_server_tool(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    tools_env("delete_everything", "/delete")
    scripted.enqueue(MODEL, Reply(tool_calls=[call("delete_everything", {"city": "x"}, "d1")]))
    with gateway.http() as http:
        body = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "go",
                "tools": [
                    {"type": "function", "name": "get_weather"},
                    {"type": "function", "name": "delete_everything"},
                ],
                "tool_choice": {
                    "type": "allowed_tools",
                    "mode": "auto",
                    "tools": [{"type": "function", "name": "get_weather"}],
                },
            },
        ).json()
    assert body["status"] == "completed" and body["output"] == []
    assert webhook.calls_to("/delete") == []


def test_mixed_server_and_client_tools_round_trip(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    client_tool = {
        "type": "function",
        "name": "ask_user",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "w1"), call("ask_user", {"q": "umbrella?"}, "u1")]),
        Reply(text="Take an umbrella anyway."),
    )
    client = gateway.openai()
    first = client.responses.create(
        model=MODEL, input="Plan my day", tools=[{"type": "function", "name": "get_weather"}, client_tool]
    )
    assert [o.type for o in first.output] == ["function_call", "function_call", "function_call_output"]
    assert first.output[2].call_id == "w1"  # the server call ran; the client call is for the client
    assert len(webhook.calls_to("/weather")) == 1
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[{"type": "function", "name": "get_weather"}, client_tool],
        input=[{"type": "function_call_output", "call_id": "u1", "output": "yes"}],
    )
    assert second.output_text == "Take an umbrella anyway."
    roles = [m["role"] for m in scripted.requests[-1].body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"]
    assert len(webhook.calls_to("/weather")) == 1  # never re-run


def test_python_tool_and_route_attached_tools(tools_env, gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ModelRoute
    from tool_registry.models import Tool

    adder = Tool(
        name="add",
        description="Add two ints",
        executor="python",
        python_callable="tests.tool_registry.pytools:add",
        parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    )
    adder.full_clean()
    adder.save()
    adder.routes.add(ModelRoute.objects.get(name=MODEL))
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 2, "b": 3}, "p1")]), Reply(text="5"))
    resp = gateway.openai().responses.create(model=MODEL, input="2+3?")  # no tools named: attached by the route
    assert json.loads(resp.output[1].output) == {"sum": 5}
    assert [t.name for t in resp.tools] == ["add"]


def test_tenant_restricted_tool_is_invisible_to_others(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    from responses_api.models import Tenant
    from tool_registry.models import Tool

    other = Tenant.objects.create(name="someone-else")
    Tool.objects.get(name="get_weather").tenants.add(other)
    scripted.enqueue(MODEL, Reply(tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]))
    resp = gateway.openai().responses.create(
        model=MODEL, input="go", tools=[{"type": "function", "name": "get_weather"}]
    )
    # not a registry tool for this tenant: it is the client's (bare) tool, returned, never run
    assert [o.type for o in resp.output] == ["function_call"]
    assert webhook.calls_to("/weather") == []


def test_a_call_is_never_executed_twice_for_the_same_call_id(tools_env, webhook: WebhookServer) -> None:
    import asyncio

    from tool_registry.runner import RegistryToolRunner
    from tool_registry.services import egress_policy, registry_tools_for

    specs = registry_tools_for(tenant_id=0, route_name="none", names=["get_weather"])
    runner = RegistryToolRunner(response_id="resp_x", specs=specs, policy=egress_policy())
    item = {"call_id": "same", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    first = asyncio.run(runner.execute(item))
    second = asyncio.run(runner.execute(item))
    assert first == second
    assert len(webhook.calls_to("/weather")) == 1


def _search_route(tools_env) -> None:
    from responses_api.models import ModelRoute

    tools_env(
        "corp_search",
        "/search",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    )
    ModelRoute.objects.filter(name=MODEL).update(hosted_tools={"web_search": "corp_search"})


def test_web_search_served_by_a_registry_tool(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer
) -> None:
    _search_route(tools_env)
    webhook.routes["/search"] = Route(handler=lambda call: {"results": [f"{call.json['query']}: 42 is the answer"]})
    scripted.enqueue(
        MODEL, Reply(tool_calls=[call("corp_search", {"query": "meaning of life"}, "c1")]), Reply(text="It is 42.")
    )
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={"model": MODEL, "input": "Search it", "stream": True, "tools": [{"type": "web_search_preview"}]},
        )
    assert "x-gateway-dropped-tools" not in raw.headers
    terminal = validate_sse(raw.text)
    search, message = terminal["output"]
    assert search["type"] == "web_search_call" and search["status"] == "completed"
    assert search["action"]["query"] == "meaning of life"
    assert message["content"][0]["text"] == "It is 42."
    assert terminal["tools"] == [{"type": "web_search_preview"}]
    assert terminal["tool_usage"] == {"web_search": {"num_requests": 1}}  # openai 3.4x's ToolUsage
    kinds = [e["type"] for e in parse_sse(raw.text)]
    assert kinds.index("response.web_search_call.searching") < kinds.index("response.web_search_call.completed")
    # The model saw its search as a function call with the registry tool's output.
    offered = [t["function"]["name"] for t in scripted.model_calls[0].body["tools"]]
    assert offered == ["corp_search"]
    tool_message = scripted.requests[-1].body["messages"][-1]
    assert tool_message["role"] == "tool" and "42 is the answer" in tool_message["content"]
    assert json.loads(webhook.calls_to("/search")[0].body) == {"query": "meaning of life"}


def test_hosted_tools_a_route_does_not_serve_are_dropped_visibly(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    _search_route(tools_env)
    scripted.enqueue(MODEL, Reply(text="no tools for that"))
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "x",
                "tools": [
                    {"type": "code_interpreter", "container": {"type": "auto"}},
                    {"type": "image_generation"},
                ],
            },
        )
    assert raw.status_code == 200, raw.text
    assert raw.headers["x-gateway-dropped-tools"] == "code_interpreter,image_generation"
    assert "tools" not in scripted.requests[-1].body
    assert raw.json()["tools"] == []
