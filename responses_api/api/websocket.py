"""WebSocket mode of `/v1/responses` (Open Responses 2026-04-24; lanes and steering as the openai
SDK 3.57 defines them).

A connection authenticates at the handshake, then carries `response.create` messages, each of
which looks its key up again (auth.py's key cache: a dict look-up), so a key that expires is
refused at once and a revoked or regenerated one within GATEWAY_CACHE_SECONDS, as over HTTP: the
create gets the handshake's 401 as an error frame and the connection closes (policy violation,
1008), its running responses cancelled; each create also gets the key's current limits and budgets;
the server answers each with the same event objects the SSE stream carries, one JSON text
message per event, and no `[DONE]`. Creates run on lanes: those with the same `stream_id` (none:
the default lane) run first in, first out, one after the other; different lanes run at once, and
every event of a named lane's response (and the error frame of its create) echoes its
`stream_id`. Each lane keeps its most recent response in memory (`PriorContext`), so a
continuation with `previous_response_id` needs no chain read, `store: false` chains continue on
the socket, and a lane may continue (fork) another lane's response; a continuation that fails
forgets its parent in its own lane only. A lane also keeps its last model call's context in the
upstream's dialect (protocol/prefix.py), which only its own continuation of its head reuses.
`response.steer` queues user input into a running response (steering.py): the response stops at
a safe boundary (engine/steering.py) and a successor, chained to it, commits the input. Errors
that stop a create before its response exists are `{"type": "error", "status", "error"}`
envelopes; the connection stays open.

It is served by the same ASGI entry as the HTTP API and drives the same engine
(`gateway.start_response`, `ResponseRun.events`); each response is admitted (rate limits,
concurrency slot) as an HTTP request is. Limits (settings): a connection lasts at most
GATEWAY_WS_MAX_SECONDS (60 min, then `websocket_connection_limit_reached`), is closed after
GATEWAY_WS_IDLE_SECONDS without a message while nothing runs, takes messages up to
GATEWAY_MAX_REQUEST_BYTES, holds at most GATEWAY_WS_MAX_QUEUED_MESSAGES / _BYTES of creates
waiting (in all lanes together), runs at most GATEWAY_WS_MAX_ACTIVE_RESPONSES responses at once
(the others wait), names at most GATEWAY_WS_MAX_STREAMS lanes (`websocket_stream_limit_reached`),
queues at most GATEWAY_WS_MAX_PENDING_STEERS steering inputs per response (and _QUEUED_BYTES
of them per connection), and a key holds at
most GATEWAY_WS_MAX_CONNECTIONS_PER_KEY connections per web process. Each create writes an
access-log line and counts in the request metrics, as an HTTP request does; a drain (SIGTERM,
orchestration/lifecycle.py) closes the connection after its running responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from ..domain import Principal
from ..observability import metrics
from ..orchestration import lifecycle
from ..orchestration.assembly import PriorContext
from ..orchestration.gateway import start_response
from ..orchestration.worker import follow_log
from ..protocol import jsonlimits
from ..protocol.errors import AuthenticationFailed, GatewayError, InvalidRequest, RateLimited, ServerError
from ..protocol.prefix import ConvertedPrefix
from ..protocol.request import parse_create_request
from ..protocol.surface import BETA_MESSAGE, CLIENT_EVENTS, beta_requested
from ..store.outages import unavailable
from .auth import bearer_token, principal_for
from .exception_handlers import dumps
from .steering import (
    Steer,
    SteerQueue,
    SteerRefused,
    accepted_event,
    failed_event,
    new_steer,
    parse_steer,
    pending_event,
    required_input,
    successor_body,
    unsupported_reason,
    with_queued_input,
)

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
# The client messages the surface classifies (protocol/surface.py): `response.create` and
# `response.steer`, both served.
CLIENT_MESSAGES = ", ".join(f"'{name}'" for name in CLIENT_EVENTS)
STEER = "response.steer"
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
# A lane's name (the openai SDK's lanes check the same before sending).
STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
# What follows a `"stream_id"` key in a message read without parsing it (peek_stream_id).
_KEY_COLON = re.compile(r"\s*:")
_STREAM_ID_VALUE = re.compile(r'\s*:\s*(?:null|"([A-Za-z0-9_.-]{1,256})")\s*[,}]')
# Ended responses a steer may still name, to say why it is too late (not "not found").
ENDED_REMEMBERED = 256

_open_per_key: Counter[int] = Counter()


def peek_stream_id(text: str) -> tuple[str | None, bool]:
    """The `stream_id` of a message not parsed (refused as too many, too large or not JSON),
    found by scanning for its key: (the id or None for the default lane, whether it could be
    read). Unreadable when a `"stream_id"` key holds no valid id, or several name different ones
    (one may be nested, say in `metadata`: which is the message's own is not told unparsed)."""
    found: set[str | None] = set()
    at = text.find('"stream_id"')
    while at != -1:
        end = at + len('"stream_id"')
        if _KEY_COLON.match(text, end):  # a key, not a string value
            value = _STREAM_ID_VALUE.match(text, end)
            if value is None or len(found) > 8:
                return None, False
            found.add(value.group(1))
        at = text.find('"stream_id"', end)
    if len(found) > 1:
        return None, False
    return (found.pop() if found else None), True


class _Closed(Exception):
    """The client closed the connection."""


def _reconnect_elsewhere() -> GatewayError:
    return InvalidRequest(
        "This gateway process is shutting down: open a new connection and continue with previous_response_id.",
        code="websocket_connection_limit_reached",
    )


class _TurnRecord:
    """What one WebSocket turn's access-log line and metrics say."""

    __slots__ = (
        "connection_id",
        "tenant",
        "stream_id",
        "started",
        "first_event",
        "kind",
        "model",
        "response_id",
        "status",
        "state",
        "usage",
        "error_code",
        "error_param",
        "ignored_fields",
    )

    def __init__(self, connection_id: str, tenant: str, stream_id: str | None = None) -> None:
        self.connection_id = connection_id
        self.tenant = tenant  # as HTTP's line names the key's tenant
        self.stream_id = stream_id
        self.started = time.monotonic()
        self.first_event: float | None = None
        self.kind = "response.create"
        self.model = ""  # set once the request reached a route (no client-typed label otherwise)
        self.response_id: str | None = None
        self.status = 200
        self.state: str | None = None  # the response's final status
        self.usage: dict[str, Any] = {}
        self.error_code: str | None = None
        self.error_param: str | None = None
        # Request fields accepted but not applied (HTTP names them in x-gateway-ignored-fields;
        # a WebSocket turn has no headers, so its access-log line does).
        self.ignored_fields: list[str] = []

    def saw(self, event: dict[str, Any]) -> None:
        if self.first_event is None:
            self.first_event = time.monotonic()
        response = event.get("response")
        if response is not None:
            self.response_id = response["id"]
            if event["type"] in TERMINAL:
                self.state = response["status"]
                self.usage = response.get("usage") or {}
                failure = response.get("error")
                if failure and self.error_code is None:  # why it failed, as HTTP's line says
                    self.error_code = failure.get("code")
        elif event["type"] == "error":  # a streamed failure's error event (a worker's log)
            self.error_code = event.get("code")
            self.error_param = event.get("param")

    def fail(self, error: GatewayError) -> None:
        self.status = error.status
        self.error_code, self.error_param = error.code, error.param

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
            "tenant": self.tenant,
        }
        if self.stream_id is not None:
            fields["stream_id"] = self.stream_id
        if self.model:
            fields["model"] = self.model
        if self.response_id is not None:
            fields["response_id"] = self.response_id
        if self.state is not None:
            fields["response_status"] = self.state
            fields["input_tokens"], fields["output_tokens"] = tokens
        if self.ignored_fields:
            fields["ignored_fields"] = self.ignored_fields
        if self.error_code is not None:
            fields["error_code"] = self.error_code
            fields["error_param"] = self.error_param
        access_log.info("websocket turn", extra=fields)


