"""The adapter interface: open a generation, then read neutral deltas from it."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from ..protocol.deltas import Delta
from ..protocol.prefix import ConvertedPrefix
from ..protocol.request import CreateRequest
from ..protocol.tools import Tool


@dataclass(slots=True)
class UpstreamRequest:
    request: CreateRequest
    items: list[dict]  # the whole context, in order
    tools: list[Tool]
    stream: bool  # stream from the upstream (the client streams, or a tool loop wants early calls)
    tenant_id: int | None = None  # whose sealed items (signed reasoning) the adapter may open
    # A WebSocket lane's converted prefix (protocol/prefix.py): the adapter reuses and keeps it.
    prefix: ConvertedPrefix | None = None


class UpstreamCall(Protocol):
    """A call may also offer `delta_batches()`: the same deltas as lists of those that came
    together (one network read), which the engine reads instead (engine/run.py)."""

    def deltas(self) -> AsyncIterator[Delta]:
        """The generation as neutral deltas; raises UpstreamError/UpstreamTimeout mid-way."""
        ...

    async def aclose(self) -> None:
        """Close the upstream request now (client gone, cancelled)."""
        ...


async def one_by_one(batches: AsyncGenerator[list[Delta], None]) -> AsyncIterator[Delta]:
    """The deltas of `batches`, one at a time; closing this closes them (the upstream request
    is released then, not when the garbage collector finds them)."""
    try:
        async for batch in batches:
            for delta in batch:
                yield delta
    finally:
        await batches.aclose()


async def batched(deltas: AsyncIterator[Delta]) -> AsyncIterator[list[Delta]]:
    """A call without `delta_batches`: each delta a batch of its own."""
    try:
        async for delta in deltas:
            yield [delta]
    finally:
        aclose = getattr(deltas, "aclose", None)
        if aclose is not None:
            await aclose()
