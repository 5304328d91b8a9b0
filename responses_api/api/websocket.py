"""WebSocket mode of `/v1/responses` (Open Responses 2026-04-24).

A connection authenticates once, at the handshake, then carries `response.create` messages,
one response at a time, in order; the server answers each with the same event objects the
SSE stream carries, one JSON text message per event, and no `[DONE]`. The connection keeps
its most recent response in memory (`PriorContext`), so a continuation with
`previous_response_id` needs no chain read, and `store: false` chains continue on the socket.
Errors that stop a turn before its response exists are `{"type": "error", "status", "error"}`
envelopes; the connection stays open.

It is served by the same ASGI entry as the HTTP API and drives the same engine
(`gateway.start_response`, `ResponseRun.events`). Limits (settings): a connection lasts at
most GATEWAY_WS_MAX_SECONDS (60 min, then `websocket_connection_limit_reached`), is closed
after GATEWAY_WS_IDLE_SECONDS without a message, takes messages up to
GATEWAY_MAX_REQUEST_BYTES, and a key holds at most GATEWAY_WS_MAX_CONNECTIONS_PER_KEY
connections per web process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from ..orchestration.assembly import PriorContext
from ..orchestration.gateway import WorkerStarted, start_response
from ..orchestration.outages import unavailable
from ..protocol import jsonlimits
from ..protocol.errors import GatewayError, InvalidRequest, RateLimited, ServerError
from ..protocol.request import parse_create_request
from .auth import Principal, bearer_token, principal_for
from .exception_handlers import dumps

log = logging.getLogger("gateway.websocket")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Fields of the HTTP create call that the WebSocket `response.create` must not carry.
HTTP_ONLY_FIELDS = ("stream", "stream_options", "background")
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

_open_per_key: Counter[int] = Counter()


class _Closed(Exception):
    """The client closed the connection."""


def error_envelope(error: GatewayError) -> dict[str, Any]:
    return {
        "type": "error",
        "status": error.status,
        "error": {"type": error.error_type, "code": error.code, "message": error.message, "param": error.param},
    }


async def serve(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """One WebSocket connection on `/v1/responses`, from the handshake to the close."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
    try:
        principal = await principal_for(bearer_token(headers.get("authorization")))
    except Exception as exc:
        error = exc if isinstance(exc, GatewayError) else (unavailable(exc) or ServerError("Authentication failed."))
        return await _deny(scope, send, error)
    limit = settings.GATEWAY_WS_MAX_CONNECTIONS_PER_KEY
    if _open_per_key[principal.key_id] >= limit:
        return await _deny(
            scope,
            send,
            RateLimited(
                f"This API key already holds {limit} WebSocket connections to this gateway process.",
                code="websocket_connection_limit",
                headers={"Retry-After": "5"},
            ),
        )
    _open_per_key[principal.key_id] += 1
    try:
        await send({"type": "websocket.accept"})
        await Connection(principal, receive, send).run()
    finally:
        _open_per_key[principal.key_id] -= 1
        if not _open_per_key[principal.key_id]:
            del _open_per_key[principal.key_id]


