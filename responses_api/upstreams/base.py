"""The adapter interface: open a generation, then read neutral deltas from it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol.deltas import Delta
from ..protocol.prefix import ConvertedPrefix
from ..protocol.request import CreateRequest
from ..protocol.tools import Tool


@dataclass(slots=True)
class UpstreamRequest:
    request: CreateRequest
    items: list[dict[str, Any]]  # the whole context, in order
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
