"""The client messages a connection serves: `{message type: handler}`. A new message type is a
handler (here or in its own module) and one line in HANDLERS.

A handler gets the connection, the parsed message and the `Incoming` record of it; it answers
on the socket and writes the message's access-log line when it ends well (a create's line is its
turn's, written when the response ends). What it raises is answered here, as for any message:
an error frame on the message's lane and an access-log line."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...protocol.errors import GatewayError, InvalidRequest, ServerError
from ...protocol.surface import CLIENT_EVENTS
from .access_log import TurnRecord
from .frames import Closed, error_envelope, peek_stream_id, read_message, stream_id_of

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("gateway.websocket")

# What OpenAI's clients send on the socket (Codex's responses_websocket.rs, the openai SDK's
# responses_client_event.py). `stream: true` and `stream_options` come with every Codex and
# Agents SDK frame: every response streams here, so they are accepted; what contradicts the
# socket (`stream: false`, `background: true`) is a 400 naming the field.
CREATE = "response.create"
STEER = "response.steer"
# The client messages the surface classifies (protocol/surface.py): `response.create` and
# `response.steer`, both served.
CLIENT_MESSAGES = ", ".join(f"'{name}'" for name in CLIENT_EVENTS)


@dataclass(slots=True)
class Incoming:
    """A client message being handled: its text and size as sent, its access-log record, and
    its lane once a handler read it from the parsed message (`lane_read`)."""

    text: str
    size: int
    turn: TurnRecord
    stream_id: str | None = None
    lane_read: bool = False

    def read_lane(self, message: dict[str, Any]) -> str | None:
        self.stream_id = stream_id_of(message)
        self.lane_read = True
        return self.stream_id


Handler = Callable[["Connection", dict[str, Any], Incoming], Awaitable[None]]


async def create(connection: Connection, message: dict[str, Any], incoming: Incoming) -> None:
    """`response.create`: into its lane (run there, or refused with an error frame)."""
    stream_id = incoming.read_lane(message)
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
    body = {k: v for k, v in message.items() if k not in ("type", "stream", "background", "stream_id")}
    connection.lanes.admit(stream_id, body, incoming.size)


async def steer(connection: Connection, message: dict[str, Any], incoming: Incoming) -> None:
    """`response.steer`: answered at once (accepted into its response, or failed with a code)."""
    incoming.turn.kind = "steer"
    await connection.steering.steer(message, incoming.size)
    incoming.turn.log()


HANDLERS: dict[str, Handler] = {
    CREATE: create,
    STEER: steer,
}


async def _unknown(connection: Connection, message: dict[str, Any], incoming: Incoming) -> None:
    incoming.read_lane(message)  # an invalid stream_id is said first, as for a create
    kind = message.get("type")
    received = repr(kind) if isinstance(kind, str) else "none"
    raise InvalidRequest(
        f"Unknown message type {received[:80]}: this gateway takes {CLIENT_MESSAGES}.",
        param="type",
        code="unknown_message_type",
    )


async def take(connection: Connection, text: str, size: int) -> None:
    """One client message, to its handler; what fails is answered with an error frame."""
    incoming = Incoming(text, size, TurnRecord(connection.connection_id, connection.principal.tenant_name))
    try:
        message = read_message(text)
        kind = message.get("type")
        handler = HANDLERS.get(kind, _unknown) if isinstance(kind, str) else _unknown
        await handler(connection, message, incoming)
    except Closed:
        raise
    except Exception as exc:  # a bug must not stop the reader: the connection would hang
        error = exc if isinstance(exc, GatewayError) else ServerError("The gateway failed to read this message.")
        if not isinstance(exc, GatewayError):
            log.exception("websocket message failed")
        stream_id = incoming.stream_id
        if not incoming.lane_read:  # not read as JSON (too large, malformed): its lane, if it can be told
            stream_id, readable = peek_stream_id(text)
            if not readable:
                error.message += " (Its stream_id could not be read.)"
        incoming.turn.stream_id = stream_id
        incoming.turn.fail(error)
        incoming.turn.log()
        await connection.socket.emit(error_envelope(error, stream_id))
