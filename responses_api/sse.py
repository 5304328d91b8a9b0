"""Server-sent events: one write per event, keep-alive comments while the source is silent."""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, TypeVar

from .exception_handlers import dumps
from .protocol.events import Event

T = TypeVar("T")
KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


def encode_event(event: Event) -> bytes:
    return f"event: {event['type']}\ndata: {dumps(event)}\n\n".encode()


_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


async def with_keepalive(source: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """Yield the source's items, and None whenever it stays silent for `interval` seconds.

    A pump task reads the source into a bounded queue; a timer handle (not a
    task per event) drops a keep-alive marker in when nothing came. When the
    consumer is cancelled (client gone) the pump is cancelled, so the engine
    sees the disconnect inside its own await."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)

    async def pump() -> None:
        try:
            async for item in source:
                idle = queue.empty()  # the consumer is waiting for this one
                await queue.put(item)
                if idle:
                    # Let it be sent now: the source may have more ready (an upstream burst, the
                    # whole tail of a response) and would otherwise run on until its next real
                    # wait, the first event's send held behind all of it (bench: TTFE).
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer, raised there
            await queue.put(_Failure(exc))
            return
        await queue.put(_END)

    def keepalive() -> None:
        if queue.empty():
            queue.put_nowait(None)

    producer = asyncio.ensure_future(pump())
    try:
        while True:
            timer = loop.call_later(interval, keepalive)
            try:
                item = await queue.get()
            finally:
                timer.cancel()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        if not producer.done():
            producer.cancel()
        with contextlib.suppress(BaseException):
            await producer


# The events that tell the access log about the response: its id, its end, its error.
_NOTED = frozenset({"response.created", "response.queued", "response.in_progress", "response.completed",
                    "response.failed", "response.incomplete", "error"})


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


async def sse_body(
    events: AsyncIterator[Event], keepalive: float, log_extra: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    """`log_extra`: the request's access-log fields, filled in from the events as they pass."""
    async for event in with_keepalive(events, keepalive):
        if event is None:
            yield KEEPALIVE
            continue
        if log_extra is not None and event["type"] in _NOTED:
            note_event(log_extra, event)
        yield encode_event(event)
    yield DONE
