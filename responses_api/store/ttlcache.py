"""A small in-process cache whose entries expire: keys, routes and registry look-ups are
remembered for GATEWAY_CACHE_SECONDS, so an admin edit takes effect within that time in every
process without a cache bus."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """`ttl()` is read at each `put` (settings may change while a process runs, as in tests).
    Past `max_entries` the cache is emptied rather than tracked per entry: it only grows
    with distinct keys, models or tool sets, and refilling costs one look-up each."""

    __slots__ = ("_entries", "_max_entries", "_ttl")

    def __init__(self, ttl: Callable[[], float], max_entries: int = 10_000) -> None:
        self._entries: dict[K, tuple[float, V]] = {}
        self._ttl = ttl
        self._max_entries = max_entries

    def get(self, key: K) -> tuple[V] | None:
        """`(value,)` while fresh (the value may itself be None: a remembered absence), else None."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return (entry[1],)
        return None

    def put(self, key: K, value: V) -> V:
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + self._ttl(), value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
