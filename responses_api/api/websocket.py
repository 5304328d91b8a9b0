"""WebSocket mode of `/v1/responses` (Open Responses 2026-04-24).

A connection authenticates once, at the handshake, then carries `response.create` messages,
one response at a time, in order; the server answers each with the same event objects the
SSE stream carries, one JSON text message per event, and no `[DONE]`. `response.steer` is
answered `response.steer.failed` (steering is not served yet). The connection keeps
its most recent response in memory (`PriorContext`), so a continuation with
`previous_response_id` needs no chain read, and `store: false` chains continue on the socket.
Errors that stop a turn before its response exists are `{"type": "error", "status", "error"}`
envelopes; the connection stays open.

It is served by the same ASGI entry as the HTTP API and drives the same engine
(`gateway.start_response`, `ResponseRun.events`). Limits (settings): a connection lasts at
most GATEWAY_WS_MAX_SECONDS (60 min, then `websocket_connection_limit_reached`), is closed
after GATEWAY_WS_IDLE_SECONDS without a message, takes messages up to
GATEWAY_MAX_REQUEST_BYTES, holds at most GATEWAY_WS_MAX_QUEUED_MESSAGES / _BYTES behind the
running turn, and a key holds at most GATEWAY_WS_MAX_CONNECTIONS_PER_KEY connections per web
process. Each turn writes an access-log line and counts in the request metrics, as an HTTP
request does; a drain (SIGTERM, orchestration/lifecycle.py) closes the connection after its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from ..domain import Principal
from ..observability import metrics
from ..orchestration import lifecycle
from ..orchestration.assembly import PriorContext
from ..orchestration.gateway import start_response
from ..orchestration.handoff import WorkerStarted
from ..orchestration.worker import follow_log
from ..protocol import jsonlimits
from ..protocol.errors import GatewayError, InvalidRequest, RateLimited, ServerError
from ..protocol.request import parse_create_request
from ..store.outages import unavailable
from .auth import bearer_token, principal_for
from .exception_handlers import dumps

log = logging.getLogger("gateway.websocket")
access_log = logging.getLogger("gateway.access")
# The route label of WebSocket turns in the request metrics (HTTP's are URL patterns).
WEBSOCKET_ROUTE = "v1/responses (websocket)"

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# What OpenAI's clients send on the socket (Codex's responses_websocket.rs, the openai SDK's
# responses_client_event.py). `stream: true` and `stream_options` come with every Codex and
# Agents SDK frame: every response streams here, so they are accepted; what contradicts the
# socket (`stream: false`, `background: true`) is a 400 naming the field.
CREATE = "response.create"
STEER = "response.steer"
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

_open_per_key: Counter[int] = Counter()


class _Closed(Exception):
    """The client closed the connection."""


class _Steer(Exception):
    """A `response.steer` message: answered on its own, never a turn."""

    def __init__(self, message: dict[str, Any]) -> None:
        super().__init__("response.steer")
        self.message = message


def _reconnect_elsewhere() -> GatewayError:
    return InvalidRequest(
        "This gateway process is shutting down: open a new connection and continue with previous_response_id.",
        code="websocket_connection_limit_reached",
    )


def _steer_failed(message: dict[str, Any]) -> dict[str, Any]:
    """The answer to `response.steer` until steering is served: the input handed back."""
    previous = message.get("previous_response_id")
    return {
        "type": "response.steer.failed",
        "sequence_number": 0,
        "error": {
            "type": "invalid_request_error",
            "code": "steering_not_supported",
            "message": "This gateway does not support steering yet: send the input in the next 'response.create'.",
        },
        "steer": {
            "input": message.get("input") if message.get("input") is not None else [],
            "previous_response_id": previous if isinstance(previous, str) else "",
        },
    }


class _TurnRecord:
    """What one WebSocket turn's access-log line and metrics say."""

    __slots__ = (
        "connection_id",
        "started",
        "first_event",
        "kind",
        "model",
        "response_id",
        "status",
        "state",
        "usage",
        "error",
    )

    def __init__(self, connection_id: str) -> None:
        self.connection_id = connection_id
        self.started = time.monotonic()
        self.first_event: float | None = None
        self.kind = "response.create"
        self.model = ""  # set once the request reached a route (no client-typed label otherwise)
        self.response_id: str | None = None
        self.status = 200
        self.state: str | None = None  # the response's final status
        self.usage: dict[str, Any] = {}
        self.error: GatewayError | None = None

    def saw(self, event: dict[str, Any]) -> None:
        if self.first_event is None:
            self.first_event = time.monotonic()
        response = event.get("response")
        if response is not None:
            self.response_id = response["id"]
            if event["type"] in TERMINAL:
                self.state = response["status"]
                self.usage = response.get("usage") or {}

    def fail(self, error: GatewayError) -> None:
        self.status = error.status
        self.error = error

    def log(self) -> None:
        elapsed = time.monotonic() - self.started
        first_byte = self.first_event - self.started if self.first_event is not None else None
        tokens = (self.usage.get("input_tokens"), self.usage.get("output_tokens"))
        if self.kind != "steer":
            metrics.observe_request(WEBSOCKET_ROUTE, self.model, self.status, elapsed, first_byte, tokens)
        fields: dict[str, Any] = {
            "request_id": self.connection_id,
            "method": "WEBSOCKET",
            "path": "/v1/responses",
            "message_type": self.kind,
            "status": self.status,
            "latency_ms": round(elapsed * 1000, 2),
            "first_byte_ms": round(first_byte * 1000, 2) if first_byte is not None else None,
        }
        if self.model:
            fields["model"] = self.model
        if self.response_id is not None:
            fields["response_id"] = self.response_id
        if self.state is not None:
            fields["response_status"] = self.state
            fields["input_tokens"], fields["output_tokens"] = tokens
        if self.error is not None:
            fields["error_code"] = self.error.code
            fields["error_param"] = self.error.param
        access_log.info("websocket turn", extra=fields)


