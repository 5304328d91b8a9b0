"""The safe boundaries where a run may stop for steering input (WebSocket `response.steer`,
api/steering.py): between the model calls of a tool loop, and, within one model call, after
an assistant message is complete, before the model's next item starts (a call the model began
is never cut: its output would have nothing to answer). The run then ends `incomplete` with
reason "steered"; the connection starts the successor with the queued input."""

from __future__ import annotations

from typing import Any, Protocol

from ..protocol.deltas import OutputItem, ReasoningDelta, ToolCallDelta
from ..protocol.events import Event, EventBuilder

STEERED = "steered"  # incomplete_details.reason of a response stopped for steering input

# Deltas that close an open message: what the model does next is another item.
_NEXT_ITEM = (ReasoningDelta, ToolCallDelta, OutputItem)


class Steering(Protocol):
    def wanted(self) -> bool:
        """Input waits to be committed: stop at the next safe boundary."""
        ...


def ends_a_message(builder: EventBuilder, delta: object) -> bool:
    """`delta` starts a new item after a complete assistant message: a boundary."""
    return isinstance(delta, _NEXT_ITEM) and builder.open_content_type == "message"


def feed(
    builder: EventBuilder, steering: Steering | None, deltas: list[Any]
) -> tuple[list[Event], bool, Exception | None]:
    """One read's deltas as events, up to a steering boundary (then True: the run stops there)
    or a delta the builder refused (then its error, for the caller to raise after the events
    before it)."""
    events: list[Event] = []
    for delta in deltas:
        if steering is not None and ends_a_message(builder, delta) and steering.wanted():
            return events, True, None
        try:
            events += builder.feed(delta)
        except Exception as exc:  # noqa: BLE001 - raised by the caller, after the events before it
            return events, False, exc
    return events, False, None
