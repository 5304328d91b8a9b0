"""Pooled connections a database restart broke (PostgreSQL only).

The web path answers the one request that meets a broken pooled connection with a 503 and
Retry-After, and its client retries; meanwhile the process checks its pools, so the requests
after it meet none (before, each of the pools' idle connections cost a 503 of its own). A run's
start has no client: before its fix its claim raised (the row stayed `queued` until the
reaper's queue_timeout, an hour by default).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import psycopg
import pytest
from django.db import connections

from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway, queued_background_response, run_claimed_here
from tests.support.upstream import Reply, ScriptedUpstream


def _break_pooled_connections() -> int:
    """What a PostgreSQL restart does to a process's pooled connections, without the restart:
    every server session but the test's own ends; the clients learn it on their next use."""
    with connections["default"].cursor() as cursor:  # the test thread's, held outside the pool
        cursor.execute("SELECT pg_backend_pid()")
        (own,) = cursor.fetchone()
    params = connections["default"].get_connection_params()
    for sync_only in ("cursor_factory", "context"):
        params.pop(sync_only, None)
    with psycopg.connect(**params, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)",
            (own,),
        ).fetchall()
    return len(rows)


def test_a_runs_start_replaces_connections_a_restart_broke(
    gateway: Gateway, gateway_server, scripted: ScriptedUpstream
) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("a pool of server sessions is PostgreSQL's")
    from responses_api.models import Response
    from responses_api.store import db

    pool = connections["default"].pool  # type: ignore[attr-defined]  # PostgreSQL's wrapper has it
    rid = queued_background_response(gateway, "after the restart")
    # Idle connections in the pool, as a worker has between runs.
    with pool.connection() as first, pool.connection() as second:
        first.execute("SELECT 1")
        second.execute("SELECT 1")
    assert pool.get_stats()["pool_available"] >= 2
    assert _break_pooled_connections() >= 2
    try:
        _run_after_the_break(rid, scripted)
    finally:
        # The gateway this session's other tests use lost its sessions too: its pools checked
        # now, or the next test's first requests get a 503 each.
        gateway_server.call(db.check_pools())
    assert Response.objects.get(id=rid).status == "completed"


def _run_after_the_break(rid: str, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="ran"))
    assert run_claimed_here(rid) == "completed"


def test_a_web_process_checks_its_pools_after_the_first_lost_connection(
    gateway: Gateway, gateway_server, scripted: ScriptedUpstream
) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("a pool of server sessions is PostgreSQL's")
    from responses_api.models import Response
    from responses_api.store import db

    scripted.set_default(MODEL, Reply(text="ok"))
    client = gateway.openai().with_options(max_retries=0)

    def create(i: object) -> str:
        return client.responses.create(model=MODEL, input=f"request {i}").status

    with ThreadPoolExecutor(4) as pool:  # idle connections in its pools, as after a busy moment
        assert set(pool.map(create, range(12))) == {"completed"}
    checks = Lines()
    logger = logging.getLogger("gateway.db")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(checks)
    try:
        assert _break_pooled_connections() >= 2
        with pytest.raises(openai.APIStatusError) as first:
            create("the first after the restart")
        assert first.value.status_code == 503 and first.value.response.headers["retry-after"] == "2"
        # Both pools (the threads' and the event loop's) are checked in the background.
        deadline = time.monotonic() + 60
        while len({getattr(r, "pool", None) for r in checks.records} - {None}) < 2:
            assert time.monotonic() < deadline, [r.getMessage() for r in checks.records]
            time.sleep(0.05)
        assert sum(getattr(r, "replaced", 0) for r in checks.records) >= 1, [r.getMessage() for r in checks.records]
        assert [create(i) for i in range(6)] == ["completed"] * 6  # none meets a broken connection
        # The refused create's model call had run: its end is stored `failed` by a task of its own
        # once the database answers (engine/ending.py), and no row is left open.
        deadline = time.monotonic() + 60
        while not Response.objects.filter(tenant_id=gateway.tenant_id, status="failed").exists():
            assert time.monotonic() < deadline, "the refused create's end was never stored"
            time.sleep(0.05)
        assert not Response.objects.filter(tenant_id=gateway.tenant_id, status__in=Response.RUNNING).exists()
    finally:
        logger.removeHandler(checks)
        logger.setLevel(level)
        gateway_server.call(db.check_pools())  # whatever the test left, for the next tests
