"""A real MCP server for the tests: the `mcp` package's MCPServer (FastMCP, renamed in mcp 2)
over streamable HTTP at /mcp, or with `--sse` over the older HTTP+SSE transport (GET /sse for
the event stream, POST /messages/ for requests).

Run as a subprocess: `python -m tests.support.mcp_server PORT [TOKEN] [--sse]`. It exposes two
tools, `add` and `lookup_order` (plus `slow` to test timeouts), and counts calls:
`GET /counts` answers `{"add": n, ...}`, `POST /counts/reset` clears them. With TOKEN
set, MCP requests must carry `Authorization: Bearer TOKEN` (the headers a registry
entry or an ad-hoc tool supplies).
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp

calls: Counter[str] = Counter()
server = MCPServer("gateway-test-tools")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    calls["add"] += 1
    return a + b


@server.tool(description="Look up an order by its id.")
def lookup_order(order_id: str) -> str:
    calls["lookup_order"] += 1
    if order_id == "missing":
        raise ValueError(f"no order {order_id}")
    return f"order {order_id}: shipped"


@server.tool(description="Sleep for a number of seconds, then answer.")
async def slow(seconds: float) -> str:
    calls["slow"] += 1
    await asyncio.sleep(seconds)
    return "done"


@server.custom_route("/counts", methods=["GET"])
async def counts(request: Request) -> JSONResponse:
    return JSONResponse(dict(calls))


@server.custom_route("/counts/reset", methods=["POST"])
async def reset(request: Request) -> JSONResponse:
    calls.clear()
    return JSONResponse({})


class RequireToken:
    """Bearer-token check on the MCP endpoint (the counters stay open for the tests)."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(("/mcp", "/sse", "/messages")):
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {self.token}".encode():
                response = JSONResponse({"error": "unauthorized"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class CountProbes:
    """Counts the POSTs an HTTP+SSE server gets at its event-stream URL (the streamable-HTTP
    probe of the backwards-compatibility procedure), as `probes` in /counts."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/sse":
            calls["probes"] += 1
        await self.app(scope, receive, send)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--sse"]
    port = int(args[0])
    token = args[1] if len(args) > 1 else ""
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app: ASGIApp
    if "--sse" in sys.argv:
        app = server.sse_app(transport_security=security)
    else:
        app = server.streamable_http_app(transport_security=security)
    if token:
        app = RequireToken(app, token)
    if "--sse" in sys.argv:
        app = CountProbes(app)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