def error_envelope(error: GatewayError, stream_id: str | None = None) -> dict[str, Any]:
    """The error frame: HTTP's status and body, and its headers (`Retry-After`, `x-ratelimit-*`)
    where it has any: Codex reads them at the top level, the SDK's `ResponseWsError` in `error`.
    A create's error on a named lane echoes its `stream_id`."""
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
    if stream_id is not None:
        envelope["stream_id"] = stream_id
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
        raw_key = bearer_token(headers.get("authorization"))
        principal = await principal_for(raw_key)
    except Exception as exc:  # noqa: BLE001 - any failure refuses the connection with an error frame
        error = exc if isinstance(exc, GatewayError) else (unavailable(exc) or ServerError("Authentication failed."))
        return await _deny(scope, send, error)
    if lifecycle.draining():
        return await _deny(scope, send, lifecycle.shutting_down())
    if beta_requested(scope.get("query_string", b"").decode("latin-1"), headers.get("openai-beta")):
        return await _deny(scope, send, InvalidRequest(BETA_MESSAGE, param="beta"))
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
        await Connection(principal, receive, send, connection_id, raw_key=raw_key).run()
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


class _Lane:
    """One `stream_id` of a connection (None: the default lane): its creates run first in,
    first out, each after the one before ended; it remembers its most recent response."""

    __slots__ = ("stream_id", "waiting", "task", "prior", "evicted", "held", "converted", "granted", "ready")

    def __init__(self, stream_id: str | None) -> None:
        self.stream_id = stream_id
        self.waiting: deque[_Create] = deque()
        self.task: asyncio.Task[None] | None = None
        # Holds one of the connection's GATEWAY_WS_MAX_ACTIVE_RESPONSES slots for its head create;
        # `ready` is set when a slot it waited for is given to it.
        self.granted = False
        self.ready: asyncio.Future[None] | None = None
        self.prior: PriorContext | None = None  # its most recent response, for continuations
        # Its last model call's context in the upstream's dialect (protocol/prefix.py), for its
        # own next continuation of `prior` only: never another lane's, never another connection's.
        max_items = settings.GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS
        self.converted = ConvertedPrefix(max_items) if max_items > 0 else None
        # Parents a continuation failed from on this lane: not taken from memory again here
        # (a stored one is read from the database; a `store: false` one is gone).
        self.evicted: set[str] = set()
        # Accepted steering input of a response that stopped for client tool output or an
        # approval: it goes first into this lane's continuation of that response.
        self.held: dict[str, list[Steer]] = {}


