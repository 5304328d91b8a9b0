"""store/redis_clients.py: one async client per event loop and use, one sync client per URL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from responses_api.store import redis_clients

pytestmark = pytest.mark.embedded

URL = "redis://127.0.0.1:9/0"  # nothing listens there: making a client connects to nothing


def test_an_event_loop_reuses_its_client_and_another_loop_gets_its_own() -> None:
    async def clients() -> tuple[object, object, object]:
        return (
            redis_clients.async_client(URL),
            redis_clients.async_client(URL),
            redis_clients.async_client(URL, redis_clients.STREAMS),
        )

    first, again, streams = asyncio.run(clients())
    other, _, _ = asyncio.run(clients())
    assert first is again and streams is not first  # one per use: their timeouts differ
    assert other is not first  # a client belongs to the loop it was made on


def test_threads_share_one_sync_client_per_url() -> None:
    assert redis_clients.sync_client(URL) is redis_clients.sync_client(URL)
    with pytest.raises(Exception, match="Connection refused|Error"):
        redis_clients.ping(URL)


# Commands as the gateway sends them: a script's call with a batch's events and the running view
# (bytes, ints, a multi-megabyte value past redis-py's buffer cutoff), names of several words, text
# beyond ASCII, a float score, an empty value, a memoryview.
COMMANDS_SENT = [
    (
        "EVALSHA",
        "0" * 40,
        5,
        *(f"gw:{k}:{{resp_1}}" for k in "evrpx"),
        2,
        "1-0",
        b'{"a":1}',
        "2-0",
        b"{}",
        "set",
        b"7\n{}",
        20000,
        0,
        1,
    ),
    ("SET", "gw:view:{resp_1}", b"\x00\xff" * 3_000_000, "PX", 20000),
    ("CLIENT SETINFO", "LIB-NAME", "redis-py"),
    (b"CONFIG GET", b"maxmemory"),
    ("ZADD", "gw:lim:{t1}", 1795990328.125, "réponse ✓"),
    ("SET", "k", b""),
    ("SET", "k", memoryview(b"held")),
]


def _packed_by_redis_py(*args: Any) -> bytes:
    from redis.asyncio.connection import Connection

    return b"".join(Connection().pack_command(*args))


def test_async_clients_pack_commands_in_c_into_the_same_bytes() -> None:
    from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

    async def connection_classes() -> list[type]:
        urls = (URL, "rediss://127.0.0.1:9/0", "unix:///tmp/nothing.sock")
        return [redis_clients.async_client(url).connection_pool.connection_class for url in urls]

    tcp, tls, unix = asyncio.run(connection_classes())
    # The URL's own class (TLS, a Unix socket), packing with hiredis
    for packing, base in ((tcp, Connection), (tls, SSLConnection), (unix, UnixDomainSocketConnection)):
        assert issubclass(packing, base) and issubclass(packing, redis_clients._HiredisPacking)
        assert packing.pack_command is redis_clients._HiredisPacking.pack_command
    connection = tcp()
    for command in COMMANDS_SENT:
        assert b"".join(connection.pack_command(*command)) == _packed_by_redis_py(*command), command[0]
    # A pipeline's commands, one write
    assert b"".join(connection.pack_commands(COMMANDS_SENT)) == b"".join(_packed_by_redis_py(*c) for c in COMMANDS_SENT)


def test_a_value_hiredis_does_not_take_is_packed_or_refused_as_redis_py_does() -> None:
    from redis.exceptions import DataError

    async def connection_class() -> type:
        return redis_clients.async_client(URL).connection_pool.connection_class

    connection = asyncio.run(connection_class())()
    assert b"".join(connection.pack_command("SET", "k", bytearray(b"x"))) == _packed_by_redis_py("SET", "k", b"x")
    for value in (None, {"a": 1}, True):
        with pytest.raises(DataError):
            _packed_by_redis_py("SET", "k", value)
        with pytest.raises(DataError):
            connection.pack_command("SET", "k", value)