def error_envelope(error: GatewayError) -> dict[str, Any]:
    """The error frame: HTTP's status and body, and its headers (`Retry-After`, `x-ratelimit-*`)
    where it has any: Codex reads them at the top level, the SDK's `ResponseWsError` in `error`."""
    body: dict[str, Any] = {
        "type": error.error_type,
        "code": error.code,
        "message": error.message,
        "param": error.param,
    }
    envelope: dict[str, Any] = {"type": "error", "status": error.status, "error": body}
    if error.headers:
        headers = {name.lower(): value for name, value in error.headers.items()}
        body["headers"] = headers
        envelope["headers"] = headers
    return envelope


def handshake_headers(connection_id: str) -> list[tuple[bytes, bytes]]:
    """The upgrade response's headers. Of those Codex reads, only `x-request-id` means something
    here (the connection's id, on each turn's access-log line too). `openai-model` names the model
    that serves a connection: a gateway routes each turn by its own `model`, so none is known
    at the handshake; `x-reasoning-included` says usage already counts earlier reasoning, which
    holds only where an upstream is given its reasoning back (README, "Clients")."""
    return [(b"x-request-id", connection_id.encode())]


async def serve(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """One WebSocket connection on `/v1/responses`, from the handshake to the close."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
    try:
        principal = await principal_for(bearer_token(headers.get("authorization")))
    except Exception as exc:  # noqa: BLE001 - any failure refuses the connection with an error frame
        error = exc if isinstance(exc, GatewayError) else (unavailable(exc) or ServerError("Authentication failed."))
        return await _deny(scope, send, error)
    if lifecycle.draining():
        return await _deny(scope, send, lifecycle.shutting_down())
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
    metrics.OPEN_WEBSOCKETS.inc()
    connection_id = f"ws_{uuid.uuid4().hex}"
    try:
        await send({"type": "websocket.accept", "headers": handshake_headers(connection_id)})
        await Connection(principal, receive, send, connection_id).run()
    finally:
        metrics.OPEN_WEBSOCKETS.dec()
        _open_per_key[principal.key_id] -= 1
        if not _open_per_key[principal.key_id]:
            del _open_per_key[principal.key_id]


# This connection's handshake was refused on purpose (set in the connection's task, which is
# the task uvicorn logs from once the application returns).
_handshake_refused: contextvars.ContextVar[bool] = contextvars.ContextVar("handshake_refused", default=False)


class _RefusedHandshakeIsNotAnError(logging.Filter):
    """uvicorn (websockets-sansio) logs "ASGI callable returned without completing handshake."
    at ERROR after a handshake refused with an HTTP response, which is the ASGI way to refuse
    one: a wrong key or a full server is the client's business, not an alert for operators.
    The same line for any other connection (a real bug) still gets through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_handshake_refused.get() and record.msg == "ASGI callable returned without completing handshake.")


logging.getLogger("uvicorn.error").addFilter(_RefusedHandshakeIsNotAnError())


