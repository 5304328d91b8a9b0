"""Ad-hoc MCP URLs come from API clients: the operator's egress allowlist never applies to them.

An internal host the operator allowlisted for its registered tools must stay out of
reach of a `server_url` any key sends; only the explicit ad-hoc allowances
(GATEWAY_MCP_ADHOC_EGRESS_ALLOW, the tenant's own, each optionally per port) open a
private address. A canary server counts every connection it accepts: refused URLs
cost it none. And what an MCP server answered never reaches the client verbatim.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.harness import MODEL, Gateway, McpServerProcess, make_key
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

SECRET = "INTERNAL-ONLY-7f3a"


class Canary:
    """An HTTP server that counts connections and answers every request with a secret body."""

    def __init__(self, status: int = 200, body: bytes = SECRET.encode(), content_type: str = "text/plain") -> None:
        canary = self
        self.connections = 0

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                canary.connections += 1
                super().setup()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_DELETE = do_POST  # noqa: N815 - BaseHTTPRequestHandler's method names

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def canary() -> Iterator[Canary]:
    server = Canary()
    yield server
    server.stop()


def adhoc(url: str, label: str = "s", token: str = "mcp-secret") -> dict:
    return {
        "type": "mcp",
        "server_label": label,
        "server_url": url,
        "require_approval": "never",
        "headers": {"Authorization": f"Bearer {token}"},
    }


def create(gateway: Gateway, tools: list[dict], key: str | None = None) -> tuple[int, dict]:
    with gateway.http(key) as http:
        r = http.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools})
    return r.status_code, r.json()


def test_the_operators_allowlist_does_not_reach_client_urls(
    gateway: Gateway, scripted: ScriptedUpstream, canary: Canary, settings
) -> None:
    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1", "localhost"]  # for the operator's own tools
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = []
    forms = [
        canary.url,
        f"http://localhost:{canary.port}/mcp",
        f"http://[::ffff:127.0.0.1]:{canary.port}/mcp",
        f"http://2130706433:{canary.port}/mcp",
        f"http://0x7f.1:{canary.port}/admin",
        f"http://127.1:{canary.port}/",
    ]
    for url in forms:
        status, body = create(gateway, [adhoc(url)])
        assert status == 400, (url, body)
        assert body["error"]["param"] == "tools[0].server_url"
    assert canary.connections == 0
    assert scripted.requests == []


def test_an_adhoc_allowance_names_host_and_port(
    gateway: Gateway, scripted: ScriptedUpstream, canary: Canary, mcp_server: McpServerProcess, settings
) -> None:
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{mcp_server.port}"]
    scripted.enqueue(MODEL, Reply(text="listed"))
    status, body = create(gateway, [adhoc(mcp_server.url)])
    assert status == 200 and body["output"][0]["type"] == "mcp_list_tools" and not body["output"][0]["error"]
    status, body = create(gateway, [adhoc(canary.url)])  # same host, another port
    assert status == 400 and body["error"]["param"] == "tools[0].server_url"
    assert canary.connections == 0


def test_a_tenants_own_allowance_is_its_own(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, settings
) -> None:
    from responses_api.models import Tenant

    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = []
    Tenant.objects.filter(name="acme").update(mcp_adhoc_egress_allow=[f"127.0.0.1:{mcp_server.port}"])
    other_key, _ = make_key(tenant="other")
    scripted.enqueue(MODEL, Reply(text="listed"))
    status, body = create(gateway, [adhoc(mcp_server.url)])
    assert status == 200 and not body["output"][0]["error"]
    status, body = create(gateway, [adhoc(mcp_server.url)], key=other_key)
    assert status == 400 and body["error"]["param"] == "tools[0].server_url"


@pytest.mark.django_db
def test_tenant_allowance_is_validated_in_the_admin_model() -> None:
    from django.core.exceptions import ValidationError

    from responses_api.models import Tenant

    with pytest.raises(ValidationError, match="mcp_adhoc_egress_allow"):
        Tenant(name="t", mcp_adhoc_egress_allow=["127.1"]).full_clean()
    with pytest.raises(ValidationError, match="mcp_adhoc_egress_allow"):
        Tenant(name="t", mcp_adhoc_egress_allow="10.0.0.0/8").full_clean()
    Tenant(name="t", mcp_adhoc_egress_allow=["mcp.internal:8443", "10.0.0.0/8"]).full_clean()


@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [
        (200, SECRET.encode(), "text/plain"),
        # A JSON-RPC error answering the client's initialize (id 0), as a streamable-HTTP server frames it.
        (
            200,
            b'data: {"jsonrpc": "2.0", "id": 0, "error": {"code": -32001, "message": "' + SECRET.encode() + b'"}}\n\n',
            "text/event-stream",
        ),
        (500, SECRET.encode(), "text/html"),
        (
            200,
            b'data: {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "' + SECRET.encode() + b'"}}\n\n',
            "text/event-stream",
        ),
    ],
)
def test_what_a_server_answered_never_reaches_the_client(
    gateway: Gateway, scripted: ScriptedUpstream, settings, status: int, body: bytes, content_type: str
) -> None:
    server = Canary(status, body, content_type)
    try:
        settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{server.port}"]
        settings.GATEWAY_MCP_TIMEOUT = 2.0  # a server that answers nonsense may leave the client waiting
        scripted.enqueue(MODEL, Reply(text="no tools"))
        with gateway.http() as http:
            raw = http.post(
                "/v1/responses", json={"model": MODEL, "input": "x", "stream": True, "tools": [adhoc(server.url)]}
            )
    finally:
        server.stop()
    # A server the request names that cannot list its tools fails the request (OpenAI's 424).
    assert raw.status_code == 424, raw.text
    assert server.connections >= 1  # it was asked...
    assert SECRET not in raw.text  # ...and nothing it said came back
    assert raw.json()["error"]["type"] == "external_connector_error"


def test_free_port_canary_is_really_refused_without_allowance(gateway: Gateway, settings) -> None:
    """A URL to a private port nobody listens on is refused before any connection attempt."""
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    status, body = create(gateway, [adhoc(f"http://127.0.0.1:{port}/mcp")])
    assert status == 400 and "loopback" in body["error"]["message"]


def test_a_cached_adhoc_listing_is_not_served_to_a_tenant_without_the_allowance(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, settings
) -> None:
    """Tenant A may reach a private MCP server and lists it (the listing is cached for its
    TTL); tenant B, without that allowance, naming the same URL with the same headers within
    the TTL gets an egress refusal, not A's listing out of the shared cache."""
    import asyncio

    from responses_api.mcp.planning import toolset_for
    from responses_api.models import Tenant
    from tool_registry.mcp_client import McpServerSpec, McpUnavailable

    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = []
    Tenant.objects.filter(name="acme").update(mcp_adhoc_egress_allow=[f"127.0.0.1:{mcp_server.port}"])
    _, other_tenant = make_key(tenant="other")
    scripted.enqueue(MODEL, Reply(text="listed"))
    status, body = create(gateway, [adhoc(mcp_server.url, token=mcp_server.token)])
    assert status == 200 and not body["output"][0]["error"], body  # A's listing, now cached

    spec = McpServerSpec(
        label="s",
        url=mcp_server.url,
        headers={"Authorization": f"Bearer {mcp_server.token}"},
        param="tools[0]",
    )

    async def list_as(tenant_id: int) -> list[dict]:
        toolset = await toolset_for("resp_test", ([spec], {}, {}), tenant_id)
        assert toolset is not None
        return await toolset.listing("s")

    with pytest.raises(McpUnavailable, match="egress refused"):
        asyncio.run(list_as(other_tenant))
    # A itself still lists (from the cache or the server).
    assert {t["name"] for t in asyncio.run(list_as(gateway.tenant_id))} == {"add", "lookup_order", "slow"}
