"""Server-sent events: one write per event, keep-alive comments while the source is silent."""

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
    return b"event: " + event["type"].encode() + b"\ndata: " + dumpb(event) + b"\n\n"


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

    The API's ASGI lane (asgi.py) writes it with `write_to`: the events are read in the
    request's own task and each is written as it comes, and a keep-alive comment goes out
    when the source has been silent for `keepalive` seconds. Per event that is one encode
    and one write: no queue between tasks and no timer (the one timer per stream is re-armed
    only when it fires), which at thousands of open streams is most of the relay's CPU
    (bench/README.md, performance round 3). Served by Django's own handler instead (nothing
    routes the API there), it is a plain streaming response without keep-alives.

    `log_extra`: the request's access-log fields, filled in from the events as they pass.
    `on_start()` and `on_end(first_write, finished)` (set by the access-log middleware) are
    called when the body begins and when it ends: `first_write` is the `time.monotonic()` of
    the first event's write (None if none was written), `finished` whether the stream ran to
    its end (False: the client left)."""

    def __init__(self, events: AsyncIterator[Event], keepalive: float, log_extra: dict[str, Any] | None = None) -> None:
        super().__init__(self._frames(), content_type="text/event-stream")
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"
        self.events = events
        self.keepalive = keepalive
        self.log_extra = log_extra
        self.on_start: Callable[[], None] | None = None
        self.on_end: Callable[[float | None, bool], None] | None = None
        self._first_write: float | None = None

    def _frame(self, event: Event) -> bytes:
        if self.log_extra is not None and event["type"] in _NOTED:
            note_event(self.log_extra, event)
        return encode_event(event)

    async def _frames(self) -> AsyncIterator[bytes]:
        if self.on_start is not None:
            self.on_start()
        finished = False
        try:
            async for event in self.events:
                yield self._frame(event)
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
        events = self.events
        try:
            async for event in events:
                body = self._frame(event)
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
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


def _quiet(task: asyncio.Task[None]) -> None:
    """A keep-alive that failed (the client is gone) is not an error of its own: the stream's
    next write or the disconnect listener ends the request."""
    if not task.cancelled():
        task.exception()