class _Create:
    """A `response.create` in its lane; `queued` while it counts in the connection's queue bounds
    (it cannot start yet: behind another create of its lane, or waiting for a slot)."""

    __slots__ = ("body", "size", "queued")

    def __init__(self, body: dict[str, Any], size: int) -> None:
        self.body = body
        self.size = size
        self.queued = False


class Connection:
    def __init__(
        self,
        principal: Principal,
        receive: Receive,
        send: Send,
        connection_id: str = "",
        *,
        raw_key: str | None = None,
    ) -> None:
        self.connection_id = connection_id
        self.principal = principal
        # The key of the handshake, looked up again for each create (None: the handshake's
        # principal is used throughout).
        self._raw_key = raw_key
        self._receive = receive
        self._send = send
        self.opened = time.monotonic()
        self._last_activity = self.opened  # the last message, or the end of the last turn
        self._lanes: dict[str | None, _Lane] = {None: _Lane(None)}
        self._named = 0  # distinct named lanes so far (GATEWAY_WS_MAX_STREAMS: never released)
        # Slots for responses running at once, given out as each create is read (not when its
        # lane's task gets to run: a burst read before any lane started would count as queued).
        self._free_slots = settings.GATEWAY_WS_MAX_ACTIVE_RESPONSES
        self._wanting: deque[_Lane] = deque()  # lanes whose head create waits for a slot, in order
        self._queued_messages = 0  # creates that cannot start yet, across lanes
        self._queued_bytes = 0
        self._steer_bytes = 0  # steering input accepted and not yet committed or returned
        # Responses of this connection a steer may name: running, and recently ended.
        self._steerable: dict[str, SteerQueue] = {}
        # (lane, final status) of the recently ended ones: what a late steer is told.
        self._ended: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
        self._activity = asyncio.Event()
        self._closed = asyncio.Event()
        self._draining = asyncio.Event()  # the process is shutting down: close after the running turns

    def drain(self) -> None:
        """The process is shutting down (lifecycle.py): the running turns may finish, then the
        client is told to reconnect (`websocket_connection_limit_reached`)."""
        self._draining.set()
        self._activity.set()

    @property
    def prior(self) -> PriorContext | None:
        """The default lane's most recent response."""
        return self._lanes[None].prior

    def _busy(self) -> bool:
        return any(lane.task is not None for lane in self._lanes.values())

    def _touch(self) -> None:
        self._last_activity = time.monotonic()
        self._activity.set()

    async def run(self) -> None:
        lifecycle.track_connection(self)
        reader = asyncio.ensure_future(self._read())
        try:
            await self._supervise()
        except _Closed:
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            # Lanes see the close at once (their responses are cancelled) or have ended.
            tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            for lane in self._lanes.values():  # what the lanes converted goes with the connection
                if lane.converted is not None:
                    lane.converted.clear()

    async def _supervise(self) -> None:
        """Until the connection should end: the client closed it, the process drains (after
        the running turns), or, with no turn running, the idle time or the connection's
        lifetime ran out (each said in an error frame before the close)."""
        closing = asyncio.ensure_future(self._closed.wait())
        try:
            while not self._closed.is_set():
                busy = self._busy()
                if self._draining.is_set() and not busy:
                    await self._close_with(_reconnect_elsewhere())
                    return
                now = time.monotonic()
                lifetime = settings.GATEWAY_WS_MAX_SECONDS - (now - self.opened)
                idle = settings.GATEWAY_WS_IDLE_SECONDS - (now - self._last_activity)
                if not busy and lifetime <= 0:
                    await self._close_with(
                        InvalidRequest(
                            f"This WebSocket connection reached its {settings.GATEWAY_WS_MAX_SECONDS / 60:g}-minute "
                            "limit; open a new one and continue with previous_response_id.",
                            code="websocket_connection_limit_reached",
                        )
                    )
                    return
                if not busy and idle <= 0:
                    await self._close_with(
                        InvalidRequest(
                            f"No message for {settings.GATEWAY_WS_IDLE_SECONDS:g} s: the connection is closed.",
                            code="websocket_idle_timeout",
                        )
                    )
                    return
                self._activity.clear()
                woken = asyncio.ensure_future(self._activity.wait())
                try:
                    await asyncio.wait(
                        {woken, closing},
                        timeout=None if busy else max(min(lifetime, idle), 0),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    woken.cancel()
        finally:
            closing.cancel()

    async def _read(self) -> None:
        """Everything the client sends, as it arrives: a steer is answered at once, a create
        joins its lane; a close is seen at once (and stops the running responses).

        The reader never stops reading (a close must still cancel at once), so what waits is
        bounded instead: past GATEWAY_WS_MAX_QUEUED_MESSAGES or _BYTES (creates waiting in all
        lanes together) a message is refused."""
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._closed.set()
                return
            # The idle timer restarts (read when it fires: no wake-up per message).
            self._last_activity = time.monotonic()
            text = message.get("text")
            if text is None:
                raw = message.get("bytes")
                text = raw.decode("utf-8", "replace") if raw is not None else ""
            size = len(message.get("text") or message.get("bytes") or b"")
            if self._queue_full(size):
                # Refused unparsed (a flood costs no parsing), on the lane its stream_id names:
                # read cheaply, it also tells a create that could start at once (never refused
                # as queued) and one past the lane limit (refused as that).
                stream_id, readable = peek_stream_id(text)
                if not readable or self._would_wait(stream_id):
                    with contextlib.suppress(_Closed):
                        error = self._new_lane_refused(stream_id) if readable else None
                        error = error or self._queue_full_error(size, readable)
                        await self._emit(error_envelope(error, stream_id))
                    continue
            with contextlib.suppress(_Closed):
                await self._take(text, size)

    def _queue_full(self, size: int) -> bool:
        return bool(self._queued_messages) and (
            self._queued_messages >= settings.GATEWAY_WS_MAX_QUEUED_MESSAGES
            or self._queued_bytes + size > settings.GATEWAY_WS_MAX_QUEUED_BYTES
        )

    def _would_wait(self, stream_id: str | None) -> bool:
        """Whether a create on this lane would be queued: behind another create of its lane, or
        with no slot free."""
        lane = self._lanes.get(stream_id)
        if lane is not None and (lane.task is not None or lane.waiting):
            return True
        return self._free_slots <= 0 or bool(self._wanting) or self._draining.is_set()

    def _queue_full_error(self, size: int, readable: bool = True) -> GatewayError:
        unread = "" if readable else " (its stream_id could not be read without parsing it)"
        return RateLimited(
            f"Too many messages wait on this connection ({self._queued_messages} messages, {self._queued_bytes} "
            f"bytes; at most {settings.GATEWAY_WS_MAX_QUEUED_MESSAGES} and {settings.GATEWAY_WS_MAX_QUEUED_BYTES} "
            f"bytes): this one ({size} bytes) was dropped{unread}. Send the next when a response has ended.",
            code="websocket_queue_full",
            headers={"Retry-After": "1"},
        )

    async def _take(self, text: str, size: int) -> None:
        """One client message: a create into its lane, a steer answered, an error frame."""
        turn = _TurnRecord(self.connection_id, self.principal.tenant_name)
        stream_id: str | None = None
        parsed = False
        try:
            message = self._message(text)
            if message.get("type") == STEER:
                turn.kind = "steer"
                await self._steer(message, size)
                turn.log()
                return
            stream_id = self._stream_id(message)
            parsed = True
            body = self._create_body(message)
            refused = self._new_lane_refused(stream_id)
            if refused is not None:
                raise refused
            waits = self._would_wait(stream_id)
            if waits and self._queue_full(size):
                raise self._queue_full_error(size)
            lane = self._lane_for(stream_id)
        except _Closed:
            raise
        except Exception as exc:  # a bug must not stop the reader: the connection would hang
            error = exc if isinstance(exc, GatewayError) else ServerError("The gateway failed to read this message.")
            if not isinstance(exc, GatewayError):
                log.exception("websocket message failed")
            if not parsed:  # not read as JSON (too large, malformed): its lane, if it can be told
                stream_id, readable = peek_stream_id(text)
                if not readable:
                    error.message += " (Its stream_id could not be read.)"
            turn.stream_id = stream_id
            turn.fail(error)
            turn.log()
            await self._emit(error_envelope(error, stream_id))
            return
        create = _Create(body, size)
        lane.waiting.append(create)
        if waits:
            create.queued = True
            self._queued_messages += 1
            self._queued_bytes += size
        if lane.task is None and not self._draining.is_set():
            if waits:
                self._want(lane)
            else:
                self._free_slots -= 1
                lane.granted = True
            lane.task = asyncio.ensure_future(self._run_lane(lane))

    def _stream_id(self, message: dict[str, Any]) -> str | None:
        stream_id = message.get("stream_id")
        if stream_id is None:
            return None
        if not isinstance(stream_id, str) or not STREAM_ID.fullmatch(stream_id):
            raise InvalidRequest(
                "Invalid 'stream_id': 1 to 256 ASCII letters, digits, underscores, hyphens or periods.",
                param="stream_id",
                code="invalid_stream_id",
            )
        return stream_id

    def _new_lane_refused(self, stream_id: str | None) -> GatewayError | None:
        """The refusal of a create that would open a named lane past GATEWAY_WS_MAX_STREAMS."""
        limit = settings.GATEWAY_WS_MAX_STREAMS
        if stream_id in self._lanes or self._named < limit:
            return None
        return InvalidRequest(
            f"This connection already used {limit} stream_ids: reuse one, or open a new connection.",
            param="stream_id",
            code="websocket_stream_limit_reached",
        )

    def _lane_for(self, stream_id: str | None) -> _Lane:
        lane = self._lanes.get(stream_id)
        if lane is not None:
            return lane
        self._named += 1
        lane = self._lanes[stream_id] = _Lane(stream_id)
        return lane

    def _want(self, lane: _Lane) -> None:
        """The lane's head create waits for a slot (after those that waited before it)."""
        lane.ready = asyncio.get_running_loop().create_future()
        self._wanting.append(lane)

    def _give_back(self, lane: _Lane, again: bool) -> None:
        """The lane's response ended: its slot goes to the lane that waited longest (the lane
        itself, if `again` and none waits)."""
        lane.granted = False
        self._free_slots += 1
        if again:
            self._want(lane)
        while self._free_slots > 0 and self._wanting:
            waiting = self._wanting.popleft()
            self._free_slots -= 1
            waiting.granted = True
            head = waiting.waiting[0] if waiting.waiting else None
            if head is not None and head.queued:  # about to start: no longer queued
                head.queued = False
                self._queued_messages -= 1
                self._queued_bytes -= head.size
            if waiting.ready is not None and not waiting.ready.done():
                waiting.ready.set_result(None)

    async def _run_lane(self, lane: _Lane) -> None:
        """The lane's creates, one after the other; at most GATEWAY_WS_MAX_ACTIVE_RESPONSES of
        the connection's responses run at once (the others wait for a slot, counted as queued)."""
        try:
            while lane.waiting and not self._closed.is_set() and not self._draining.is_set():
                if not lane.granted:
                    assert lane.ready is not None
                    await lane.ready
                    if self._closed.is_set() or self._draining.is_set():  # while it waited for a slot
                        return
                create = lane.waiting.popleft()
                try:
                    await self._respond(lane, create.body)
                finally:
                    again = bool(lane.waiting) and not self._closed.is_set() and not self._draining.is_set()
                    self._give_back(lane, again)
        except _Closed:
            pass
        except Exception:  # a bug: the lane stops (its turn already answered or logged)
            log.exception("websocket lane failed")
        finally:
            if lane.granted:
                self._give_back(lane, again=False)
            with contextlib.suppress(ValueError):
                self._wanting.remove(lane)
            lane.task = None
            self._touch()

    async def _close_with(self, error: GatewayError) -> None:
        await self._emit(error_envelope(error))
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": 1000})

    async def _authenticated(self) -> Principal:
        """The connection's key looked up again, as each HTTP request's is (auth.py: a cache
        hit costs a dict look-up): its expiry, revocation or new secret ends the connection
        (AuthenticationFailed), and each create gets the key's current limits and budgets."""
        if self._raw_key is not None:
            self.principal = await principal_for(self._raw_key)
        return self.principal

    async def _refuse_key(self, error: AuthenticationFailed) -> None:
        """The key no longer authenticates: after the create's error frame, the connection
        closes (1008, policy violation, as a refused handshake without an HTTP response does)
        and its running responses are cancelled, as when the client closes."""
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
        self._closed.set()
        self._activity.set()

    async def _emit(self, payload: dict[str, Any]) -> None:
        if self._closed.is_set():
            raise _Closed()
        try:
            await self._send({"type": "websocket.send", "text": dumps(payload)})
        except OSError as exc:  # uvicorn: the socket is gone
            raise _Closed() from exc

    async def _respond(self, lane: _Lane, body: dict[str, Any]) -> None:
        """A create of the lane, and the successors its steering input asks for."""
        previous = body.get("previous_response_id")
        held = lane.held.pop(previous, None) if isinstance(previous, str) else None
        self._release(held)
        if held:  # the explicit continuation after response.steer.pending
            body = with_queued_input(body, held)
        successor = False
        while True:
            queue = await self._turn(lane, body, held, successor=successor)
            if queue is None or not queue.steers:
                return
            steers = queue.take()
            if queue.status not in ("completed", "incomplete"):
                self._release(steers)
                for steer in steers:
                    await self._emit(
                        failed_event(
                            "response_not_active",
                            f"The response ended {queue.status}: its steering input was not committed.",
                            raw_input=steer.input,
                            previous=queue.response_id,
                            steer_id=steer.id,
                            stream_id=lane.stream_id,
                        )
                    )
                return
            stubs = required_input(queue.output)
            if stubs:  # the client answers first; its continuation takes the input
                lane.held[queue.response_id] = steers  # still counted in _steer_bytes
                for steer in steers:
                    await self._emit(pending_event(steer, queue.response_id, stubs, lane.stream_id))
                return
            self._release(steers)  # committed by the successor, or returned
            if self._draining.is_set():  # the process is shutting down: no new response here
                await self._hand_back(steers, lane, queue.response_id, _reconnect_elsewhere().message)
                return
            body, held, successor = successor_body(queue, steers), steers, True

    async def _turn(
        self, lane: _Lane, body: dict[str, Any], committed: list[Steer] | None, *, successor: bool
    ) -> SteerQueue | None:
        """One response (its events, or an error frame). Each is observed like an HTTP request:
        one access-log line and the same metrics. `committed`: the steering input `body`
        carries, handed back if no response is created."""
        turn = _TurnRecord(self.connection_id, self.principal.tenant_name, lane.stream_id)
        if successor:
            turn.kind = "response.create (steered successor)"
        previous = body.get("previous_response_id") if isinstance(body.get("previous_response_id"), str) else None
        queue: SteerQueue | None = None
        try:
            # A parent this lane forgot (a continuation from it failed here) is not taken from
            # memory: a stored one is read from the database as any id the connection does not
            # hold, a `store: false` one is not found.
            prior = None if previous in lane.evicted else self._prior_for(previous)
            principal = await self._authenticated()
            # Streamed: the row is written at the start, so the response can be cancelled.
            req = parse_create_request({**body, "stream": True})
            start = await start_response(principal, req, body, prior=prior)
            started = start.run  # None: a route that runs on workers
            turn.model = req.model
            planned = start.request
            turn.ignored_fields = planned.ignored_fields
            if started is None:  # a route that runs on workers: relay its log
                queue = self._steerable_queue(
                    start.response_id, lane, body, "This model runs on background workers, which take no steering."
                )
                await self._relay(follow_log(start.response_id), lane, previous, turn, queue)
                return queue
            queue = self._steerable_queue(started.job.response_id, lane, body, unsupported_reason(body))
            if queue.unsupported is None:
                started.steering = queue
            started.converted_prefix = self._converted_for(lane, previous)
            await started.connect()
            await self._relay(started.events(), lane, previous, turn, queue, run=started)
            return queue
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
            self._evict(lane, previous)
            await self._emit(error_envelope(error, lane.stream_id))
            if committed and previous is not None:
                await self._hand_back(committed, lane, previous, error.message)
            if isinstance(error, AuthenticationFailed):
                await self._refuse_key(error)
            return None
        finally:
            if queue is not None:
                self._end_steering(queue)
            turn.log()

    async def _hand_back(self, steers: list[Steer], lane: _Lane, previous: str, reason: str) -> None:
        """Steering input a create carried that created no response, returned to the client (the
        create's failure also made this lane forget `previous`: nothing can continue it here)."""
        for steer in steers:
            await self._emit(
                failed_event(
                    "successor_creation_failed",
                    f"The response that was to commit this input could not be created: {reason}",
                    raw_input=steer.input,
                    previous=previous,
                    steer_id=steer.id,
                    stream_id=lane.stream_id,
                )
            )

    def _release(self, steers: list[Steer] | None) -> None:
        self._steer_bytes -= sum(steer.size for steer in steers or ())

    def _steerable_queue(
        self, response_id: str, lane: _Lane, body: dict[str, Any], unsupported: str | None
    ) -> SteerQueue:
        queue = SteerQueue(response_id, lane.stream_id, body, unsupported)
        self._steerable[response_id] = queue
        return queue

    def _end_steering(self, queue: SteerQueue) -> None:
        """The response ended: a steer naming it now fails (already completed, or not active)."""
        queue.accepting = False
        self._steerable.pop(queue.response_id, None)
        self._ended[queue.response_id] = (queue.stream_id, queue.status)
        while len(self._ended) > ENDED_REMEMBERED:
            self._ended.popitem(last=False)

    async def _steer(self, message: dict[str, Any], size: int) -> None:
        """`response.steer`: accepted into its running response's queue, or failed with a code."""
        previous = message.get("previous_response_id")
        target = self._steerable.get(previous) if isinstance(previous, str) else None
        ended = self._ended.get(previous) if isinstance(previous, str) and target is None else None
        stream_id = target.stream_id if target is not None else ended[0] if ended is not None else None
        try:
            previous, raw, items = parse_steer(message)
            if target is None and ended is None:
                raise SteerRefused(
                    "response_not_found", f"No response with id '{previous}' runs or ran on this connection."
                )
            if target is not None and target.unsupported is not None:
                raise SteerRefused("steering_not_supported", target.unsupported)
            if target is None or not target.accepting:  # ended (or its terminal event is on its way)
                status = ended[1] if ended is not None else target.status if target is not None else None
                if status in ("completed", "incomplete"):
                    raise SteerRefused(
                        "response_already_completed",
                        f"The response '{previous}' has ended {status}: send the input in a 'response.create'.",
                    )
                raise SteerRefused("response_not_active", f"The response '{previous}' is no longer running.")
            limit = settings.GATEWAY_WS_MAX_PENDING_STEERS
            if self._steer_bytes + size > settings.GATEWAY_WS_MAX_QUEUED_BYTES:
                raise SteerRefused(
                    "too_many_pending_steers",
                    f"This connection already holds {self._steer_bytes} bytes of steering input "
                    f"(at most {settings.GATEWAY_WS_MAX_QUEUED_BYTES}): wait for a successor.",
                )
            if len(target.steers) >= limit:
                raise SteerRefused(
                    "too_many_pending_steers",
                    f"{limit} steering inputs already wait for this response: wait for its successor.",
                )
        except SteerRefused as refused:
            await self._emit(
                failed_event(
                    refused.code,
                    refused.message,
                    raw_input=message.get("input"),
                    previous=previous,
                    stream_id=stream_id,
                )
            )
            return
        steer = new_steer(raw, items, size)
        target.steers.append(steer)
        self._steer_bytes += size
        await self._emit(accepted_event(steer, previous, stream_id))

    def _create_body(self, message: dict[str, Any]) -> dict[str, Any]:
        kind = message.get("type")
        if kind != CREATE:
            received = repr(kind) if isinstance(kind, str) else "none"
            raise InvalidRequest(
                f"Unknown message type {received[:80]}: this gateway takes {CLIENT_MESSAGES}.",
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
        return {k: v for k, v in message.items() if k not in ("type", "stream", "background", "stream_id")}

    def _message(self, text: str) -> dict[str, Any]:
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
        return message

    def _prior_for(self, previous: str | None) -> PriorContext | None:
        """The response `previous` names, if a lane of this connection holds it in memory (a
        lane may continue another lane's response: a fork)."""
        if previous is None:
            return None
        for lane in self._lanes.values():
            if lane.prior is not None and lane.prior.response_id == previous:
                return lane.prior
        return None

    async def _relay(
        self,
        events: Any,
        lane: _Lane,
        previous: str | None,
        turn: _TurnRecord,
        queue: SteerQueue,
        run: Any = None,
    ) -> None:
        """Send a response's events, each with the lane's stream_id; a client that goes away
        cancels it."""
        final: dict[str, Any] | None = None
        stream_id = lane.stream_id
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
                if stream_id is not None:
                    event["stream_id"] = stream_id
                if event["type"] in TERMINAL:
                    final = event["response"]
                    queue.accepting = False  # decided: steering input from now on is too late
                    queue.status = final["status"]
                    queue.output = final.get("output") or []
                await self._emit(event)
                turn.saw(event)
        finally:
            closed.cancel()
            if run is not None or final is None:
                with contextlib.suppress(BaseException):
                    await stream.aclose()
        if final is None or final["status"] not in ("completed", "incomplete"):
            queue.status = final["status"] if final is not None else "failed"
            self._evict(lane, previous)
            return
        if run is not None:
            lane.prior = PriorContext(
                final["id"],
                run.job.context + run.response["output"],
                stored=bool(final.get("store", True)),
                input_spans=run.job.input_spans,  # the output is no input: nothing before its items is kept
            )
        else:  # run by a worker (always stored): continuations read the chain from the database
            lane.prior = None

    def _converted_for(self, lane: _Lane, previous: str | None) -> ConvertedPrefix | None:
        """The lane's converted prefix for a run of it: as it is when the run continues the lane's
        own most recent response, emptied otherwise (a new chain, a fork of another lane's
        response, a chain read from the store). The run's own calls then fill it."""
        converted = lane.converted
        if converted is not None and (lane.prior is None or lane.prior.response_id != previous):
            converted.clear()
        return converted

    def _evict(self, lane: _Lane, response_id: str | None) -> None:
        """A continuation from `response_id` failed on `lane`: the lane forgets it (another lane
        that holds it keeps it: a failed fork does not break its source)."""
        if response_id is None:
            return
        lane.evicted.add(response_id)
        if lane.prior is not None and lane.prior.response_id == response_id:
            lane.prior = None
        if lane.converted is not None:
            lane.converted.clear()
