"""Usage records (store/usage.py) go to the database in batches: one INSERT for many calls,
written within the flush interval, kept and written later when the database fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from responses_api.store import db, usage
from responses_api.store.usage import UsageWriter

pytestmark = pytest.mark.embedded


def _record(tenant_id: int, n: int) -> dict[str, Any]:
    return dict(
        tenant_id=tenant_id,
        api_key_id=None,
        endpoint="responses (store: false)",
        model="m",
        upstream="u",
        status=200,
        input_tokens=n,
        output_tokens=1,
        latency_ms=3,
    )


@pytest.fixture(autouse=True)
async def _close_the_pool():
    """The writer COPYs on this test loop's async pool (PostgreSQL)."""
    yield
    from responses_api.store.db import close_pool

    await close_pool()


@pytest.fixture
def tenant_id(transactional_db) -> int:
    from responses_api.models import Tenant

    return Tenant.objects.create(name="usage-writer").id


def _stored(tenant_id: int) -> list[int]:
    from responses_api.models import UsageRecord

    stored = list(UsageRecord.objects.filter(tenant_id=tenant_id).values_list("input_tokens", flat=True))
    counted = [n for n in stored if n is not None]
    assert len(counted) == len(stored), stored  # every record counts its input tokens
    return sorted(counted)


@pytest.fixture
def inserts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each INSERT the writer sends."""
    sizes: list[int] = []
    real = usage._insert

    async def counted(batch: list[dict[str, Any]]) -> None:
        sizes.append(len(batch))
        await real(batch)

    monkeypatch.setattr(usage, "_insert", counted)
    return sizes


async def test_many_calls_are_one_insert_within_the_interval(tenant_id: int, inserts: list[int]) -> None:
    writer = UsageWriter(flush_seconds=0.2)
    for n in range(50):
        writer.add(**_record(tenant_id, n))
    # Not yet: the answer never waits for it. Checked before any await, so a slow machine
    # cannot let the timer fire first.
    assert inserts == []
    # Waits on the outcome, not on a guess of how long a loaded machine takes to write it.
    deadline = asyncio.get_running_loop().time() + 30
    while await db.run(_stored, tenant_id) != list(range(50)):
        assert asyncio.get_running_loop().time() < deadline, inserts
        await asyncio.sleep(0.05)
    assert inserts == [50]


async def test_records_survive_a_failed_write(
    tenant_id: int, inserts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = UsageWriter(flush_seconds=60)  # flushed by hand below
    real = usage._insert
    from django.db.utils import OperationalError

    async def down(batch: list[dict[str, Any]]) -> None:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(usage, "_insert", down)
    writer.add(**_record(tenant_id, 1))
    assert await writer.flush() is False
    writer.add(**_record(tenant_id, 2))
    monkeypatch.setattr(usage, "_insert", real)
    assert await writer.flush() is True
    assert await db.run(_stored, tenant_id) == [1, 2]
    assert await writer.flush() is True  # nothing left: no empty INSERT
    assert await db.run(_stored, tenant_id) == [1, 2]


async def test_a_record_the_database_refuses_does_not_stop_the_others(tenant_id: int, inserts: list[int]) -> None:
    writer = UsageWriter(flush_seconds=60)
    writer.add(**_record(tenant_id, 1))
    writer.add(**_record(tenant_id + 10_000, 2))  # its tenant is gone: a foreign-key violation
    writer.add(**_record(tenant_id, 3))
    assert await writer.flush() is True
    assert await db.run(_stored, tenant_id) == [1, 3]
    assert await writer.flush() is True  # the refused record is not tried again


async def test_a_flush_waits_for_the_write_under_way(tenant_id: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shutdown's flush (and a budget's seed) must not return while the writer task is still
    writing records queued before it: they would be lost with the loop, or missed by the seed."""
    real = usage._insert
    writing = asyncio.Event()

    async def slow(batch: list[dict[str, Any]]) -> None:
        if not writing.is_set():  # the writer task's write is slow; later ones are not
            writing.set()
            await asyncio.sleep(0.3)
        await real(batch)

    monkeypatch.setattr(usage, "_insert", slow)
    writer = UsageWriter(flush_seconds=0.01)
    writer.add(**_record(tenant_id, 1))
    await asyncio.wait_for(writing.wait(), 5)  # the writer task took record 1 and is writing it
    writer.add(**_record(tenant_id, 2))
    await writer.close()
    assert await db.run(_stored, tenant_id) == [1, 2]


async def test_the_writer_tries_again_until_the_database_is_back(
    tenant_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db.utils import OperationalError

    real = usage._insert
    failures = [OperationalError("could not connect to server")] * 2

    async def flaky(batch: list[dict[str, Any]]) -> None:
        if failures:
            raise failures.pop()
        await real(batch)

    monkeypatch.setattr(usage, "_insert", flaky)
    writer = UsageWriter(flush_seconds=0.05)
    writer.add(**_record(tenant_id, 1))
    for _ in range(100):
        await asyncio.sleep(0.05)
        if await db.run(_stored, tenant_id):
            break
    assert failures == [] and await db.run(_stored, tenant_id) == [1]


async def test_a_deleted_keys_record_is_kept_without_its_key(tenant_id: int) -> None:
    writer = UsageWriter(flush_seconds=60)
    writer.add(**{**_record(tenant_id, 1), "api_key_id": 987_654})  # deleted before the flush
    assert await writer.flush() is True

    def key_ids() -> list[int | None]:
        from responses_api.models import UsageRecord

        return list(UsageRecord.objects.filter(tenant_id=tenant_id).values_list("api_key_id", flat=True))

    assert await db.run(key_ids) == [None]
