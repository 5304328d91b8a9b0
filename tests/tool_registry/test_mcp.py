"""MCP tools end to end: a real MCP server (the `mcp` package, streamable HTTP, in a
subprocess), the scripted upstream, the real `openai` SDK and the strict stream validator."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.harness import MODEL, Gateway, McpServerProcess, call
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.webhook import WebhookServer

pytestmark = pytest.mark.embedded


def adhoc(server: McpServerProcess, **extra) -> dict:
    return {
        "type": "mcp",
        "server_label": "shop",
        "server_url": server.url,
        "headers": {"Authorization": f"Bearer {server.token}"},
        "require_approval": "never",
        **extra,
    }


def stream(gateway: Gateway, body: dict) -> tuple[bytes, dict]:
    with gateway.http() as http, http.stream("POST", "/v1/responses", json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        raw = r.read()
    terminal = validate_sse(raw)
    with gateway.http() as http:
        stored = http.get(f"/v1/responses/{terminal['id']}").json()
    validate_sse(raw, final_response=stored)
    return raw, terminal


def test_list_and_call_in_one_response(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 2, "b": 40}, "c1")]), Reply(text="It is 42."))
    resp = gateway.openai().responses.create(model=MODEL, input="2+40?", tools=[adhoc(mcp_server)])
    assert resp.status == "completed"
    assert [o.type for o in resp.output] == ["mcp_list_tools", "mcp_call", "message"]
    listing, mcp_call = resp.output[0], resp.output[1]
    assert listing.server_label == "shop"
    assert {t.name for t in listing.tools} == {"add", "lookup_order", "slow"}
    assert mcp_call.server_label == "shop" and mcp_call.name == "add"
    assert json.loads(mcp_call.arguments) == {"a": 2, "b": 40}
    assert mcp_call.output == "42" and mcp_call.error is None and mcp_call.status == "completed"
    assert resp.output_text == "It is 42."
    assert mcp_server.counts() == {"add": 1}
    # The model saw the server's tools as functions, then the call and its output.
    first = scripted.model_calls[-2].body
    assert {t["function"]["name"] for t in first["tools"]} == {"add", "lookup_order", "slow"}
    second = scripted.requests[-1].body["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "add"
    assert second[-1]["role"] == "tool" and second[-1]["content"] == "42"
    # The echoed tool never carries the credentials.
    (tool,) = resp.tools
    assert tool.type == "mcp" and tool.server_label == "shop" and not tool.headers


def test_streamed_mcp_response_is_valid(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup_order", {"order_id": "A7"}, "c1")]), Reply(text="Shipped."))
    raw, terminal = stream(gateway, {"model": MODEL, "input": "Where is A7?", "tools": [adhoc(mcp_server)]})
    events = [json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: {")]
    types = [e["type"] for e in events]
    mcp_events = [t for n, t in enumerate(types) if "mcp" in t and t != types[n - 1]]
    assert mcp_events == [
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ]
    # The call item stays open while the server runs it: done comes after completed.
    done_at = max(
        n for n, e in enumerate(events) if e["type"] == "response.output_item.done" and e["item"]["type"] == "mcp_call"
    )
    assert types.index("response.mcp_call.completed") == done_at - 1
    assert terminal["output"][1]["output"] == "order A7: shipped"
    assert mcp_server.counts() == {"lookup_order": 1}


def test_loop_mixes_mcp_registry_and_client_tools(
    tools_env, gateway: Gateway, scripted: ScriptedUpstream, webhook: WebhookServer, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(
        MODEL,
        # step 1: an MCP call and a registry http call, in parallel
        Reply(tool_calls=[call("add", {"a": 1, "b": 2}, "c1"), call("get_weather", {"city": "Oslo"}, "c2")]),
        # step 2: a client tool: the response ends and the client answers it
        Reply(tool_calls=[call("notify_user", {"text": "3, sunny"}, "c3")]),
        Reply(text="Told them."),
    )
    tools = [
        adhoc(mcp_server),
        {"type": "function", "name": "get_weather"},
        {
            "type": "function",
            "name": "notify_user",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    ]
    raw, first = stream(gateway, {"model": MODEL, "input": "go", "tools": tools})
    assert [o["type"] for o in first["output"]] == [
        "mcp_list_tools",
        "mcp_call",
        "function_call",
        "function_call_output",
        "function_call",
    ]
    assert first["output"][1]["output"] == "3"
    assert "sunny" in first["output"][3]["output"]
    assert first["output"][4]["name"] == "notify_user"
    client = gateway.openai()
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first["id"],
        tools=tools,
        input=[{"type": "function_call_output", "call_id": first["output"][4]["call_id"], "output": "ok"}],
    )
    assert second.output_text == "Told them."
    # The chain already listed the server's tools: no second listing.
    assert [o.type for o in second.output] == ["message"]
    assert mcp_server.counts() == {"add": 1}
    assert len(webhook.calls_to("/weather")) == 1
    # One continuous story for the model: MCP call + registry call + client call, each answered.
    messages = scripted.requests[-1].body["messages"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages][0] == "3" and tool_messages[-1]["content"] == "ok"


def test_approval_required_then_approved_runs_once(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    tools = [adhoc(mcp_server, require_approval="always")]
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 20, "b": 22}, "c1")]))
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="20+22?", tools=tools)
    assert first.status == "completed"
    assert [o.type for o in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert request.name == "add" and json.loads(request.arguments) == {"a": 20, "b": 22}
    assert mcp_server.counts() == {}  # nothing runs before the user says so

    scripted.enqueue(MODEL, Reply(text="42."))
    raw, second = stream(
        gateway,
        {
            "model": MODEL,
            "previous_response_id": first.id,
            "tools": tools,
            "input": [{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
        },
    )
    assert [o["type"] for o in second["output"]] == ["mcp_call", "message"]
    assert second["output"][0]["approval_request_id"] == request.id
    assert second["output"][0]["output"] == "42"
    assert mcp_server.counts() == {"add": 1}
    # The approval's input item is stored and listed like any other.
    with gateway.http() as http:
        items = http.get(f"/v1/responses/{second['id']}/input_items").json()["data"]
    assert items[0]["type"] == "mcp_approval_response" and items[0]["approve"] is True

    # Answering the same request again (another branch of the chain) never runs it twice.
    scripted.enqueue(MODEL, Reply(text="Still 42."))
    third = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    assert third.output[0].type == "mcp_call" and third.output[0].output == "42"
    assert mcp_server.counts() == {"add": 1}


def test_denied_call_is_not_run_and_the_model_hears_it(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    tools = [adhoc(mcp_server, require_approval={"never": {"tool_names": ["add"]}})]
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup_order", {"order_id": "A1"}, "c1")]))
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="Where is A1?", tools=tools)
    request = first.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "lookup_order"
    scripted.enqueue(MODEL, Reply(text="Understood, I will not look it up."))
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False, "reason": "private"}
        ],
    )
    assert [o.type for o in second.output] == ["message"]
    assert mcp_server.counts() == {}
    messages = scripted.requests[-1].body["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert "denied" in messages[-1]["content"] and "private" in messages[-1]["content"]


def test_approval_response_must_answer_a_request_in_the_chain(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    with gateway.http() as http:
        r = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "tools": [adhoc(mcp_server)],
                "input": [{"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}],
            },
        )
        assert r.status_code == 400, r.text
        assert "mcpr_nope" in r.json()["error"]["message"]
        bad = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": [{"type": "mcp_approval_response", "approval_request_id": "x"}],
            },
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "input[0].approve"
    assert mcp_server.counts() == {}


def test_allowed_tools_filter_what_the_model_sees(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup_order", {"order_id": "A1"}, "c1")]), Reply(text="no"))
    resp = gateway.openai().responses.create(model=MODEL, input="hi", tools=[adhoc(mcp_server, allowed_tools=["add"])])
    sent = scripted.model_calls[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["add"]
    # The listing item reports what the model could use; a call outside it never runs.
    assert [t.name for t in resp.output[0].tools] == ["add"]
    assert all(o.type != "mcp_call" for o in resp.output)
    assert mcp_server.counts() == {}


def test_tool_errors_are_clean_outputs(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("lookup_order", {"order_id": "missing"}, "c1")]),
        Reply(text="That order does not exist."),
    )
    raw, resp = stream(gateway, {"model": MODEL, "input": "?", "tools": [adhoc(mcp_server)]})
    kinds = [o["type"] for o in resp["output"]]
    assert kinds == ["mcp_list_tools", "mcp_call", "message"]
    failed_call = resp["output"][1]
    assert failed_call["status"] == "failed" and failed_call["output"] is None
    assert failed_call["error"]["type"] == "mcp_tool_execution_error"
    assert b"response.mcp_call.failed" in raw
    assert "error" in scripted.requests[-1].body["messages"][-1]["content"]
    assert resp["status"] == "completed"


def failed_dependency(gateway: Gateway, body: dict, label: str, index: int = 0) -> dict:
    """A create whose named MCP server cannot list its tools: OpenAI's 424, before any stream."""
    with gateway.http() as http:
        for stream_ in (False, True):
            with http.stream("POST", "/v1/responses", json={**body, "stream": stream_}) as r:
                r.read()
                assert r.status_code == 424, r.text
                assert r.headers["content-type"].startswith("application/json")
                error = r.json()["error"]
                assert (error["type"], error["code"], error["param"]) == (
                    "external_connector_error",
                    "http_error",
                    f"tools[{index}]",
                )
                assert error["message"].startswith(f"Error retrieving tool list from MCP server: '{label}'.")
    return error


