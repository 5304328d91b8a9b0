"""A connection's steering (`response.steer`; the rules are api/steering.py's): which of its
responses a steer may name, the input they hold, the successor that commits it, and the
hand-back of input no response will commit (`response.steer.failed`)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from ..steering import (
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
    with_queued_input,
)
from .frames import reconnect_elsewhere
from .lanes import Lane

# Ended responses a steer may still name, to say why it is too late (not "not found").
ENDED_REMEMBERED = 256

# One response of a lane: (lane, body, the steering input the body carries, whether it is a
# steered successor) -> its steering queue, or None when no response was created.
Turn = Callable[[Lane, dict[str, Any], list[Steer] | None, bool], Awaitable[SteerQueue | None]]


class Steering:
    def __init__(self, emit: Callable[[dict[str, Any]], Awaitable[None]], draining: asyncio.Event) -> None:
        self._emit = emit
        self._draining = draining
        self._bytes = 0  # steering input accepted and not yet committed or returned
        # Responses of this connection a steer may name: running, and recently ended.
        self._steerable: dict[str, SteerQueue] = {}
        # (lane, final status) of the recently ended ones: what a late steer is told.
        self._ended: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()

    async def respond(self, lane: Lane, body: dict[str, Any], turn: Turn) -> None:
        """A create of the lane, and the successors its steering input asks for."""
        previous = body.get("previous_response_id")
        held = lane.held.pop(previous, None) if isinstance(previous, str) else None
        self._release(held)
        if held:  # the explicit continuation after response.steer.pending
            body = with_queued_input(body, held)
        successor = False
        while True:
            queue = await turn(lane, body, held, successor)
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
                lane.held[queue.response_id] = steers  # still counted in _bytes
                for steer in steers:
                    await self._emit(pending_event(steer, queue.response_id, stubs, lane.stream_id))
                return
            self._release(steers)  # committed by the successor, or returned
            if self._draining.is_set():  # the process is shutting down: no new response here
                await self.hand_back(steers, lane, queue.response_id, reconnect_elsewhere().message)
                return
            body, held, successor = successor_body(queue, steers), steers, True

    async def hand_back(self, steers: list[Steer], lane: Lane, previous: str, reason: str) -> None:
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
        self._bytes -= sum(steer.size for steer in steers or ())

    def open(self, response_id: str, lane: Lane, body: dict[str, Any], unsupported: str | None) -> SteerQueue:
        """A response started: steers may name it (`unsupported`: why they are refused)."""
        queue = SteerQueue(response_id, lane.stream_id, body, unsupported)
        self._steerable[response_id] = queue
        return queue

    def end(self, queue: SteerQueue) -> None:
        """The response ended: a steer naming it now fails (already completed, or not active)."""
        queue.accepting = False
        self._steerable.pop(queue.response_id, None)
        self._ended[queue.response_id] = (queue.stream_id, queue.status)
        while len(self._ended) > ENDED_REMEMBERED:
            self._ended.popitem(last=False)

    async def steer(self, message: dict[str, Any], size: int) -> None:
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
            if self._bytes + size > settings.GATEWAY_WS_MAX_QUEUED_BYTES:
                raise SteerRefused(
                    "too_many_pending_steers",
                    f"This connection already holds {self._bytes} bytes of steering input "
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
        self._bytes += size
        await self._emit(accepted_event(steer, previous, stream_id))
