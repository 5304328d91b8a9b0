"""Async streams of items and of batches of them (the lists of items that came, or were made,
together): the stream relay passes batches so that a relayed token takes one step per
generator level and a burst takes one write (engine/run.py, api/sse.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def flatten(batches: AsyncGenerator[list[T], None]) -> AsyncIterator[T]:
    """The items of `batches`, one at a time; closing this closes them at once (an upstream
    request is then released now, not when the garbage collector finds the generator)."""
    try:
        async for batch in batches:
            for item in batch:
                yield item
    finally:
        await batches.aclose()


async def singly(items: AsyncIterator[T]) -> AsyncIterator[list[T]]:
    """Each item of `items` as a batch of its own; closing this closes `items`."""
    try:
        async for item in items:
            yield [item]
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
