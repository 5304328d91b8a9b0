"""The in-process expiring cache behind key, route and registry look-ups."""

from __future__ import annotations

import time

import pytest

from responses_api.ttlcache import TTLCache

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


def test_clear_all_empties_every_cache_of_the_process_in_one_call() -> None:
    """Every TTLCache registers itself: the test fixtures reset all of them (the gateway's own
    too: routes, keys, tools, context windows, target health) with one call."""
    from responses_api import ttlcache
    from responses_api.orchestration import routing
    from responses_api.upstreams import tokenize

    mine: TTLCache[str, int] = TTLCache(lambda: 60.0)
    mine.put("a", 1)
    routing._routes.put("some-model", None)
    tokenize._windows.put(("http://upstream.invalid", "m"), 4096)
    ttlcache.clear_all()
    assert len(mine) == len(routing._routes) == len(tokenize._windows) == 0


def test_an_entry_may_carry_its_own_ttl() -> None:
    """An MCP server's listing lives for the server's `cache_seconds`, not the cache's TTL."""
    cache: TTLCache[str, int] = TTLCache(lambda: 60.0)
    cache.put("short", 1, ttl=0.2)
    cache.put("long", 2)
    time.sleep(0.25)
    assert cache.get("short") is None and cache.get("long") == (2,)


def test_clear_all_empties_the_ad_hoc_mcp_listings_too() -> None:
    """The runner's listings of client-named MCP servers were a dict of their own, which
    `clear_all` did not reach."""
    from responses_api import ttlcache
    from tool_registry import runner

    runner._adhoc_listings.put((1, (), "http://mcp.invalid/", ()), [{"name": "t"}], ttl=60.0)
    ttlcache.clear_all()
    assert len(runner._adhoc_listings) == 0
