"""The handshake of `/v1/responses` over WebSocket: the key authenticated, the beta flag, the
drain and the per-key connection limit checked, then the connection served (connection.py);
a refusal is an HTTP response where the server can send one."""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections import Counter
from typing import Any

from django.conf import settings

from ...observability import metrics
from ...orchestration import lifecycle
from ...protocol.errors import GatewayError, InvalidRequest, RateLimited, ServerError
from ...protocol.surface import BETA_MESSAGE, beta_requested
from ...store.outages import unavailable
from ..auth import bearer_token, principal_for
from ..exception_handlers import dumps
from .connection import Connection
from .frames import Receive, Send

_open_per_key: Counter[int] = Counter()


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
