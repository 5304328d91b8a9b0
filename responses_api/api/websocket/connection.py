"""One accepted connection: it reads what the client sends (each message to its handler,
messages.py), and ends it: the client closed, the process drains (after the running turns), the
key stopped authenticating, or, with no turn running, the idle time or the connection's
lifetime ran out. Its parts: the socket (frames.py), the lanes (lanes.py), the steering
(steers.py) and the turns (turns.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from django.conf import settings

from ...domain import Principal
from ...orchestration import lifecycle
from ...orchestration.assembly import PriorContext
from ...protocol.errors import AuthenticationFailed, InvalidRequest
from .frames import Closed, Receive, Send, Socket, error_envelope, message_text, peek_stream_id, reconnect_elsewhere
from .lanes import Lane, Lanes
from .messages import take
from .steers import Steering
from .turns import Turns


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
        self.opened = time.monotonic()
        self._last_activity = self.opened  # the last message, or the end of the last turn
        self._activity = asyncio.Event()
        self._draining = asyncio.Event()  # the process is shutting down: close after the running turns
        self.socket = Socket(receive, send)
        self.steering = Steering(self.socket.emit, self._draining)
        self.lanes = Lanes(self._respond, self.socket.closed, self._draining, self._touch)
        self.turns = Turns(
            principal, raw_key, connection_id, self.socket, self.steering, self.lanes.by_id.values, self._refuse_key
        )

    @property
    def principal(self) -> Principal:
        """The key's principal, as of its last look-up (each create looks it up again)."""
        return self.turns.principal

    @property
    def prior(self) -> PriorContext | None:
        """The default lane's most recent response."""
        return self.lanes.by_id[None].prior

    def drain(self) -> None:
        """The process is shutting down (lifecycle.py): the running turns may finish, then the
        client is told to reconnect (`websocket_connection_limit_reached`)."""
        self._draining.set()
        self._activity.set()

    def _touch(self) -> None:
        self._last_activity = time.monotonic()
        self._activity.set()

    async def _respond(self, lane: Lane, body: dict[str, Any]) -> None:
        await self.steering.respond(lane, body, self.turns.turn)

    async def _refuse_key(self, error: AuthenticationFailed) -> None:
        """The key no longer authenticates: after the create's error frame, the connection
        closes (1008) and its running responses are cancelled, as when the client closes."""
        await self.socket.close_for_policy(error.message)
        self._activity.set()

    async def run(self) -> None:
        lifecycle.track_connection(self)
        reader = asyncio.ensure_future(self._read())
        try:
            await self._supervise()
        except Closed:
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            await self.lanes.wait_all()

    async def _supervise(self) -> None:
        """Until the connection should end: the client closed it, the process drains (after
        the running turns), or, with no turn running, the idle time or the connection's
        lifetime ran out (each said in an error frame before the close)."""
        closed = self.socket.closed
        closing = asyncio.ensure_future(closed.wait())
        try:
            while not closed.is_set():
                busy = self.lanes.busy()
                if self._draining.is_set() and not busy:
                    await self.socket.close_with(reconnect_elsewhere())
                    return
                now = time.monotonic()
                lifetime = settings.GATEWAY_WS_MAX_SECONDS - (now - self.opened)
                idle = settings.GATEWAY_WS_IDLE_SECONDS - (now - self._last_activity)
                if not busy and lifetime <= 0:
                    await self.socket.close_with(
                        InvalidRequest(
                            f"This WebSocket connection reached its {settings.GATEWAY_WS_MAX_SECONDS / 60:g}-minute "
                            "limit; open a new one and continue with previous_response_id.",
                            code="websocket_connection_limit_reached",
                        )
                    )
                    return
                if not busy and idle <= 0:
                    await self.socket.close_with(
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
        lanes = self.lanes
        while True:
            message = await self.socket.receive()
            if message["type"] == "websocket.disconnect":
                self.socket.closed.set()
                return
            # The idle timer restarts (read when it fires: no wake-up per message).
            self._last_activity = time.monotonic()
            text, size = message_text(message)
            if lanes.queue_full(size):
                # Refused unparsed (a flood costs no parsing), on the lane its stream_id names:
                # read cheaply, it also tells a create that could start at once (never refused
                # as queued) and one past the lane limit (refused as that).
                stream_id, readable = peek_stream_id(text)
                if not readable or lanes.would_wait(stream_id):
                    with contextlib.suppress(Closed):
                        error = lanes.new_lane_refused(stream_id) if readable else None
                        error = error or lanes.queue_full_error(size, readable)
                        await self.socket.emit(error_envelope(error, stream_id))
                    continue
            with contextlib.suppress(Closed):
                await take(self, text, size)
