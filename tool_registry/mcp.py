"""Talking to MCP servers: list their tools and call them, under the egress policy.

Uses the `mcp` package's client over streamable HTTP. Every operation opens its own
short-lived session (connect, discover/initialize, one request, close): a session is tied
to the task that opened it, while a response's calls run in several tasks, and a pooled
session would outlive the request's credentials. The HTTP client under the session sends
every request to an address checked by the egress policy (resolved once per session, so a
DNS rebind cannot move it) and refuses any other origin. No ORM here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from responses_api.protocol import jsonlimits
from responses_api.protocol.mcp import ApprovalPolicy, ToolFilter

from .egress import EgressDenied, EgressPolicy, IPAddress, literal_address, parse_url, resolve_checked
from .executors import MAX_OUTPUT_CHARS

log = logging.getLogger("gateway.mcp")


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One server as a run sees it: where, with which credentials, under which rules."""

    label: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    allowed: ToolFilter | None = None
    approval: ApprovalPolicy = ApprovalPolicy("always")
    timeout: float = 30.0
    registry_id: int | None = None  # None: declared ad hoc by the request
    description: str | None = None
    cache_seconds: float = 300.0
    defer_loading: bool = False  # its tools are offered only once found with tool search

    def allows(self, name: str, annotations: dict[str, Any] | None) -> bool:
        return self.allowed is None or self.allowed.admits(name, annotations)


class McpUnavailable(Exception):
    """The server could not be used; `error` is the item's error object (OpenAI's shape)."""

    def __init__(self, message: str, error: dict[str, Any]) -> None:
        super().__init__(message)
        self.message = message
        self.error = error