def test_a_named_server_whose_listing_fails_fails_the_request_before_any_model_call(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, settings
) -> None:
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW += ["127.0.0.1:9"]
    down = {"type": "mcp", "server_label": "down", "server_url": "http://127.0.0.1:9/mcp", "require_approval": "never"}
    error = failed_dependency(gateway, {"model": MODEL, "input": "?", "tools": [adhoc(mcp_server), down]}, "down", 1)
    assert "could not be reached" in error["message"]
    # A server that wants a token, called without one: the message names its status.
    no_token = {**adhoc(mcp_server), "headers": {}}
    error = failed_dependency(gateway, {"model": MODEL, "input": "?", "tools": [no_token]}, "shop")
    assert "answered HTTP 401" in error["message"]
    assert scripted.model_calls == []
    assert mcp_server.counts() == {}


def test_a_failed_listing_over_a_websocket_and_on_a_worker(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, worker
) -> None:
    from tests.websocket.test_websocket_mode import socket, turn

    no_token = {**adhoc(mcp_server), "headers": {}}
    with socket(gateway) as ws:
        (error,) = turn(ws, model=MODEL, input="x", tools=[no_token])
    assert (error["type"], error["status"]) == ("error", 424)
    assert (error["error"]["type"], error["error"]["code"], error["error"]["param"]) == (
        "external_connector_error",
        "http_error",
        "tools[0]",
    )
    client = gateway.openai()
    started = client.responses.create(model=MODEL, input="x", tools=[no_token], background=True)
    import time

    deadline = time.monotonic() + 30
    resp = started
    while resp.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        resp = client.responses.retrieve(started.id)
    assert resp.status == "failed", resp
    assert resp.error.code == "http_error"
    assert "Error retrieving tool list from MCP server: 'shop'" in resp.error.message
    assert "HTTP 401" in resp.error.message
    with gateway.http() as http, http.stream("GET", f"/v1/responses/{started.id}", params={"stream": "true"}) as r:
        raw = r.read()
    assert validate_sse(raw, background=True)["status"] == "failed"
    assert scripted.model_calls == []


