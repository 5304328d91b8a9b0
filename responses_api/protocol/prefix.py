"""One WebSocket lane's converted upstream prefix: the items of its last model call as an upstream
dialect's messages, so that the lane's next continuation converts only what it adds.

A 500-turn chain is about 1,000 items; converting them to Chat Completions / Messages / Responses
input again on every turn was most of what a long chain's continuation cost over a short one
(bench/websocket.py). The cache saves conversion only: the context itself still comes from the
lane's memory or the store, authorised as before.

What is reused is checked, not assumed: an entry serves a call only when its key (upstream kind,
target, and whatever else changes the conversion: instructions, dialect options, tenant) is the
call's, and the call's items begin with exactly the items the entry converted (a list comparison,
by identity first, so the common case is a pointer walk). Anything that changes the older items
(truncation dropping the oldest, a compaction, a fork from elsewhere) therefore misses. The
dialect's state is copied before it is extended, so a cached entry is never written through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar


class Conversion(Protocol):
    """A dialect's conversion of items so far, which can take more items."""

    def extend(self, items: list[dict[str, Any]]) -> None: ...

    def resumed(self) -> Self:
        """A copy that extending does not write through to this one."""
        ...


C = TypeVar("C", bound=Conversion)


@dataclass(slots=True)
class _Entry:
    key: tuple[Any, ...]
    items: list[dict[str, Any]]  # the items converted, in order
    conversion: Any  # a Conversion after them


class ConvertedPrefix:
    """One lane's single entry (bounded: one per lane, at most `max_items` items)."""

    __slots__ = ("_entry", "max_items")

    def __init__(self, max_items: int) -> None:
        self._entry: _Entry | None = None
        self.max_items = max_items

    def clear(self) -> None:
        self._entry = None

    def resume(self, key: tuple[Any, ...], items: list[dict[str, Any]]) -> tuple[Any, int] | None:
        """A copy of the conversion of `items`' cached beginning, and how many items it covers;
        None when the entry is not for this key or these items."""
        entry = self._entry
        if entry is None or entry.key != key:
            return None
        covered = len(entry.items)
        if covered > len(items) or items[:covered] != entry.items:
            return None
        return entry.conversion.resumed(), covered

    def keep(self, key: tuple[Any, ...], items: list[dict[str, Any]], conversion: Conversion) -> None:
        """`conversion` (of `items`) serves the lane's next call; the caller no longer changes it
        (it only reads it, e.g. to encode a body)."""
        if len(items) > self.max_items:
            self._entry = None
            return
        self._entry = _Entry(key, list(items), conversion)


def converted(
    prefix: ConvertedPrefix | None, key: tuple[Any, ...], items: list[dict[str, Any]], start: Callable[[], C]
) -> C:
    """The conversion of `items`: the lane's cached beginning extended by the rest, or (no cache,
    another key, other items) `start()` extended by all of them; kept for the lane's next call."""
    resumed = prefix.resume(key, items) if prefix is not None else None
    if resumed is None:
        conversion = start()
        conversion.extend(items)
    else:
        conversion, covered = resumed
        conversion.extend(items[covered:])
    if prefix is not None:
        prefix.keep(key, items, conversion)
    return conversion
