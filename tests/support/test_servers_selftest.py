"""Self-tests of the throwaway server launcher (tests/support/servers.py).

No Django here: these run with ``-p no:django`` too, so a broken launcher is
diagnosed apart from the application's tests. Each test starts its own
servers in ``tmp_path``, talks to them with the real client libraries, and
checks that ``stop()`` really ends and reaps the process.
"""

from __future__ import annotations

import glob
import os
import socket
from pathlib import Path

import pytest

from tests.support import servers

pytestmark = pytest.mark.servers_selftest


def _skip_if_opted_out(exc: servers.ServerBinaryMissing) -> None:
    # A developer who chose the embedded configuration may lack the servers;
    # anywhere else (scripts/test, CI) a missing binary is a real failure.
    if os.environ.get("GATEWAY_TEST_DB", "").lower() == "sqlite":
        pytest.skip(str(exc))


def _port_is_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return True
    return False


def _start_postgres(base: Path) -> servers.PostgresServer:
    try:
        return servers.start_postgres(base)
    except servers.ServerBinaryMissing as exc:
        _skip_if_opted_out(exc)
        raise


def _start_redis(base: Path) -> servers.RedisServer:
    try:
        return servers.start_redis(base)
    except servers.ServerBinaryMissing as exc:
        _skip_if_opted_out(exc)
        raise


def test_postgres_starts_answers_and_stops(tmp_path: Path) -> None:
    psycopg = pytest.importorskip("psycopg")
    server = _start_postgres(tmp_path)
    try:
        assert server.url == f"postgres://postgres@127.0.0.1:{server.port}/gateway"
        with psycopg.connect(server.url, connect_timeout=10) as conn:
            row = conn.execute("select 1, current_database(), current_user, current_setting('fsync')").fetchone()
        assert row == (1, "gateway", "postgres", "off")
        assert server.is_running()
    finally:
        server.stop()
    assert not server.is_running()
    assert server._proc.returncode is not None  # reaped: no zombie
    assert _port_is_closed(server.port)
    server.stop()  # idempotent


def test_redis_starts_answers_and_stops(tmp_path: Path) -> None:
    redis = pytest.importorskip("redis")
    server = _start_redis(tmp_path)
    try:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        try:
            assert client.ping() is True
            client.set("k", "v")
            assert client.get("k") == b"v"
        finally:
            client.close()
    finally:
        server.stop()
    assert not server.is_running()
    assert server._proc.returncode is not None
    assert _port_is_closed(server.port)
    server.stop()


def test_two_servers_of_each_kind_side_by_side(tmp_path: Path) -> None:
    # What parallel xdist workers do: distinct ports, no interference.
    first = _start_postgres(tmp_path / "a")
    second = _start_postgres(tmp_path / "b")
    r1 = _start_redis(tmp_path / "a")
    r2 = _start_redis(tmp_path / "b")
    try:
        assert len({first.port, second.port, r1.port, r2.port}) == 4
    finally:
        for server in (r2, r1, second, first):
            server.stop()


def test_missing_binaries_give_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(servers.ServerBinaryMissing, match="scripts/test"):
        servers.find_postgres_bindir()
    with pytest.raises(servers.ServerBinaryMissing, match="scripts/test"):
        servers.find_redis_server()
