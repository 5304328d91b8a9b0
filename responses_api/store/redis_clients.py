"""The one place Redis clients are made (REDIS_URL): an async client per event loop (a Celery
worker runs its own loop; a client is bound to the loop it was made on), one sync client for
threads (the admin's and /v1/usage's snapshots, /readyz), each with the timeouts of its use.

- "commands" (limits, router health): short commands; Redis gone is an error within 2 s, which
  callers turn into a 503 or a healthy-looking target. A connection error is retried once, on
  the same pooled connection reconnected: after a Redis restart every pooled connection that
  predates it fails its first command ("Connection closed by server"), and without the retry
  that request would be judged against a Redis that is in fact back (rate limits let it
  through unchecked, or a 503 where fail-closed). `from_url` does not apply redis-py's default
  retry (its pool gets none), so it is set here. Timeouts are not retried: the command may
  have run, and a second 2 s wait doubles a real outage's latency.
- "streams" (the event log): reads block for up to 5 s (XREAD), so a longer socket timeout; a
  connection that died while idle (Redis restarted) is replaced by a retry with backoff.

The async clients' connections pack commands with hiredis (`_HiredisPacking`), as redis-py's
sync connections already do when hiredis is installed.

`redis` itself is imported on first use: it is a large part of a process's start-up
(-X importtime), and an embedded deployment (no REDIS_URL) never needs it."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:  # imported on first use at run time (see above)
    import redis
    import redis.asyncio
    import redis.asyncio.retry
    import redis.retry

COMMANDS = "commands"
STREAMS = "streams"

# redis-py's own types (redis >= 5 ships them; types-redis is for redis 4): its clients are not
# generic, so `decode_responses` does not show in the type and replies are typed loosely.
_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], redis.asyncio.Redis]] = (
    weakref.WeakKeyDictionary()
)
_sync: dict[str, redis.Redis] = {}
_sync_lock = threading.Lock()


@overload
def _reconnect_once(asynchronous: Literal[True]) -> redis.asyncio.retry.Retry: ...
@overload
def _reconnect_once(asynchronous: Literal[False]) -> redis.retry.Retry: ...
def _reconnect_once(asynchronous: bool) -> redis.asyncio.retry.Retry | redis.retry.Retry:
    """Retry a command once after a connection error (the pool reconnects that connection)."""
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    if asynchronous:
        from redis.asyncio.retry import Retry as AsyncRetry

        return AsyncRetry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
    from redis.retry import Retry

    return Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))


def _options(use: str) -> dict[str, Any]:
    return {**_use_options(use), "max_connections": _max_connections(), "driver_info": _driver_info()}


def _driver_info() -> Any:
    """What CLIENT SETINFO tells Redis, made once: left to redis-py, every new connection looks
    its version up in the installed packages' metadata (0.4 ms each, on the event loop; a worker
    whose hundreds of runs start at once opens hundreds of connections)."""
    import redis
    from redis.driver_info import DriverInfo

    return DriverInfo(name="redis-py", lib_version=redis.__version__)


def _max_connections() -> int:
    """A connection per concurrent command, bounded as the upstream pool is: a worker's
    hundreds of runs (or a web process's open streams) may each wait on one at once, and
    redis-py's own default (100) made a run past the 100th fail to start (bench/background_capacity.py)."""
    from django.conf import settings

    return max(100, int(settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS))


def _use_options(use: str) -> dict[str, Any]:
    if use == STREAMS:
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialWithJitterBackoff

        return {
            "decode_responses": False,
            "socket_connect_timeout": 2.0,
            "socket_timeout": 15.0,  # > the 5 s XREAD block
            "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), retries=3),
            "health_check_interval": 30,
        }
    return {
        "socket_connect_timeout": 2,
        "socket_timeout": 2,
        "health_check_interval": 30,
        "retry": _reconnect_once(asynchronous=True),
    }


def async_client(url: str, use: str = COMMANDS) -> redis.asyncio.Redis:
    """This event loop's client for `url` and `use` (made on first use)."""
    loop = asyncio.get_running_loop()
    clients = _async.get(loop)
    if clients is None:
        clients = _async[loop] = {}
    client = clients.get((url, use))
    if client is None:
        from redis.asyncio import Redis as AsyncRedis

        client = clients[(url, use)] = AsyncRedis.from_url(url, **_options(use))
        pool = client.connection_pool  # no connection made yet: every one it makes packs in C
        pool.connection_class = _packing_in_c(pool.connection_class)
    return client


class _HiredisPacking:
    """A connection class's commands packed by hiredis (C) with redis-py's own serializer for
    it (`redis.connection.HiredisRespSerializer`), as redis-py's sync connections pack them when
    hiredis is installed; its asyncio connections pack in Python (redis 8.1): 19 µs to pack a
    worker's event-log write (the append script's call: a batch's events and the running view),
    8 µs here (bench/redis_parser.py). The same bytes and errors either way
    (tests/store/test_redis_clients.py)."""

    _serializer: Any  # a redis.connection.HiredisRespSerializer (`_packing_in_c`)

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._serializer.pack(*args)
        return packed


_packing: dict[type, type] = {}


def _packing_in_c(connection_class: type) -> type:
    """`connection_class` (TCP, TLS or a Unix socket's, as the URL chose) packing with hiredis;
    itself where redis-py finds no usable hiredis (its sync connections then pack in Python too)."""
    from redis.connection import HiredisRespSerializer
    from redis.utils import HIREDIS_AVAILABLE

    if not HIREDIS_AVAILABLE or issubclass(connection_class, _HiredisPacking):
        return connection_class
    packing = _packing.get(connection_class)
    if packing is None:
        name = f"HiredisPacking{connection_class.__name__}"
        attributes = {"_serializer": HiredisRespSerializer()}
        packing = _packing[connection_class] = type(name, (_HiredisPacking, connection_class), attributes)
    return packing


def sync_client(url: str) -> redis.Redis:
    """The process's sync client for `url` (thread-safe: it keeps a pool of connections)."""
    client = _sync.get(url)
    if client is None:
        with _sync_lock:
            client = _sync.get(url)
            if client is None:
                from redis import Redis

                client = _sync[url] = Redis.from_url(
                    url,
                    socket_connect_timeout=2,
                    socket_timeout=2,
                    retry=_reconnect_once(asynchronous=False),
                    driver_info=_driver_info(),
                )
    return client


def ping(url: str) -> None:
    """Sync: Redis answers (/readyz), through the shared sync client; raises when it does not."""
    sync_client(url).ping()


def forget() -> None:
    """Tests: clients are made afresh (REDIS_URL may differ between tests)."""
    _async.clear()
    _sync.clear()
