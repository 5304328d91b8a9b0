"""The in-process expiring cache behind key, route and registry look-ups."""

from __future__ import annotations

import time

import pytest

from responses_api.store.ttlcache import TTLCache

pytestmark = pytest.mark.embedded


def test_entries_expire_after_the_ttl_read_at_each_put() -> None:
    ttl = [0.2]
    cache: TTLCache[str, int | None] = TTLCache(lambda: ttl[0])
    assert cache.get("a") is None
    assert cache.put("a", 1) == 1
    assert cache.put("absent", None) is None
    assert cache.get("a") == (1,)
    assert cache.get("absent") == (None,)  # a remembered absence is not a miss
    time.sleep(0.25)
    assert cache.get("a") is None and cache.get("absent") is None
    ttl[0] = 60
    cache.put("a", 2)
    time.sleep(0.25)
    assert cache.get("a") == (2,)


def test_a_full_cache_starts_over_and_clear_empties_it() -> None:
    cache: TTLCache[int, int] = TTLCache(lambda: 60, max_entries=3)
    for key in range(3):
        cache.put(key, key)
    assert len(cache) == 3
    cache.put(3, 3)
    assert len(cache) == 1 and cache.get(3) == (3,) and cache.get(0) is None
    cache.clear()
    assert len(cache) == 0 and cache.get(3) is None
