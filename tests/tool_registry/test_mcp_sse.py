"""MCP servers that speak only the older HTTP+SSE transport: the `mcp` package's MCPServer (what
was FastMCP) in SSE mode, in a subprocess, used by ad-hoc and registered MCP tools. The gateway
finds the transport by the specification's backwards-compatibility procedure (POST; on 405, GET
for the event stream) once per server URL."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.harness import MODEL, Gateway, McpServerProcess, call
from tests.support.upstream import Reply, ScriptedUpstream
from tests.tool_registry.test_mcp import failed_dependency, gateway_module_clear, stream

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def sse_process() -> Iterator[McpServerProcess]:
    server = McpServerProcess(token="sse-secret", sse=True)
    yield server
    server.stop()


@pytest.fixture
def sse_server(sse_process: McpServerProcess, settings) -> McpServerProcess:
    from tool_registry import mcp_client as mcp
    from tool_registry import runner

    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1"]
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{sse_process.port}"]
    sse_process.reset()
    runner._adhoc_listings.clear()
    getattr(mcp, "_transports", {}).clear()  # the transport each URL answered on, remembered
    return sse_process


def sse_tool(server: McpServerProcess, **extra) -> dict:
    return {
        "type": "mcp",
        "server_label": "m",
        "server_url": server.url,
        "headers": {"Authorization": f"Bearer {server.token}"},
        "require_approval": "never",
        **extra,
    }


def test_list_and_call_over_sse_probing_the_transport_once(
    gateway: Gateway, scripted: ScriptedUpstream, sse_server: McpServerProcess
) -> None:
    assert sse_server.url.endswith("/sse")
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 2, "b": 40}, "c1")]), Reply(text="It is 42."))
    raw, resp = stream(gateway, {"model": MODEL, "input": "2+40?", "tools": [sse_tool(sse_server)]})
    assert resp["status"] == "completed"
    assert [o["type"] for o in resp["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert resp["output"][0]["error"] is None
    assert {t["name"] for t in resp["output"][0]["tools"]} == {"add", "lookup_order", "slow"}
    assert resp["output"][1]["output"] == "42" and resp["output"][1]["error"] is None
    assert b"response.mcp_call.completed" in raw
    # The streamable-HTTP probe (the SDK's POSTs: its `server/discover`, then `initialize`) is
    # the first session's only: the listing's fallback found SSE, and the call went straight to
    # it, as does the next response's listing (no listing cache here) and call.
    counts = sse_server.counts()
    probes = counts.pop("probes")
    assert counts == {"add": 1} and 1 <= probes <= 2
    from tool_registry import runner

    runner._adhoc_listings.clear()
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup_order", {"order_id": "A7"}, "c1")]), Reply(text="ok"))
    _, again = stream(gateway, {"model": MODEL, "input": "A7?", "tools": [sse_tool(sse_server)]})
    assert again["output"][1]["output"] == "order A7: shipped"
    assert sse_server.counts() == {"add": 1, "lookup_order": 1, "probes": probes}


def test_approvals_and_max_tool_calls_over_sse(
    gateway: Gateway, scripted: ScriptedUpstream, sse_server: McpServerProcess
) -> None:
    tools = [sse_tool(sse_server, require_approval="always")]
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 20, "b": 22}, "c1")]))
    _, first = stream(gateway, {"model": MODEL, "input": "20+22?", "tools": tools})
    assert [o["type"] for o in first["output"]] == ["mcp_list_tools", "mcp_approval_request"]
    request = first["output"][1]
    probes = sse_server.counts()["probes"]
    assert sse_server.counts() == {"probes": probes}  # nothing ran before approval
    scripted.enqueue(MODEL, Reply(text="42."))
    _, second = stream(
        gateway,
        {
            "model": MODEL,
            "previous_response_id": first["id"],
            "tools": tools,
            "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}],
        },
    )
    assert [o["type"] for o in second["output"]] == ["mcp_call", "message"]
    assert second["output"][0]["output"] == "42"
    assert sse_server.counts() == {"add": 1, "probes": probes}

    scripted.enqueue(
        MODEL, Reply(tool_calls=[call("add", {"a": 1, "b": 1}, "c1"), call("add", {"a": 2, "b": 2}, "c2")])
    )
    _, bounded = stream(gateway, {"model": MODEL, "input": "x", "tools": [sse_tool(sse_server)], "max_tool_calls": 1})
    assert bounded["status"] == "incomplete" and bounded["incomplete_details"]["reason"] == "max_tool_calls"
    assert [c["status"] for c in bounded["output"] if c["type"] == "mcp_call"] == ["completed", "failed"]
    assert sse_server.counts() == {"add": 2, "probes": probes}


def test_a_registered_sse_server(
    gateway: Gateway, scripted: ScriptedUpstream, sse_server: McpServerProcess, monkeypatch
) -> None:
    from tool_registry.models import McpServer

    monkeypatch.setenv("SSE_MCP_TOKEN", f"Bearer {sse_server.token}")
    server = McpServer(
        label="sse", url=sse_server.url, headers_env={"Authorization": "SSE_MCP_TOKEN"}, approval="never"
    )
    server.full_clean()
    server.save()
    gateway_module_clear()
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 5, "b": 5}, "c1")]), Reply(text="10"))
    _, resp = stream(gateway, {"model": MODEL, "input": "x", "tools": [{"type": "mcp", "server_label": "sse"}]})
    assert [o["type"] for o in resp["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert resp["output"][1]["output"] == "10"
    counts = sse_server.counts()
    assert counts["add"] == 1 and counts["probes"] >= 1


def test_an_sse_endpoint_off_the_checked_origin_is_refused(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    """The `endpoint` an HTTP+SSE server hands back passes the egress policy like its URL: one
    pointing at another loopback port (loopback is not allowed, only the server's own port) is
    refused, and nothing is sent there."""
    hits: list[str] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    elsewhere = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    target = f"http://127.0.0.1:{elsewhere.server_address[1]}/messages/?session_id=s1"

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"event: endpoint\r\ndata: {target}\r\n\r\n".encode())
            self.wfile.flush()
            time.sleep(2)

        def log_message(self, *args: object) -> None:
            pass

    sse = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    for server in (elsewhere, sse):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    port = sse.server_address[1]
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{port}"]
    tool = {"type": "mcp", "server_label": "evil", "server_url": f"http://127.0.0.1:{port}/sse"}
    try:
        error = failed_dependency(gateway, {"model": MODEL, "input": "?", "tools": [tool]}, "evil")
    finally:
        sse.shutdown()
        elsewhere.shutdown()
    assert "egress refused" in error["message"] and "endpoint" in error["message"], error
    assert hits == []
    assert scripted.model_calls == []


@pytest.mark.parametrize("now_speaks", ["sse", "streamable"])
def test_a_server_that_changed_transport_is_found_again_in_the_same_request(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    sse_server: McpServerProcess,
    mcp_server: McpServerProcess,
    now_speaks: str,
    settings,
) -> None:
    """The gateway remembers the transport a URL answered on; when the server behind it now
    speaks the other one (the remembered one answers 400, 404 or 405), the same session tries
    the other transport: no request fails for it, and the new transport is remembered."""
    from tool_registry import mcp_client as mcp

    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{sse_server.port}", f"127.0.0.1:{mcp_server.port}"]
    server = sse_server if now_speaks == "sse" else mcp_server
    tool = {**sse_tool(server), "headers": {"Authorization": f"Bearer {server.token}"}}
    mcp._transports.clear()
    mcp._transports[server.url] = "streamable" if now_speaks == "sse" else "sse"  # what it spoke before
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 2, "b": 3}, "c1")]), Reply(text="5"))
    _, resp = stream(gateway, {"model": MODEL, "input": "2+3?", "tools": [tool]})
    assert resp["status"] == "completed", resp
    assert resp["output"][0]["error"] is None and resp["output"][1]["output"] == "5"
    assert mcp._transports[server.url] == now_speaks
