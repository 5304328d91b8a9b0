"""The gateway's caches of look-ups that expire. Keys, routes and registry look-ups are
remembered for GATEWAY_CACHE_SECONDS, so an admin edit takes effect within that time in every
process without a cache bus; what an upstream reports (context windows, a missing tokenizer),
the router's one-second view of target health and ad-hoc MCP servers' listings (for each
server's `cache_seconds`) use it too. Every cache is registered, so `clear_all` empties them all
(tests call it around each test).

Not every memo of the process is one: values that never go stale are memoised with
`functools` (the OpenAPI document, sealing keys, SQL texts), clients and pools are kept per
event loop (store/db.py, store/redis_clients.py, upstreams/http.py), and tool_registry/mcp_client.py
remembers which transport each MCP URL answered on.

Not Django's local-memory cache: it pickles every value on each get and set, which costs a
keyed request far more than a dict look-up (bench/README.md has the timeit figures)."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Caches of every key and value type; clear_all only empties them.
_registry: weakref.WeakSet[TTLCache[Any, Any]] = weakref.WeakSet()


def clear_all() -> None:
    """Empty every cache of this process (tests; an operator's change is seen within the TTL)."""
    for cache in list(_registry):
        cache.clear()


class TTLCache(Generic[K, V]):
    """`ttl()` is read at each `put` (settings may change while a process runs, as in tests).
    Past `max_entries` the cache is emptied rather than tracked per entry: it only grows
    with distinct keys, models or tool sets, and refilling costs one look-up each."""

    __slots__ = ("__weakref__", "_entries", "_max_entries", "_ttl")

    def __init__(self, ttl: Callable[[], float], max_entries: int = 10_000) -> None:
        self._entries: dict[K, tuple[float, V]] = {}
        self._ttl = ttl
        self._max_entries = max_entries
        _registry.add(self)

    def get(self, key: K) -> tuple[V] | None:
        """`(value,)` while fresh (the value may itself be None: a remembered absence), else None."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return (entry[1],)
        return None

    def put(self, key: K, value: V, ttl: float | None = None) -> V:
        """`ttl`: this entry's own seconds, where the owner of the value sets them (an MCP
        server's `cache_seconds`), instead of the cache's."""
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + (self._ttl() if ttl is None else ttl), value)
        return value

    def get_or_put(self, key: K, compute: Callable[[], V]) -> V:
        """The fresh value, else `compute()` remembered: for a caller already in a database
        thread (store/db.run_cached is the event loop's way, which also shares a miss)."""
        cached = self.get(key)
        return cached[0] if cached is not None else self.put(key, compute())

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
