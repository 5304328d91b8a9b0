"""Usage records, written in batches.

A call that leaves no stored response (a `store: false` response, a call passed through to
/v1/chat/completions or /v1/embeddings) leaves a `UsageRecord`, so the usage API, budgets and
the admin chart count its tokens. An INSERT per call (a thread hop and the ORM's create) cost
the `store: false` path a tenth of its throughput at concurrency 64 (bench/README.md), so
records wait up to `FLUSH_SECONDS` in memory and go out together: one COPY on the async pool
(PostgreSQL), one bulk INSERT (SQLite). Web processes only: the worker runs no `store: false`
response and no pass-through call. These are accounting rows, not responses (a response is still committed
before it is answered): a crash loses at most the last `FLUSH_SECONDS` of them, and the ASGI
lifespan's shutdown writes what is pending (`close`). A connection that breaks just after the
database committed a batch makes that batch be written twice: accepted, for accounting rows. While the database is unavailable they are kept
(up to `MAX_PENDING`) and tried again every `FLUSH_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.utils import timezone

from ..models import UsageRecord
from . import db
from .outages import database_unreachable

log = logging.getLogger("gateway.usage")

# Which endpoint a record counts (the API layer names it without importing the models).
Endpoint = UsageRecord.Endpoint

FLUSH_SECONDS = 0.5
MAX_PENDING = 50_000  # while the database is down: the newest are kept


class UsageWriter:
    def __init__(self, flush_seconds: float = FLUSH_SECONDS) -> None:
        self.flush_seconds = flush_seconds
        self._pending: list[dict[str, Any]] = []
        self._writer: asyncio.Future[None] | None = None
        self._failing = False  # warned once per outage
        # One write at a time per event loop: a flush returns once what was queued before it
        # is written, even when the writer task was in the middle of writing part of it.
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    def add(self, **record: Any) -> None:
        """Queue a record (the `UsageRecord` fields); it is written within `flush_seconds`."""
        record.setdefault("created_at", timezone.now())
        self._pending.append(record)
        writer = self._writer
        if writer is None or writer.done() or writer.get_loop() is not asyncio.get_running_loop():
            self._writer = asyncio.ensure_future(self._write_soon())

    async def _write_soon(self) -> None:
        while self._pending:
            await asyncio.sleep(self.flush_seconds)
            await self.flush()

    async def flush(self) -> bool:
        """Write every record queued so far, in one statement, after any write under way. While
        the database is unavailable they stay for the next try; a record it refuses (its tenant
        deleted meanwhile) is dropped, not the batch."""
        async with self._loop_lock():
            return await self._write_pending()

    async def close(self) -> None:
        """At shutdown (the ASGI lifespan): write what is queued, and say what could not be."""
        if not await self.flush():
            log.error("%d usage records are lost: the database is unreachable at shutdown", len(self._pending))

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _write_pending(self) -> bool:
        batch, self._pending = self._pending, []
        if not batch:
            return True
        try:
            await _insert(batch)
        except Exception as exc:  # noqa: BLE001 - the answers went out long ago: log, keep or drop
            if not database_unreachable(exc):
                await db.run(_insert_each, batch)
                return True
            if not self._failing:
                log.warning("could not write %d usage records (kept, tried again): %s", len(batch), exc)
            self._failing = True
            self._pending = (batch + self._pending)[-MAX_PENDING:]
            return False
        if self._failing:
            log.warning("usage records written again (%d)", len(batch))
            self._failing = False
        return True


_COLUMNS = (
    "tenant_id",
    "api_key_id",
    "endpoint",
    "model",
    "upstream",
    "status",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "latency_ms",
    "created_at",
)


def _bulk_create(batch: list[dict[str, Any]]) -> None:
    UsageRecord.objects.bulk_create([UsageRecord(**record) for record in batch])


async def _insert(batch: list[dict[str, Any]]) -> None:
    if not db.native_async():  # SQLite
        await db.run(_bulk_create, batch)
        return

    # COPY on the async pool: no thread hop, no model instances, no SQL of ten placeholders a
    # row (bulk_create's CPU a row is the gateway's, COPY's is the server's).
    table = UsageRecord._meta.db_table
    await db.copy_rows(
        f'COPY "{table}" ({", ".join(_COLUMNS)}) FROM STDIN', ([r.get(c) for c in _COLUMNS] for r in batch)
    )


def _insert_each(batch: list[dict[str, Any]]) -> None:
    for record in batch:
        try:
            UsageRecord.objects.create(**record)
        except Exception as exc:  # noqa: BLE001 - one refused record must not stop the others
            if record.get("api_key_id") is not None:  # the key was deleted meanwhile: as SET_NULL does
                _insert_each([{**record, "api_key_id": None}])
            else:
                log.warning("dropped a usage record the database refused (%s): %s", record, exc)


usage_writer = UsageWriter()