def test_a_route_attached_server_that_is_down_keeps_its_error_item(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    """A server the operator attached, not named by the client: the response goes on without it."""
    from responses_api.models import ModelRoute
    from tool_registry.models import McpServer

    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1"]
    server = McpServer(label="down", url="http://127.0.0.1:9/mcp", approval="never")
    server.full_clean()
    server.save()
    server.routes.add(ModelRoute.objects.get(name=MODEL))
    gateway_module_clear()
    scripted.enqueue(MODEL, Reply(text="no tools today"))
    raw, resp = stream(gateway, {"model": MODEL, "input": "?"})
    assert [o["type"] for o in resp["output"]] == ["mcp_list_tools", "message"]
    assert "could not be reached" in resp["output"][0]["error"]
    assert b"response.mcp_list_tools.failed" in raw
    assert resp["status"] == "completed"


def test_a_redirecting_server_is_reported_as_the_redirect_it_answered(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    """An MCP server answering 307 (moved) is not followed (the egress check was for its origin);
    the error says what it answered, not "JSON-RPC error"."""
    import http.server
    import threading

    class Moved(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{port}"]
    moved = {
        "type": "mcp",
        "server_label": "moved",
        "server_url": f"http://127.0.0.1:{port}/mcp",
        "require_approval": "never",
    }
    try:
        error = failed_dependency(gateway, {"model": MODEL, "input": "?", "tools": [moved]}, "moved")
    finally:
        server.shutdown()
    assert "answered HTTP 307 (a redirect" in error["message"], error


def test_server_dying_mid_response_fails_the_call_not_the_response(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    server = McpServerProcess(token="t")
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{server.port}"]
    try:
        tools = [adhoc(server)]
        scripted.enqueue(
            MODEL,
            Reply(tool_calls=[call("add", {"a": 1, "b": 1}, "c1")], delay=1.5),
            Reply(text="The tool server is down."),
        )
        import threading

        threading.Timer(0.5, server.stop).start()
        resp = gateway.openai().responses.create(model=MODEL, input="1+1", tools=tools)
    finally:
        server.stop()
    assert resp.status == "completed"
    assert resp.output[1].type == "mcp_call" and resp.output[1].status == "failed"
    assert resp.output[1].error.type == "http_error" and resp.output[1].error.code == 502


def test_adhoc_server_url_passes_the_egress_policy(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, settings
) -> None:
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = []
    with gateway.http() as http:
        for url in (
            mcp_server.url,
            "http://169.254.169.254/mcp",
            "http://[::ffff:127.0.0.1]:80/mcp",
            "http://2130706433/mcp",
            "http://10.0.0.8/mcp",
        ):
            r = http.post(
                "/v1/responses",
                json={
                    "model": MODEL,
                    "input": "x",
                    "tools": [
                        {"type": "function", "name": "f"},
                        {"type": "mcp", "server_label": "s", "server_url": url},
                    ],
                },
            )
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"]["param"] == "tools[1].server_url"
        r = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "x",
                "tools": [{"type": "mcp", "server_label": "s", "server_url": "file:///etc/passwd"}],
            },
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].server_url"
    assert scripted.requests == []
    assert mcp_server.counts() == {}


def test_adhoc_servers_can_be_switched_off(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, settings
) -> None:
    settings.GATEWAY_MCP_ADHOC = False
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [adhoc(mcp_server)]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tools[0].server_url"
    assert "switched off" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "tool, param",
    [
        ({"type": "mcp", "server_label": "bad label!", "server_url": "http://x/mcp"}, "tools[0].server_label"),
        (
            {"type": "mcp", "server_label": "s", "server_url": "http://x/mcp", "require_approval": "sometimes"},
            "tools[0].require_approval",
        ),
        (
            {"type": "mcp", "server_label": "s", "server_url": "http://x/mcp", "allowed_tools": "add"},
            "tools[0].allowed_tools",
        ),
        ({"type": "mcp", "server_label": "s", "connector_id": "connector_gmail"}, "tools[0].connector_id"),
        ({"type": "mcp", "server_label": "s", "server_url": "http://x/mcp", "headers": {"a": 1}}, "tools[0].headers"),
        ({"type": "mcp", "server_label": "unregistered"}, "tools[0].server_label"),
    ],
)
def test_bad_mcp_tools_are_400s_naming_the_field(gateway: Gateway, tool: dict, param: str) -> None:
    with gateway.http() as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [tool]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_max_tool_calls_bounds_mcp_calls(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(
        MODEL, Reply(tool_calls=[call("add", {"a": 1, "b": 1}, "c1"), call("add", {"a": 2, "b": 2}, "c2")])
    )
    raw, resp = stream(gateway, {"model": MODEL, "input": "x", "tools": [adhoc(mcp_server)], "max_tool_calls": 1})
    assert resp["status"] == "incomplete" and resp["incomplete_details"]["reason"] == "max_tool_calls"
    calls = [o for o in resp["output"] if o["type"] == "mcp_call"]
    assert [c["status"] for c in calls] == ["completed", "failed"]
    assert "max_tool_calls" in calls[1]["error"]["message"]
    assert mcp_server.counts() == {"add": 1}


def test_registered_server_by_label_and_by_route(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, monkeypatch
) -> None:
    from responses_api.models import ModelRoute, Tenant
    from tool_registry.models import McpServer

    monkeypatch.setenv("SHOP_MCP_TOKEN", f"Bearer {mcp_server.token}")
    server = McpServer(
        label="shop",
        url=mcp_server.url,
        headers_env={"Authorization": "SHOP_MCP_TOKEN"},
        approval="per_tool",
        approval_tools=["lookup_order"],
        allowed_tools=["add", "lookup_order"],
    )
    server.full_clean()
    server.save()
    # By label: the registry brings URL and credentials; the request cannot loosen approval.
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[call("add", {"a": 5, "b": 5}, "c1"), call("lookup_order", {"order_id": "Z"}, "c2")]),
        Reply(text="10"),
    )
    client = gateway.openai()
    resp = client.responses.create(
        model=MODEL, input="x", tools=[{"type": "mcp", "server_label": "shop", "require_approval": "never"}]
    )
    assert [o.type for o in resp.output] == ["mcp_list_tools", "mcp_call", "mcp_approval_request"]
    assert resp.output[1].output == "10"
    assert mcp_server.counts() == {"add": 1}
    assert [t.name for t in resp.output[0].tools] == ["add", "lookup_order"]  # the admin's allowed_tools
    server.refresh_from_db()
    assert {t["name"] for t in server.tools_cache} == {"add", "lookup_order", "slow"}
    fetched_at = server.tools_fetched_at
    # By route: every request to the model gets the server, without naming it; the listing
    # comes from the registry's cache (fresh for cache_seconds), not from the server.
    server.routes.add(ModelRoute.objects.get(name=MODEL))
    gateway_module_clear()
    scripted.enqueue(MODEL, Reply(text="hello"))
    plain = client.responses.create(model=MODEL, input="hi")
    assert plain.output[0].type == "mcp_list_tools" and plain.output[0].server_label == "shop"
    assert [(t.type, t.server_label) for t in plain.tools] == [("mcp", "shop")]
    assert {t["function"]["name"] for t in scripted.requests[-1].body["tools"]} == {"add", "lookup_order"}
    server.refresh_from_db()
    assert server.tools_fetched_at == fetched_at
    # Another tenant's key does not see a server restricted to acme.
    server.tenants.add(Tenant.objects.get(name="acme"))
    from tests.support.harness import make_key

    other, _ = make_key(tenant="other")
    gateway_module_clear()
    with gateway.http(key=other) as http:
        r = http.post(
            "/v1/responses", json={"model": MODEL, "input": "x", "tools": [{"type": "mcp", "server_label": "shop"}]}
        )
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].server_label"


