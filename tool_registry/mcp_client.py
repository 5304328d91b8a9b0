"""Talking to MCP servers: list their tools and call them, under the egress policy.

Uses the `mcp` package's clients over streamable HTTP or, for servers that only speak it, the
older HTTP+SSE transport: found by the MCP specification's backwards-compatibility procedure
(POST first; on 400, 404 or 405, GET for the event stream) and remembered per server URL, so
each later session goes straight to the transport that worked (and, should that one now be
answered 400, 404 or 405, tries the other in the same session: the server changed). Every operation opens its own
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
import re
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from responses_api.protocol import jsonlimits
from responses_api.protocol.mcp_tools import ApprovalPolicy, ToolFilter

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
    # The request's own declaration (`tools[i]`); None: attached by the route. A listing of a
    # server the request names that fails, fails the request (424) before any model call.
    param: str | None = None

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


class EndpointRefused(httpx2.SSEError):
    """An HTTP+SSE server named a message endpoint off the origin the egress policy checked.

    An SSEError, because the SDK's SSE reader lets only that kind out before the endpoint is
    known (anything else it would hand to a reader that does not exist yet, and wait)."""


# An SSE event ends at a blank line, with any of the three line ends.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_MAX_UNTIL_ENDPOINT = 64 * 1024  # the endpoint event comes first; a stream that withholds it is cut off


class _EndpointChecked(httpx2.AsyncByteStream):
    """An HTTP+SSE event stream whose `endpoint` event is checked before the SDK reads it: the
    URL the server hands back must be on the origin the egress policy checked and the client
    is pinned to (requests anywhere else are refused too, but refusing here ends the session
    at once, with the reason, instead of at its timeout)."""

    def __init__(self, inner: Any, url: str, origin: tuple[str, str, int]) -> None:
        self.inner, self.url, self.origin = inner, url, origin

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending: bytes | None = b""
        async for chunk in self.inner:
            if pending is not None:
                pending += chunk
                while pending is not None and (end := _EVENT_END.search(pending)):
                    block, pending = pending[: end.start()], pending[end.end() :]
                    if self._is_endpoint(block):
                        pending = None
                if pending is not None and len(pending) > _MAX_UNTIL_ENDPOINT:
                    raise EndpointRefused("the MCP server's event stream did not name its message endpoint")
            yield chunk

    def _is_endpoint(self, block: bytes) -> bool:
        lines = block.decode("utf-8", "replace").splitlines()
        event = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        if event != "endpoint":
            return False
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        endpoint = urljoin(self.url, data.strip())
        try:
            scheme, host, port, _ = parse_url(endpoint)
        except EgressDenied as exc:
            raise EndpointRefused(f"its message endpoint was refused: {exc}") from None
        if (scheme, host.rstrip(".").lower(), port) != self.origin:
            raise EndpointRefused(
                f"its message endpoint {scheme}://{host}:{port} is not on the origin the egress policy checked"
            )
        return True

    async def aclose(self) -> None:
        await self.inner.aclose()


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
        elif request.method == "GET" and response.headers.get("content-type", "").startswith("text/event-stream"):
            # HTTP+SSE: the stream names where requests go; it must stay on this origin.
            response.stream = _EndpointChecked(response.stream, str(url), self.origin)
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
    if isinstance(exc, (EgressDenied, EndpointRefused)):
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


# The transport each server URL answered on ("streamable" or "sse"), found once and then used
# directly. Bounded: ad-hoc URLs come from clients; a forgotten one is found again.
_transports: dict[str, str] = {}
_TRANSPORTS_KEPT = 4096
# What a server that speaks only HTTP+SSE answers the POST of streamable HTTP (the
# specification's backwards-compatibility procedure).
_NOT_STREAMABLE = frozenset({400, 404, 405})
_OTHER = {"streamable": "sse", "sse": "streamable"}


def _connector(kind: str, spec: McpServerSpec, transport: _PinnedTransport) -> tuple[httpx2.AsyncClient | None, Any]:
    """(the HTTP client to close, the SDK transport) of one session over `kind`."""
    headers = {"user-agent": "open-responses-gateway", **spec.headers}
    if kind == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
            base: dict[str, str] = headers,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                transport=transport,
                headers={**base, **(headers or {})},
                timeout=timeout or httpx2.Timeout(spec.timeout),
                auth=auth,
                follow_redirects=False,
            )

        # The SDK opens (and closes) the client; its read timeout spans waits between events.
        return None, sse_client(
            spec.url, timeout=spec.timeout, sse_read_timeout=spec.timeout, httpx_client_factory=factory
        )
    http = httpx2.AsyncClient(
        transport=transport, headers=headers, timeout=httpx2.Timeout(spec.timeout), follow_redirects=False
    )
    return http, streamable_http_client(spec.url, http_client=http)


async def _open(kind: str, spec: McpServerSpec, transport: _PinnedTransport, stack: AsyncExitStack) -> Client:
    http, sdk_transport = _connector(kind, spec, transport)
    if http is not None:
        await stack.enter_async_context(http)
    client = Client(sdk_transport, cache=None, read_timeout_seconds=spec.timeout)
    return await stack.enter_async_context(client)


def _http_failure(spec: McpServerSpec, code: int) -> McpUnavailable:
    message = f"MCP server '{spec.label}' answered HTTP {code}"
    if code < 400:
        # Following it would leave the origin the egress policy checked (and may carry the
        # server's credentials elsewhere): the operator or client registers the final URL.
        message += " (a redirect: MCP servers are called at their own URL; give the URL it redirects to)"
    return McpUnavailable(message, {"type": "http_error", "code": code, "message": message})


@asynccontextmanager
async def _session(spec: McpServerSpec, policy: EgressPolicy) -> AsyncIterator[Client]:
    scheme, host, port, _ = parse_url(spec.url)
    addresses = await resolve_checked(host, port, policy)
    known = _transports.get(spec.url)
    # The remembered transport first; the other one if it is refused (the server changed), in
    # this same session, so a server that moved costs no failed request.
    kinds = [known, _OTHER[known]] if known else ["streamable", "sse"]
    transport = _PinnedTransport(scheme, host, port, addresses[0])
    refused: dict[str, int] = {}  # transport -> the 400, 404 or 405 it was answered
    try:
        async with AsyncExitStack() as stack:
            for index, kind in enumerate(kinds):
                transport = _PinnedTransport(scheme, host, port, addresses[0])
                attempt = AsyncExitStack()
                try:
                    client = await _open(kind, spec, transport, attempt)
                except Exception:
                    await attempt.aclose()
                    status = transport.error_status
                    if status in _NOT_STREAMABLE:
                        refused[kind] = status
                        if index + 1 < len(kinds):
                            _transports.pop(spec.url, None)  # whatever was remembered no longer holds
                            continue  # the other transport (a new URL: perhaps an HTTP+SSE server)
                        if "streamable" in refused:
                            # Neither transport is served here: report what the POST was answered.
                            raise _http_failure(spec, refused["streamable"]) from None
                    raise
                stack.push_async_exit(attempt)
                break
            if known != kind:
                if len(_transports) >= _TRANSPORTS_KEPT:
                    _transports.pop(next(iter(_transports)))
                _transports[spec.url] = kind
            yield client
    except Exception as exc:
        code = transport.error_status
        if code is None or isinstance(_leaf(exc), (McpUnavailable, TimeoutError)):
            raise
        raise _http_failure(spec, code) from None


async def check_egress(spec: McpServerSpec, policy: EgressPolicy) -> None:
    """The egress check a session starts with, alone (McpUnavailable if refused): for what is
    served without a session, a cached listing, which must not reach a caller whose policy
    would not let it connect."""
    try:
        _, host, port, _ = parse_url(spec.url)
        await resolve_checked(host, port, policy)
    except Exception as exc:  # noqa: BLE001 - a refusal (or unresolvable name) becomes the item's error
        raise _failure(exc, spec) from None


def _tool_dict(tool: Any) -> dict[str, Any]:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    stored: dict[str, Any] = jsonlimits.storable(
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "annotations": annotations,
        }
    )
    return stored


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
        text: str = block.text  # mcp's TextContent
        return text
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
