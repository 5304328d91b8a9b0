"""Framing and the per-message limits: a client message read (size, JSON depth, an object with a
`type`), its lane read without parsing it, the error frame, and the socket that sends frames."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from ...protocol import jsonlimits
from ...protocol.errors import GatewayError, InvalidRequest
from ..exception_handlers import dumps

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# A lane's name (the openai SDK's lanes check the same before sending).
STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
# What follows a `"stream_id"` key in a message read without parsing it (peek_stream_id).
_KEY_COLON = re.compile(r"\s*:")
_STREAM_ID_VALUE = re.compile(r'\s*:\s*(?:null|"([A-Za-z0-9_.-]{1,256})")\s*[,}]')


class Closed(Exception):
    """The client closed the connection."""


def reconnect_elsewhere() -> GatewayError:
    """Why a draining process closes the connection (or hands steering input back)."""
    return InvalidRequest(
        "This gateway process is shutting down: open a new connection and continue with previous_response_id.",
        code="websocket_connection_limit_reached",
    )


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


def read_message(text: str) -> dict[str, Any]:
    """A client message as a JSON object, within GATEWAY_MAX_REQUEST_BYTES and the nesting limit."""
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


def stream_id_of(message: dict[str, Any]) -> str | None:
    """The lane a parsed message names (None: the default lane)."""
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


def message_text(message: dict[str, Any]) -> tuple[str, int]:
    """An ASGI `websocket.receive` as text, and its size as sent (what the queue bounds count)."""
    text = message.get("text")
    if text is None:
        raw = message.get("bytes")
        text = raw.decode("utf-8", "replace") if raw is not None else ""
    return text, len(message.get("text") or message.get("bytes") or b"")


class Socket:
    """The connection's sending side: one JSON text frame per payload, and its closes. `closed`
    is set once the client went away or the connection was closed here; a send after that
    raises Closed."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self.receive = receive
        self._send = send
        self.closed = asyncio.Event()

    async def emit(self, payload: dict[str, Any]) -> None:
        if self.closed.is_set():
            raise Closed()
        try:
            await self._send({"type": "websocket.send", "text": dumps(payload)})
        except OSError as exc:  # uvicorn: the socket is gone
            raise Closed() from exc

    async def close_with(self, error: GatewayError) -> None:
        """An error frame, then a normal close."""
        await self.emit(error_envelope(error))
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": 1000})

    async def close_for_policy(self, reason: str) -> None:
        """Close 1008 (policy violation, as a refused handshake without an HTTP response does)."""
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
        self.closed.set()