def gateway_module_clear() -> None:
    from responses_api.orchestration import toolplan

    toolplan.clear_cache()


def test_mcp_on_a_background_worker(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, worker
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 3, "b": 4}, "c1")]), Reply(text="7"))
    client = gateway.openai()
    started = client.responses.create(model=MODEL, input="3+4", tools=[adhoc(mcp_server)], background=True)
    import time

    deadline = time.monotonic() + 30
    resp = started
    while resp.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        resp = client.responses.retrieve(started.id)
    assert resp.status == "completed", resp
    assert [o.type for o in resp.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert resp.output[1].output == "7"
    assert mcp_server.counts() == {"add": 1}


def test_openai_sdk_stream_helper_accumulates_mcp_items(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 6, "b": 7}, "c1")]), Reply(text="13"))
    wire: list[bytes] = []
    client = gateway.openai(http_client=httpx.Client(transport=_TeeTransport(wire)))
    with client.responses.stream(model=MODEL, input="6+7", tools=[adhoc(mcp_server)]) as stream_:
        seen = [event.type for event in stream_]
        final = stream_.get_final_response()
    validate_sse(b"".join(wire))  # the bytes the SDK read, through the strict validator
    assert "response.mcp_call.completed" in seen
    assert [o.type for o in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output[1].output == "13" and final.output_text == "13"


class _TeeStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, sink: list[bytes]) -> None:
        self.inner, self.sink = inner, sink

    def __iter__(self):
        for chunk in self.inner:
            self.sink.append(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _TeeTransport(httpx.HTTPTransport):
    """Keeps a copy of every response body the client reads (to validate the SDK's stream)."""

    def __init__(self, sink: list[bytes]) -> None:
        super().__init__()
        self.sink = sink

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)  # a sync transport's
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, self.sink),
            extensions=response.extensions,
        )


