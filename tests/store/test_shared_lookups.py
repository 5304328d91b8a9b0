"""Concurrent misses of a cached look-up share one run (store/db.py `run_shared`): when a key's,
a route's or a tool set's cache entry expires, the requests in flight run it once, not once each."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from responses_api.store import db
from responses_api.ttlcache import TTLCache

pytestmark = pytest.mark.embedded


class Lookup:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        with self._lock:
            self.calls += 1
        time.sleep(0.05)  # long enough for every caller to arrive while it runs
        if self.fail:
            raise LookupError(name)
        return name.upper()


def test_callers_arriving_while_a_lookup_runs_share_it() -> None:
    lookup = Lookup()

    async def main() -> list[str]:
        return await asyncio.gather(*(db.run_shared(("route", "m"), lookup, "m") for _ in range(64)))

    assert asyncio.run(main()) == ["M"] * 64
    assert lookup.calls == 1


def test_other_flights_and_later_callers_run_their_own() -> None:
    lookup = Lookup()

    async def main() -> None:
        assert await asyncio.gather(db.run_shared("a", lookup, "a"), db.run_shared("b", lookup, "b")) == ["A", "B"]
        assert await db.run_shared("a", lookup, "a") == "A"  # the first one has landed

    asyncio.run(main())
    assert lookup.calls == 3


def test_an_error_reaches_every_caller_and_is_not_remembered() -> None:
    failing = Lookup(fail=True)

    async def main() -> list[BaseException | str]:
        return await asyncio.gather(*(db.run_shared("k", failing, "k") for _ in range(8)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, LookupError) for r in results) and failing.calls == 1
    assert asyncio.run(db.run_shared("k", Lookup(), "k")) == "K"


def test_a_caller_that_goes_away_does_not_cancel_the_others() -> None:
    lookup = Lookup()

    async def main() -> str:
        first = asyncio.ensure_future(db.run_shared("k", lookup, "k"))
        second = asyncio.ensure_future(db.run_shared("k", lookup, "k"))
        await asyncio.sleep(0.01)
        first.cancel()  # its client disconnected
        return await second

    assert asyncio.run(main()) == "K" and lookup.calls == 1


def test_run_cached_remembers_and_shares() -> None:
    lookup = Lookup()
    cache: TTLCache[str, str] = TTLCache(lambda: 60)

    async def main() -> list[str]:
        first = await asyncio.gather(*(db.run_cached(cache, "k", lookup, name="k") for _ in range(16)))
        return [*first, await db.run_cached(cache, "k", lookup, name="k")]

    assert asyncio.run(main()) == ["K"] * 17 and lookup.calls == 1
