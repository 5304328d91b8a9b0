"""Lanes: creates with the same `stream_id` run first in, first out, one after the other;
different lanes run at once, at most GATEWAY_WS_MAX_ACTIVE_RESPONSES of them (the others wait
for a slot). What waits is bounded (GATEWAY_WS_MAX_QUEUED_MESSAGES / _BYTES across lanes), and
so is the number of named lanes (GATEWAY_WS_MAX_STREAMS)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from ...orchestration.assembly import PriorContext
from ...protocol.errors import GatewayError, InvalidRequest, RateLimited
from ...protocol.prefix import ConvertedPrefix
from ..steering import Steer
from .frames import Closed

log = logging.getLogger("gateway.websocket")


class Lane:
    """One `stream_id` of a connection (None: the default lane): its creates run first in,
    first out, each after the one before ended; it remembers its most recent response."""

    __slots__ = ("stream_id", "waiting", "task", "prior", "evicted", "held", "converted", "granted", "ready")

    def __init__(self, stream_id: str | None) -> None:
        self.stream_id = stream_id
        self.waiting: deque[Create] = deque()
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


class Create:
    """A `response.create` in its lane; `queued` while it counts in the connection's queue bounds
    (it cannot start yet: behind another create of its lane, or waiting for a slot)."""

    __slots__ = ("body", "size", "queued")

    def __init__(self, body: dict[str, Any], size: int) -> None:
        self.body = body
        self.size = size
        self.queued = False


class Lanes:
    """A connection's lanes, their slots and the bounds of what waits. `respond` runs one create
    of a lane (to its end); `touch` is told when a lane stops."""

    def __init__(
        self,
        respond: Callable[[Lane, dict[str, Any]], Awaitable[None]],
        closed: asyncio.Event,
        draining: asyncio.Event,
        touch: Callable[[], None],
    ) -> None:
        self._respond = respond
        self._closed = closed
        self._draining = draining
        self._touch = touch
        self.by_id: dict[str | None, Lane] = {None: Lane(None)}
        self._named = 0  # distinct named lanes so far (GATEWAY_WS_MAX_STREAMS: never released)
        # Slots for responses running at once, given out as each create is read (not when its
        # lane's task gets to run: a burst read before any lane started would count as queued).
        self._free_slots = settings.GATEWAY_WS_MAX_ACTIVE_RESPONSES
        self._wanting: deque[Lane] = deque()  # lanes whose head create waits for a slot, in order
        self._queued_messages = 0  # creates that cannot start yet, across lanes
        self._queued_bytes = 0

    def busy(self) -> bool:
        return any(lane.task is not None for lane in self.by_id.values())

    def queue_full(self, size: int) -> bool:
        return bool(self._queued_messages) and (
            self._queued_messages >= settings.GATEWAY_WS_MAX_QUEUED_MESSAGES
            or self._queued_bytes + size > settings.GATEWAY_WS_MAX_QUEUED_BYTES
        )

    def would_wait(self, stream_id: str | None) -> bool:
        """Whether a create on this lane would be queued: behind another create of its lane, or
        with no slot free."""
        lane = self.by_id.get(stream_id)
        if lane is not None and (lane.task is not None or lane.waiting):
            return True
        return self._free_slots <= 0 or bool(self._wanting) or self._draining.is_set()

    def queue_full_error(self, size: int, readable: bool = True) -> GatewayError:
        unread = "" if readable else " (its stream_id could not be read without parsing it)"
        return RateLimited(
            f"Too many messages wait on this connection ({self._queued_messages} messages, {self._queued_bytes} "
            f"bytes; at most {settings.GATEWAY_WS_MAX_QUEUED_MESSAGES} and {settings.GATEWAY_WS_MAX_QUEUED_BYTES} "
            f"bytes): this one ({size} bytes) was dropped{unread}. Send the next when a response has ended.",
            code="websocket_queue_full",
            headers={"Retry-After": "1"},
        )

    def new_lane_refused(self, stream_id: str | None) -> GatewayError | None:
        """The refusal of a create that would open a named lane past GATEWAY_WS_MAX_STREAMS."""
        limit = settings.GATEWAY_WS_MAX_STREAMS
        if stream_id in self.by_id or self._named < limit:
            return None
        return InvalidRequest(
            f"This connection already used {limit} stream_ids: reuse one, or open a new connection.",
            param="stream_id",
            code="websocket_stream_limit_reached",
        )

    def admit(self, stream_id: str | None, body: dict[str, Any], size: int) -> None:
        """A create joins its lane (refused, raising, past the lane or queue limits); the lane
        starts if it was idle."""
        refused = self.new_lane_refused(stream_id)
        if refused is not None:
            raise refused
        waits = self.would_wait(stream_id)
        if waits and self.queue_full(size):
            raise self.queue_full_error(size)
        lane = self._lane_for(stream_id)
        create = Create(body, size)
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
            lane.task = asyncio.ensure_future(self._run(lane))

    def _lane_for(self, stream_id: str | None) -> Lane:
        lane = self.by_id.get(stream_id)
        if lane is not None:
            return lane
        self._named += 1
        lane = self.by_id[stream_id] = Lane(stream_id)
        return lane

    def _want(self, lane: Lane) -> None:
        """The lane's head create waits for a slot (after those that waited before it)."""
        lane.ready = asyncio.get_running_loop().create_future()
        self._wanting.append(lane)

    def _give_back(self, lane: Lane, again: bool) -> None:
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

    def _stopping(self) -> bool:
        return self._closed.is_set() or self._draining.is_set()

    async def _run(self, lane: Lane) -> None:
        """The lane's creates, one after the other; at most GATEWAY_WS_MAX_ACTIVE_RESPONSES of
        the connection's responses run at once (the others wait for a slot, counted as queued)."""
        try:
            while lane.waiting and not self._stopping():
                if not lane.granted:
                    assert lane.ready is not None
                    await lane.ready
                    if self._stopping():  # while it waited for a slot
                        return
                create = lane.waiting.popleft()
                try:
                    await self._respond(lane, create.body)
                finally:
                    self._give_back(lane, again=bool(lane.waiting) and not self._stopping())
        except Closed:
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

    async def wait_all(self) -> None:
        """The connection ends: its lanes see the close at once (their responses are cancelled)
        or have ended; what they converted goes with the connection."""
        tasks = [lane.task for lane in self.by_id.values() if lane.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for lane in self.by_id.values():
            if lane.converted is not None:
                lane.converted.clear()