def test_a_listing_store_failure_does_not_fail_the_listing(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, monkeypatch
) -> None:
    """Remembering a registered server's listing (for the admin and later requests) is not what
    the request needs: a database error there is logged and the listing serves the response."""
    from django.db import DatabaseError

    from tool_registry import services
    from tool_registry.models import McpServer

    monkeypatch.setenv("SHOP_MCP_TOKEN", f"Bearer {mcp_server.token}")
    McpServer.objects.create(
        label="shop", url=mcp_server.url, headers_env={"Authorization": "SHOP_MCP_TOKEN"}, approval="never"
    )
    gateway_module_clear()

    def broken_store(**kwargs):
        raise DatabaseError("value too long for type character varying(200)")

    monkeypatch.setattr(services, "mcp_listing_store", broken_store)
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 1, "b": 2}, "c1")]), Reply(text="3"))
    _, resp = stream(gateway, {"model": MODEL, "input": "1+2", "tools": [{"type": "mcp", "server_label": "shop"}]})
    assert resp["status"] == "completed", resp
    assert [o["type"] for o in resp["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert resp["output"][0]["error"] is None and resp["output"][1]["output"] == "3"


def test_an_unexpected_listing_failure_is_a_gateway_error_and_the_row_ends_failed(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, monkeypatch
) -> None:
    """A failure of the listing that is not the server's (a bug here) is the protocol's error
    body, never a traceback, and the streamed response's row ends failed, not in_progress."""
    from responses_api.models import Response
    from tool_registry import runner

    async def broken_list_tools(spec, policy):
        raise RuntimeError("a bug in the listing")

    monkeypatch.setattr(runner, "list_tools", broken_list_tools)
    with (
        gateway.http() as http,
        http.stream(
            "POST", "/v1/responses", json={"model": MODEL, "input": "x", "stream": True, "tools": [adhoc(mcp_server)]}
        ) as r,
    ):
        r.read()
    assert r.status_code == 500 and r.headers["content-type"].startswith("application/json"), r.text
    error = r.json()["error"]
    assert error["type"] == "server_error" and "a bug" not in error["message"]
    (row,) = Response.objects.all()
    assert row.status == "failed"
    assert scripted.model_calls == []