async def _deny(scope: dict[str, Any], send: Send, error: GatewayError) -> None:
    """Refuse the handshake with the protocol's error body where the server can send one."""
    _handshake_refused.set(True)
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
    def __init__(self, principal: Principal, receive: Receive, send: Send, connection_id: str = "") -> None:
        self.connection_id = connection_id
        self.principal = principal
        self._receive = receive
        self._send = send
        self.prior: PriorContext | None = None
        self.evicted: set[str] = set()  # continuing from these again is previous_response_not_found
        self.opened = time.monotonic()
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queued_bytes = 0  # of the messages in the inbox
        self._closed = asyncio.Event()
        self._draining = asyncio.Event()  # the process is shutting down: close after this turn

    def drain(self) -> None:
        """The process is shutting down (lifecycle.py): the running turn may finish, then the
        client is told to reconnect (`websocket_connection_limit_reached`)."""
        self._draining.set()

    async def run(self) -> None:
        lifecycle.track_connection(self)
        reader = asyncio.ensure_future(self._read())
        try:
            while True:
                text = await self._next_message()
                if text is None:
                    return
                await self._turn(text)
                if self._draining.is_set():
                    await self._close_with(_reconnect_elsewhere())
                    return
        except _Closed:
            return
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _read(self) -> None:
        """Everything the client sends, queued: messages that arrive while a response runs
        wait their turn; a close is seen at once (and stops the running response).

        The reader never stops reading (a close must still cancel at once), so the queue is
        bounded instead: past GATEWAY_WS_MAX_QUEUED_MESSAGES or _BYTES a message is refused."""
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._closed.set()
                return
            size = len(message.get("text") or message.get("bytes") or b"")
            if self._inbox.qsize() and (
                self._inbox.qsize() >= settings.GATEWAY_WS_MAX_QUEUED_MESSAGES
                or self._queued_bytes + size > settings.GATEWAY_WS_MAX_QUEUED_BYTES
            ):
                await self._refuse_queued(size)
                continue
            self._queued_bytes += size
            self._inbox.put_nowait(message)

    async def _refuse_queued(self, size: int) -> None:
        error = RateLimited(
            f"Too many messages wait on this connection ({self._inbox.qsize()} messages, {self._queued_bytes} bytes; "
            f"at most {settings.GATEWAY_WS_MAX_QUEUED_MESSAGES} and {settings.GATEWAY_WS_MAX_QUEUED_BYTES} bytes): "
            f"this one ({size} bytes) was dropped. Send the next when a response has ended.",
            code="websocket_queue_full",
            headers={"Retry-After": "1"},
        )
        with contextlib.suppress(_Closed):
            await self._emit(error_envelope(error))

    async def _next_message(self) -> str | None:
        """The next client text, or None once the connection should end (after saying why)."""
        remaining = settings.GATEWAY_WS_MAX_SECONDS - (time.monotonic() - self.opened)
        wait = min(remaining, settings.GATEWAY_WS_IDLE_SECONDS)
        getting = asyncio.ensure_future(self._inbox.get())
        closing = asyncio.ensure_future(self._closed.wait())
        draining = asyncio.ensure_future(self._draining.wait())
        try:
            done, _ = await asyncio.wait(
                {getting, closing, draining}, timeout=max(wait, 0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in (getting, closing, draining):
                if not waiter.done():
                    waiter.cancel()
        if getting in done:
            message = getting.result()
            self._queued_bytes -= len(message.get("text") or message.get("bytes") or b"")
            text = message.get("text")
            if text is None and message.get("bytes") is not None:
                text = message["bytes"].decode("utf-8", "replace")
            return text or ""
        if closing in done:
            return None
        if draining in done:
            await self._close_with(_reconnect_elsewhere())
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
        """One client message: a response (its events, or an error envelope), or a steer's answer.

        Each turn is observed like an HTTP request: one access-log line and the same metrics."""
        turn = _TurnRecord(self.connection_id)
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
            turn.model = req.model
            if isinstance(started, WorkerStarted):  # a route that runs on workers: relay its log
                await self._relay(follow_log(started.response_id), previous, turn)
                return
            await started.connect()
            await self._relay(started.events(), previous, turn, run=started)
        except _Steer as steer:
            turn.kind = "steer"
            await self._emit(_steer_failed(steer.message))
        except _Closed:
            turn.status = 499
            raise
        except Exception as exc:
            if isinstance(exc, GatewayError):
                error = exc
            else:
                error = unavailable(exc) or ServerError("The gateway failed to handle this request.")
                if error.status == 500:
                    log.exception("websocket turn failed")
            turn.fail(error)
            self._evict(previous)
            await self._emit(error_envelope(error))
        finally:
            turn.log()

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
        if not isinstance(message, dict):
            raise InvalidRequest("The message must be a JSON object with a 'type'.", param="type")
        kind = message.get("type")
        if kind == STEER:
            raise _Steer(message)
        if kind != CREATE:
            received = repr(kind) if isinstance(kind, str) else "none"
            raise InvalidRequest(
                f"Unknown message type {received[:80]}: this gateway takes '{CREATE}' and '{STEER}'.",
                param="type",
                code="unknown_message_type",
            )
        if message.get("stream") is False:
            raise InvalidRequest(
                "'stream': false is not possible in WebSocket mode: every response streams over the socket.",
                param="stream",
            )
        if message.get("background") is True:
            raise InvalidRequest(
                "'background': true is not available in WebSocket mode; create background responses over HTTP.",
                param="background",
            )
        return {k: v for k, v in message.items() if k not in ("type", "stream", "background")}

    async def _relay(self, events: Any, previous: str | None, turn: _TurnRecord, run: Any = None) -> None:
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
                turn.saw(event)
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