async def _deny(scope: dict[str, Any], send: Send, error: GatewayError) -> None:
    """Refuse the handshake with the protocol's error body where the server can send one."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = dumps(error.body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            *((k.lower().encode(), v.encode()) for k, v in error.headers.items()),
        ]
        await send({"type": "websocket.http.response.start", "status": error.status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})


class Connection:
    def __init__(self, principal: Principal, receive: Receive, send: Send) -> None:
        self.principal = principal
        self._receive = receive
        self._send = send
        self.prior: PriorContext | None = None
        self.evicted: set[str] = set()  # continuing from these again is previous_response_not_found
        self.opened = time.monotonic()
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._closed = asyncio.Event()

    async def run(self) -> None:
        reader = asyncio.ensure_future(self._read())
        try:
            while True:
                text = await self._next_message()
                if text is None:
                    return
                await self._turn(text)
        except _Closed:
            return
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _read(self) -> None:
        """Everything the client sends, queued: messages that arrive while a response runs
        wait their turn; a close is seen at once (and stops the running response)."""
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._closed.set()
                return
            await self._inbox.put(message)

    async def _next_message(self) -> str | None:
        """The next client text, or None once the connection should end (after saying why)."""
        remaining = settings.GATEWAY_WS_MAX_SECONDS - (time.monotonic() - self.opened)
        wait = min(remaining, settings.GATEWAY_WS_IDLE_SECONDS)
        getting = asyncio.ensure_future(self._inbox.get())
        closing = asyncio.ensure_future(self._closed.wait())
        try:
            done, _ = await asyncio.wait({getting, closing}, timeout=max(wait, 0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (getting, closing):
                if not waiter.done():
                    waiter.cancel()
        if getting in done:
            message = getting.result()
            text = message.get("text")
            if text is None and message.get("bytes") is not None:
                text = message["bytes"].decode("utf-8", "replace")
            return text or ""
        if closing in done:
            return None
        if remaining <= settings.GATEWAY_WS_IDLE_SECONDS:
            await self._close_with(
                InvalidRequest(
                    f"This WebSocket connection reached its {settings.GATEWAY_WS_MAX_SECONDS / 60:g}-minute limit; "
                    "open a new one and continue with previous_response_id.",
                    code="websocket_connection_limit_reached",
                )
            )
        else:
            await self._close_with(
                InvalidRequest(
                    f"No message for {settings.GATEWAY_WS_IDLE_SECONDS:g} s: the connection is closed.",
                    code="websocket_idle_timeout",
                )
            )
        return None

    async def _close_with(self, error: GatewayError) -> None:
        await self._emit(error_envelope(error))
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": 1000})

    async def _emit(self, payload: dict[str, Any]) -> None:
        if self._closed.is_set():
            raise _Closed()
        try:
            await self._send({"type": "websocket.send", "text": dumps(payload)})
        except OSError as exc:  # uvicorn: the socket is gone
            raise _Closed() from exc

    async def _turn(self, text: str) -> None:
        previous: str | None = None
        try:
            body = self._create_body(text)
            previous = body.get("previous_response_id") if isinstance(body.get("previous_response_id"), str) else None
            if previous in self.evicted:
                raise InvalidRequest(
                    f"Previous response with id '{previous}' not found: a continuation from it failed "
                    "on this connection.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            # Streamed: the row is written at the start, so the response can be cancelled.
            req = parse_create_request({**body, "stream": True})
            started = await start_response(self.principal, req, body, prior=self.prior)
            if isinstance(started, WorkerStarted):  # a route that runs on workers: relay its log
                from ..engine.eventlog import event_log

                await self._relay(event_log().read(started.response_id), previous)
                return
            await started.connect()
            await self._relay(started.events(), previous, run=started)
        except _Closed:
            raise
        except Exception as exc:
            if isinstance(exc, GatewayError):
                error = exc
            else:
                error = unavailable(exc) or ServerError("The gateway failed to handle this request.")
                if error.status == 500:
                    log.exception("websocket turn failed")
            self._evict(previous)
            await self._emit(error_envelope(error))

    def _create_body(self, text: str) -> dict[str, Any]:
        if len(text.encode()) > settings.GATEWAY_MAX_REQUEST_BYTES:
            raise InvalidRequest(
                f"The message is larger than this gateway accepts ({settings.GATEWAY_MAX_REQUEST_BYTES} bytes).",
                code="request_too_large",
            )
        try:
            message = jsonlimits.loads(text)
        except jsonlimits.JsonTooDeep as exc:
            raise InvalidRequest(f"The message {exc}; this gateway accepts at most {exc.limit}.") from None
        except ValueError as exc:
            raise InvalidRequest(f"The message is not valid JSON: {exc}.") from None
        if not isinstance(message, dict) or message.get("type") != "response.create":
            raise InvalidRequest("Expected a message of type 'response.create'.", param="type")
        for field in HTTP_ONLY_FIELDS:
            if field in message:
                raise InvalidRequest(
                    f"'{field}' is not allowed in WebSocket mode: every response streams over the socket.", param=field
                )
        return {k: v for k, v in message.items() if k != "type"}

    async def _relay(self, events: Any, previous: str | None, run: Any = None) -> None:
        """Send a response's events; a client that goes away cancels it."""
        final: dict[str, Any] | None = None
        stream = events.__aiter__()
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            while True:
                step = asyncio.ensure_future(stream.__anext__())
                await asyncio.wait({step, closed}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():  # the client closed mid-response: stop it (stored cancelled)
                    step.cancel()
                    with contextlib.suppress(BaseException):
                        await step
                    raise _Closed()
                try:
                    event = step.result()
                except StopAsyncIteration:
                    break
                await self._emit(event)
                if event["type"] in TERMINAL:
                    final = event["response"]
        finally:
            closed.cancel()
            if run is not None or final is None:
                with contextlib.suppress(BaseException):
                    await stream.aclose()
        if final is None or final["status"] not in ("completed", "incomplete"):
            self._evict(previous)
            return
        if run is not None:
            self.prior = PriorContext(
                final["id"], run.job.context + run.response["output"], stored=bool(final.get("store", True))
            )
        else:  # run by a worker (always stored): continuations read the chain from the database
            self.prior = None

    def _evict(self, response_id: str | None) -> None:
        if response_id is None:
            return
        self.evicted.add(response_id)
        if self.prior is not None and self.prior.response_id == response_id:
            self.prior = None