@dataclass(frozen=True, slots=True)
class CallOutcome:
    output: str | None
    error: dict[str, Any] | None


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Every request goes to one checked address of one origin; any other origin is refused."""

    def __init__(self, scheme: str, host: str, port: int, address: IPAddress) -> None:
        self.origin = (scheme, host.rstrip(".").lower(), port)
        self.ip_host = str(address)
        self.host_header = host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"
        self.sni = host.rstrip(".") if scheme == "https" and literal_address(host) is None else None
        self.inner = httpx2.AsyncHTTPTransport(retries=0, trust_env=False)
        # The status of an answer that is not MCP (an error, or a redirect this client does not
        # follow): the SDK would report either as a JSON-RPC error, hiding what the server said.
        self.error_status: int | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        if (url.scheme, url.host.rstrip(".").lower(), port) != self.origin:
            raise httpx2.ConnectError(f"egress refused: {url.host} is not this MCP server's origin")
        request.url = url.copy_with(host=self.ip_host)
        request.headers["Host"] = self.host_header
        if self.sni:
            request.extensions = {**request.extensions, "sni_hostname": self.sni}
        response = await self.inner.handle_async_request(request)
        if response.status_code >= 300 and request.method != "DELETE":
            self.error_status = response.status_code
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _failure(exc: BaseException, spec: McpServerSpec) -> McpUnavailable:
    """An exception from a session, as the error object an mcp_call/mcp_list_tools carries."""
    exc = _leaf(exc)
    if isinstance(exc, McpUnavailable):
        return exc
    if isinstance(exc, EgressDenied):
        message = f"egress refused for MCP server '{spec.label}': {exc}"
        return McpUnavailable(message, {"type": "http_error", "code": 403, "message": message})
    if isinstance(exc, MCPError):
        # The server's own words stay in the log: what a client sees never echoes a remote body.
        log.warning("MCP server %r answered JSON-RPC error %s: %.300s", spec.label, exc.code, exc.error.message)
        message = f"MCP server '{spec.label}' answered JSON-RPC error {exc.code}"
        return McpUnavailable(message, {"type": "mcp_protocol_error", "code": exc.code, "message": message})
    if isinstance(exc, httpx2.HTTPStatusError):
        code = exc.response.status_code
        message = f"MCP server '{spec.label}' answered HTTP {code}"
        return McpUnavailable(message, {"type": "http_error", "code": code, "message": message})
    if isinstance(exc, (TimeoutError, httpx2.TimeoutException)):
        message = f"MCP server '{spec.label}' did not answer within {spec.timeout:g} s"
        return McpUnavailable(message, {"type": "http_error", "code": 504, "message": message})
    log.warning("MCP server %r failed: %s: %.300s", spec.label, type(exc).__name__, exc)
    message = f"MCP server '{spec.label}' could not be reached or did not speak MCP"
    return McpUnavailable(message, {"type": "http_error", "code": 502, "message": message})


@asynccontextmanager
async def _session(spec: McpServerSpec, policy: EgressPolicy) -> AsyncIterator[Client]:
    scheme, host, port, _ = parse_url(spec.url)
    addresses = await resolve_checked(host, port, policy)
    transport = _PinnedTransport(scheme, host, port, addresses[0])
    http = httpx2.AsyncClient(
        transport=transport,
        headers={"user-agent": "open-responses-gateway", **spec.headers},
        timeout=httpx2.Timeout(spec.timeout),
        follow_redirects=False,
    )
    try:
        async with http:
            client = Client(
                streamable_http_client(spec.url, http_client=http), cache=None, read_timeout_seconds=spec.timeout
            )
            async with client:
                yield client
    except Exception as exc:
        code = transport.error_status
        if code is None or isinstance(_leaf(exc), (McpUnavailable, TimeoutError)):
            raise
        message = f"MCP server '{spec.label}' answered HTTP {code}"
        if code < 400:
            # Following it would leave the origin the egress policy checked (and may carry the
            # server's credentials elsewhere): the operator or client registers the final URL.
            message += " (a redirect: MCP servers are called at their own URL; give the URL it redirects to)"
        raise McpUnavailable(message, {"type": "http_error", "code": code, "message": message}) from None


def _tool_dict(tool: Any) -> dict[str, Any]:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    return jsonlimits.storable(
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "annotations": annotations,
        }
    )


async def list_tools(spec: McpServerSpec, policy: EgressPolicy) -> list[dict[str, Any]]:
    """Every tool the server lists (all pages), as mcp_list_tools items carry them."""

    async def fetch() -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        async with _session(spec, policy) as client:
            cursor: str | None = None
            for _ in range(100):  # a server that pages forever is cut off
                page = await client.list_tools(cursor=cursor)
                tools += [_tool_dict(t) for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
        return tools

    try:
        return await asyncio.wait_for(fetch(), spec.timeout)
    except Exception as exc:  # noqa: BLE001 - any failure of the server becomes an McpUnavailable with its reason
        raise _failure(exc, spec) from None


def _content_text(block: Any) -> str:
    if getattr(block, "type", None) == "text":
        return block.text
    return json.dumps(block.model_dump(by_alias=True, exclude_none=True), default=str)


def _clip(text: str) -> str:
    text = jsonlimits.storable_text(text)
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "…[truncated]"


async def call_tool(spec: McpServerSpec, policy: EgressPolicy, name: str, arguments: str) -> CallOutcome:
    """Run one call; every failure becomes the item's error, never an exception."""
    try:
        parsed = jsonlimits.loads(arguments or "{}")
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        message = f"the arguments for '{name}' must be a JSON object"
        return CallOutcome(None, {"type": "mcp_protocol_error", "code": -32602, "message": message})

    async def run() -> Any:
        async with _session(spec, policy) as client:
            return await client.call_tool(name, parsed)

    started = time.monotonic()
    try:
        result = await asyncio.wait_for(run(), spec.timeout)
    except Exception as exc:  # noqa: BLE001 - any failure of the call becomes an outcome the model hears about
        failure = _failure(exc, spec)
        log.info(
            "mcp call %s/%s failed after %.0f ms: %s",
            spec.label,
            name,
            (time.monotonic() - started) * 1000,
            failure.message,
        )
        return CallOutcome(None, failure.error)
    if result.is_error:
        content = jsonlimits.storable([block.model_dump(by_alias=True, exclude_none=True) for block in result.content])
        return CallOutcome(None, {"type": "mcp_tool_execution_error", "content": content})
    if result.content:
        text = "\n".join(_content_text(b) for b in result.content)
    else:
        text = json.dumps(result.structured_content, default=str)
    return CallOutcome(_clip(text), None)
