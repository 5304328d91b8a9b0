"""Server-sent events: one write per event, keep-alive comments while the source is silent."""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, TypeVar

from .exception_handlers import dumps
from .protocol.events import Event

T = TypeVar("T")
KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


def encode_event(event: Event) -> bytes:
    return f"event: {event['type']}\ndata: {dumps(event)}\n\n".encode()


async def with_keepalive(source: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """Yield the source's items, and None whenever it stays silent for `interval` seconds.

    Cancellation of the consumer is passed on to the source (its pending step
    is cancelled, then it is closed), so the engine sees the disconnect."""
    iterator = source.__aiter__()
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            finished, pending = pending, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(BaseException):
                await aclose()


async def sse_body(events: AsyncIterator[Event], keepalive: float) -> AsyncIterator[bytes]:
    async for event in with_keepalive(events, keepalive):
        yield KEEPALIVE if event is None else encode_event(event)
    yield DONE
