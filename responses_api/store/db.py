"""Database access from async code.

`run`: sync ORM work in the loop's executor, one short call per transaction, the
connection released at once. `fetch_one`: one raw SQL statement on PostgreSQL,
awaited on the event loop itself through a small psycopg async pool (the hot
path: storing a finished response), with no thread hop and no checkout from the
threads' pool. On this machine the hop and checkout cost about as much wall
time as the statement itself at low load (bench/README.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections

from ..ttlcache import TTLCache

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

log = logging.getLogger("gateway.db")


def _release(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        # Hand the connection back to the pool (or close it) so that no thread
        # holds one across an upstream call or a stream.
        for conn in connections.all(initialized_only=True):
            if not conn.in_atomic_block:
                conn.close()


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `fn` in the loop's default executor (not a per-request thread)."""
    result: T = await sync_to_async(functools.partial(_release, fn), thread_sensitive=False)(*args, **kwargs)
    return result


def _atomic(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    from django.db import transaction

    with transaction.atomic():
        return fn(*args, **kwargs)


async def run_in_transaction(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`run`, with `fn`'s statements in one transaction: several reads that would each be a
    transaction of their own in autocommit (a worker's job load) cost the database, and a
    transaction-mode pooler such as PgBouncer, one."""
    return await run(_atomic, fn, *args, **kwargs)


async def run_cached(cache: TTLCache[K, T], key: K, fn: Callable[..., T], **kwargs: Any) -> T:
    """`run(fn, **kwargs)`, remembered in `cache` under `key` (a hit costs no thread hop);
    concurrent misses share one run (`run_shared`)."""
    cached = cache.get(key)
    if cached is not None:
        return cached[0]
    return await run_shared((id(cache), key), _put, cache, key, fn, kwargs)


def _put(cache: TTLCache[K, T], key: K, fn: Callable[..., T], kwargs: dict[str, Any]) -> T:
    return cache.put(key, fn(**kwargs))


# Each flight's task has the result type of its own look-up.
_flights: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, asyncio.Task[Any]]] = (
    weakref.WeakKeyDictionary()
)


async def run_shared(flight: Hashable, fn: Callable[..., T], *args: Any) -> T:
    """`run(fn, *args)`, one at a time per `flight` on this loop: callers that come while one
    runs get its result (or its error). A cached look-up (key, route, tools) expires for every
    request in flight at once; without this each of them, 64 at c=64, ran the same queries
    (bench/README.md, "PostgreSQL CPU per stored create"). The run is a task of its own, so a
    caller that goes away (a client disconnect) does not cancel it for the others."""
    loop = asyncio.get_running_loop()
    flights = _flights.setdefault(loop, {})
    task = flights.get(flight)
    if task is None:
        task = loop.create_task(run(fn, *args))
        flights[flight] = task
        task.add_done_callback(functools.partial(_landed, flights, flight))
    return await asyncio.shield(task)


def _landed(flights: dict[Hashable, asyncio.Task[Any]], flight: Hashable, task: asyncio.Task[Any]) -> None:
    if flights.get(flight) is task:
        del flights[flight]
    if not task.cancelled():
        task.exception()  # retrieved: its callers (if any are left) got it


_vendors: dict[str, str] = {}  # a database ENGINE's vendor


def native_async() -> bool:
    """Whether `fetch_one` is available (PostgreSQL; SQLite has no async driver). Asked by
    ENGINE: `connections["default"]` in a request's task builds a connection wrapper of its own
    (Django's connections are per task), 1-2% of a background create's CPU (bench/README.md)."""
    engine = connections.settings["default"]["ENGINE"]
    vendor = _vendors.get(engine)
    if vendor is None:
        vendor = _vendors[engine] = connections["default"].vendor
    return vendor == "postgresql"


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


async def _pool() -> Any:
    from psycopg_pool import AsyncConnectionPool

    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        params = connections["default"].get_connection_params()
        for sync_only in ("cursor_factory", "context"):  # Django's (sync, client-side binding) adapters
            params.pop(sync_only, None)
        sizing = settings.DATABASES["default"].get("OPTIONS", {}).get("pool") or {}
        pool = AsyncConnectionPool(
            kwargs={**params, "autocommit": True},
            min_size=1,
            max_size=sizing.get("max_size", 20),
            timeout=sizing.get("timeout", 5.0),
            reconnect_timeout=sizing.get("reconnect_timeout", 5.0),
            open=False,
            name="gateway-async",
        )
        _pools[loop] = pool
        await pool.open()
    return pool


async def fetch_one(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement (autocommit: atomic by itself); its first row, if it returns rows."""
    pool = await _pool()
    async with pool.connection() as conn:
        cursor = await conn.execute(sql, params)
        # `rownumber`, not `description`: both say whether the statement returned rows, and
        # `description` builds a Column object per column first (35 for a claimed row).
        return await cursor.fetchone() if cursor.rownumber is not None else None


async def copy_rows(sql: str, rows: Iterable[Sequence[Any]]) -> None:
    """`COPY ... FROM STDIN` the rows (PostgreSQL): one statement, atomic by itself."""
    pool = await _pool()
    async with pool.connection() as conn, conn.cursor() as cursor, cursor.copy(sql) as copy:
        for row in rows:
            await copy.write_row(row)


def _check_threads_pool() -> None:
    pool = getattr(connections["default"], "pool", None)  # Django's psycopg pool (PostgreSQL only)
    if pool is not None:
        pool.check()


async def check_pools() -> None:
    """Test every idle connection of this process's pools, replacing the broken ones.

    After PostgreSQL restarts (or a pooler drops its clients), each pooled connection fails on
    its next use; a caller with nobody to retry for it (a worker's run) checks the pools once on
    its first such error rather than meeting them one by one. A check costs a round trip per
    idle connection, so it is done then, not on every checkout."""
    if not native_async():
        return
    await run(_check_threads_pool)
    pool = _pools.get(asyncio.get_running_loop())
    if pool is not None:
        await pool.check()


# A lasting outage fails every request; their pools are checked at most this often meanwhile.
POOL_CHECK_EVERY = 2.0
_threads_pool_check = threading.Lock()  # one check of the threads' pool at a time, process-wide
_threads_pool_checked_at = -math.inf
_async_pool_checks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[float, asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary()
)


def check_pools_soon() -> None:
    """A pooled connection was found lost (outages.unavailable): the pools' idle connections
    are tested in the background, the broken ones replaced.

    A PostgreSQL restart breaks every pooled connection at once, and each shows it only on its
    next use: without this a web process answered a 503 for each of them (its two pools, up
    to DB_POOL_MAX_SIZE each), and a client's retries met the next ones. The threads' pool is
    checked on a thread of its own (a check held up by an unresponsive server then holds no
    executor thread), this loop's async pool as a task; at most one check of each at a time
    and one per POOL_CHECK_EVERY seconds. A worker's run checks them itself, awaited, before
    it tries once more (orchestration/worker.py)."""
    if not native_async():
        return
    _check_threads_pool_soon()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a database thread: the loop's own pool is checked when the loop meets a loss
        return
    pool = _pools.get(loop)
    if pool is None:
        return
    last = _async_pool_checks.get(loop)
    if last is not None and (not last[1].done() or loop.time() - last[0] < POOL_CHECK_EVERY):
        return
    _async_pool_checks[loop] = (loop.time(), loop.create_task(_check_async_pool(pool)))


def _check_threads_pool_soon() -> None:
    global _threads_pool_checked_at
    if time.monotonic() - _threads_pool_checked_at < POOL_CHECK_EVERY:
        return
    if not _threads_pool_check.acquire(blocking=False):
        return
    _threads_pool_checked_at = time.monotonic()

    def check() -> None:
        try:
            pool = getattr(connections["default"], "pool", None)
            if pool is not None:
                before = pool.get_stats()
                pool.check()
                _report_check(pool.name, before, pool.get_stats())
        except Exception as exc:  # noqa: BLE001 - a check; the next loss starts another
            log.warning("checking the database pool failed: %s: %s", type(exc).__name__, str(exc)[:200])
        finally:
            _threads_pool_checked_at = time.monotonic()
            _threads_pool_check.release()

    threading.Thread(target=check, name="gateway-db-pool-check", daemon=True).start()


async def _check_async_pool(pool: Any) -> None:
    before = pool.get_stats()
    try:
        await pool.check()
    except Exception as exc:  # noqa: BLE001 - a check; the next loss starts another
        log.warning("checking the database pool failed: %s: %s", type(exc).__name__, str(exc)[:200])
        return
    _report_check(pool.name, before, pool.get_stats())


def _report_check(name: str, before: dict[str, int], after: dict[str, int]) -> None:
    lost = after.get("connections_lost", 0) - before.get("connections_lost", 0)
    log.log(
        logging.WARNING if lost else logging.INFO,
        "database pool %s checked after a lost connection: %d broken connections replaced",
        name,
        lost,
        extra={"pool": name, "replaced": lost},
    )


async def close_pool() -> None:
    """Close this loop's async pool (at shutdown)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()


__all__ = [
    "run",
    "run_shared",
    "fetch_one",
    "copy_rows",
    "native_async",
    "check_pools",
    "check_pools_soon",
    "close_pool",
    "close_old_connections",
]
