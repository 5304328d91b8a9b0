"""Server-sent events: one write per batch of ready events, keep-alive comments while the source is silent."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from django.http import StreamingHttpResponse

from ..protocol.events import Event
from ..protocol.wirejson import dumpb

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"

Send = Callable[[dict[str, Any]], Awaitable[None]]


def encode_event(event: Event) -> bytes:
    kind = event["type"]
    head = _HEADS.get(kind)
    if head is None:
        head = b"event: " + kind.encode() + b"\ndata: "
        if len(_HEADS) < 512:  # the protocol's event types, and a bound whatever comes
            _HEADS[kind] = head
    return b"".join((head, dumpb(event), b"\n\n"))


_HEADS: dict[str, bytes] = {}  # event type -> its frame's `event:` line and `data: `


# The events that tell the access log about the response: its id, its end, its error.
_NOTED = frozenset(
    {
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.completed",
        "response.failed",
        "response.incomplete",
        "error",
    }
)


def note_response(extra: dict[str, Any], response: dict[str, Any]) -> None:
    """Access-log fields of a response object (the final one, or what is known so far)."""
    extra["response_id"] = response.get("id")
    extra["response_status"] = response.get("status")
    usage = response.get("usage")
    if usage:
        extra["input_tokens"] = usage.get("input_tokens")
        extra["output_tokens"] = usage.get("output_tokens")
    error = response.get("error")
    if error:
        extra.setdefault("error_code", error.get("code"))


def note_event(extra: dict[str, Any], event: Event) -> None:
    if event["type"] == "error":
        extra["error_code"] = event.get("code")
        extra["error_param"] = event.get("param")
    else:
        note_response(extra, event["response"])


class EventStream(StreamingHttpResponse):
    """A `text/event-stream` response of protocol events, ended by `data: [DONE]`.

    `batches`: the events, as lists of those that are ready together (ResponseRun.event_batches;
    protocol.batches.singly makes any event source one). The API's ASGI lane (asgi.py) writes it with
    `write_to`: the batches are read in the request's own task and each is written as it
    comes, its frames in one write, and a keep-alive comment goes out when the source has been
    silent for `keepalive` seconds. Nothing is held back to make a batch: a list is what the
    source had ready at once (the events of one upstream delta, or of the response's start),
    and it goes out before the source is read again. Per batch that is one write: no queue
    between tasks and no timer (the one timer per stream is re-armed only when it fires),
    which at thousands of open streams is most of the relay's CPU (bench/README.md,
    performance rounds 3 and 5b). Served by Django's own handler instead (nothing routes the
    API there), it is a plain streaming response without keep-alives.

    `log_extra`: the request's access-log fields, filled in from the events as they pass.
    `on_start()` and `on_end(first_write, finished)` (set by the access-log middleware) are
    called when the body begins and when it ends: `first_write` is the `time.monotonic()` of
    the first event's write (None if none was written), `finished` whether the stream ran to
    its end (False: the client left)."""

    def __init__(
        self, batches: AsyncIterator[list[Event]], keepalive: float, log_extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(self._frames(), content_type="text/event-stream")
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"
        self.batches = batches
        self.keepalive = keepalive
        self.log_extra = log_extra
        self.on_start: Callable[[], None] | None = None
        self.on_end: Callable[[float | None, bool], None] | None = None
        self._first_write: float | None = None

    def _body(self, batch: list[Event]) -> bytes:
        """The frames of a batch, in one piece; the access log notes the events that tell it."""
        extra = self.log_extra
        if extra is not None:
            for event in batch:
                if event["type"] in _NOTED:
                    note_event(extra, event)
        if len(batch) == 1:
            return encode_event(batch[0])
        return b"".join([encode_event(event) for event in batch])

    async def _frames(self) -> AsyncIterator[bytes]:
        if self.on_start is not None:
            self.on_start()
        finished = False
        try:
            async for batch in self.batches:
                yield self._body(batch)
                if self._first_write is None:
                    self._first_write = time.monotonic()
            yield DONE
            finished = True
        finally:
            if self.on_end is not None:
                self.on_end(self._first_write, finished)

    async def write_to(self, send: Send, start: dict[str, Any]) -> None:
        """Send the response over ASGI: `start` (its `http.response.start`), then the events,
        then the end of the body.

        Cancelled when the client goes away: the cancellation reaches the source inside its
        own await (the engine then stops the upstream and stores what it had)."""
        if self.on_start is not None:
            self.on_start()
        finished = False
        try:
            await send(start)
            await self._write_events(send)
            finished = True
        finally:
            if self.on_end is not None:
                self.on_end(self._first_write, finished)

    async def _write_events(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        interval = self.keepalive
        last_write = loop.time()
        sending = False
        ping: asyncio.Task[None] | None = None
        timer: asyncio.TimerHandle | None = None  # armed below, re-armed by silent() itself

        def silent() -> None:
            nonlocal timer, ping, last_write
            now = loop.time()
            if now - last_write >= interval and not sending and (ping is None or ping.done()):
                ping = asyncio.ensure_future(send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True}))
                ping.add_done_callback(_quiet)
                last_write = now
            timer = loop.call_at(last_write + interval, silent)

        timer = loop.call_at(last_write + interval, silent)
        batches = self.batches
        try:
            async for batch in batches:
                body = self._body(batch)
                sending = True
                await send({"type": "http.response.body", "body": body, "more_body": True})
                sending = False
                last_write = loop.time()
                if self._first_write is None:
                    self._first_write = time.monotonic()
            timer.cancel()
            if ping is not None and not ping.done():
                await ping  # the end of the body must come after it
            await send({"type": "http.response.body", "body": DONE, "more_body": False})
        finally:
            timer.cancel()
            if ping is not None and not ping.done():
                ping.cancel()
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


def _quiet(task: asyncio.Task[None]) -> None:
    """A keep-alive that failed (the client is gone) is not an error of its own: the stream's
    next write or the disconnect listener ends the request."""
    if not task.cancelled():
        task.exception()
