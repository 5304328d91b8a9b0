"""The event log of worker-run responses: append as it happens, replay from any sequence number, follow live.

Redis Streams when REDIS_URL is set (any web process can serve any
response); an in-process log otherwise (embedded mode: durable only as long
as the process lives). Entry ids are `<sequence_number + 1>-0`, so Redis
itself refuses a duplicate or out-of-order append.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

from .redis_clients import STREAMS, async_client
from .redis_or_memory import RedisOrMemory

TERMINAL_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
CANCEL_PREFIX = "gw:cancel:"
EVENTS_PREFIX = "gw:events:"


class EventLog:
    async def append(self, response_id: str, event: dict[str, Any]) -> bool:
        """Append one event; False if its sequence number is already there (a duplicate)."""
        raise NotImplementedError

    def read(
        self, response_id: str, after: int = -1, *, idle_seconds: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Events with sequence_number > after, then live ones, until the terminal event; with
        `idle_seconds`, also ends (without it) after that long without an event, so that the
        caller can look at the stored response (orchestration/worker.follow_log)."""
        raise NotImplementedError

    async def last_sequence_number(self, response_id: str) -> int:
        raise NotImplementedError

    async def snapshot(self, response_id: str) -> list[dict[str, Any]]:
        """Every event logged so far (no waiting)."""
        raise NotImplementedError

    async def request_cancel(self, response_id: str) -> None:
        raise NotImplementedError

    async def cancel_requested(self, response_id: str) -> bool:
        raise NotImplementedError

    async def cancels_requested(self, response_ids: list[str]) -> set[str]:
        """Which of these responses a cancel was requested for (a worker's runs, at once)."""
        raise NotImplementedError

    async def forget(self, response_ids: list[str]) -> None:
        """Drop these responses' logs now (a purge: their content goes everywhere)."""
        raise NotImplementedError


class MemoryEventLog(EventLog):
    def __init__(self) -> None:
        self._events: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._changed: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._cancels: set[str] = set()
        self._expiry: dict[str, float] = {}

    def _expire(self) -> None:
        now = time.monotonic()
        for rid in [r for r, t in self._expiry.items() if t <= now]:
            self._events.pop(rid, None)
            self._changed.pop(rid, None)
            self._expiry.pop(rid, None)
            self._cancels.discard(rid)

    async def append(self, response_id: str, event: dict[str, Any]) -> bool:
        events = self._events[response_id]
        if event["sequence_number"] != len(events):
            return False
        events.append(event)
        if event["type"] in TERMINAL_TYPES:
            self._expiry[response_id] = time.monotonic() + settings.GATEWAY_EVENT_LOG_TTL_SECONDS
        changed = self._changed[response_id]
        changed.set()
        self._changed[response_id] = asyncio.Event()
        self._expire()
        return True

    async def read(
        self, response_id: str, after: int = -1, *, idle_seconds: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        position = after + 1
        while True:
            events = self._events.get(response_id, [])
            waiter = self._changed[response_id]
            while position < len(events):
                event = events[position]
                position += 1
                yield event
                if event["type"] in TERMINAL_TYPES:
                    return
            try:
                await asyncio.wait_for(waiter.wait(), idle_seconds)
            except TimeoutError:
                return

    async def last_sequence_number(self, response_id: str) -> int:
        return len(self._events.get(response_id, [])) - 1

    async def snapshot(self, response_id: str) -> list[dict[str, Any]]:
        return list(self._events.get(response_id, []))

    async def request_cancel(self, response_id: str) -> None:
        self._cancels.add(response_id)

    async def cancel_requested(self, response_id: str) -> bool:
        return response_id in self._cancels

    async def cancels_requested(self, response_ids: list[str]) -> set[str]:
        return self._cancels.intersection(response_ids)

    async def forget(self, response_ids: list[str]) -> None:
        for rid in response_ids:
            self._events.pop(rid, None)
            self._expiry.pop(rid, None)


class RedisEventLog(EventLog):
    def __init__(self, url: str) -> None:
        self.url = url

    def _client(self) -> Any:
        return async_client(self.url, STREAMS)

    async def append(self, response_id: str, event: dict[str, Any]) -> bool:
        from redis.exceptions import ResponseError

        key = EVENTS_PREFIX + response_id
        client = self._client()
        try:
            await client.xadd(
                key, {"e": json.dumps(event, separators=(",", ":"))}, id=f"{event['sequence_number'] + 1}-0"
            )
        except ResponseError as exc:
            if "equal or smaller" in str(exc):
                return False
            raise
        ttl = settings.GATEWAY_EVENT_LOG_TTL_SECONDS
        # Until the end, keep the log for the longest job; after it, for the configured TTL.
        await client.expire(key, ttl if event["type"] in TERMINAL_TYPES else settings.CELERY_TASK_TIME_LIMIT + ttl)
        return True

    async def read(
        self, response_id: str, after: int = -1, *, idle_seconds: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        key = EVENTS_PREFIX + response_id
        client = self._client()
        last_id = f"{after + 1}-0" if after >= 0 else "0-0"
        block_ms = 5000 if idle_seconds is None else max(1, min(5000, int(idle_seconds * 1000)))
        while True:
            batches = await client.xread({key: last_id}, block=block_ms, count=500)
            if not batches and idle_seconds is not None:
                return
            for _, entries in batches or []:
                for entry_id, fields in entries:
                    last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    event = json.loads(fields[b"e"])
                    yield event
                    if event["type"] in TERMINAL_TYPES:
                        return

    async def last_sequence_number(self, response_id: str) -> int:
        entries = await self._client().xrevrange(EVENTS_PREFIX + response_id, count=1)
        if not entries:
            return -1
        entry_id = entries[0][0]
        entry_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        return int(entry_id.split("-")[0]) - 1

    async def snapshot(self, response_id: str) -> list[dict[str, Any]]:
        entries = await self._client().xrange(EVENTS_PREFIX + response_id)
        return [json.loads(fields[b"e"]) for _, fields in entries]

    async def request_cancel(self, response_id: str) -> None:
        await self._client().set(CANCEL_PREFIX + response_id, b"1", ex=settings.CELERY_TASK_TIME_LIMIT + 600)

    async def cancel_requested(self, response_id: str) -> bool:
        return bool(await self._client().exists(CANCEL_PREFIX + response_id))

    async def cancels_requested(self, response_ids: list[str]) -> set[str]:
        # One round trip for all of a worker's runs; each command names one key, so a cluster
        # client splits the pipeline by slot.
        async with self._client().pipeline(transaction=False) as pipe:
            for response_id in response_ids:
                pipe.exists(CANCEL_PREFIX + response_id)
            found = await pipe.execute()
        return {response_id for response_id, n in zip(response_ids, found, strict=True) if n}

    async def forget(self, response_ids: list[str]) -> None:
        if response_ids:
            await self._client().delete(*[EVENTS_PREFIX + r for r in response_ids])


event_log: RedisOrMemory[EventLog] = RedisOrMemory(RedisEventLog, MemoryEventLog)


def forget_now(response_ids: list[str]) -> None:
    """Sync callers (a purge): drop these responses' logs; they expire on their own if Redis
    cannot be reached (GATEWAY_EVENT_LOG_TTL_SECONDS)."""
    try:
        async_to_sync(event_log().forget)(response_ids)
    except Exception:  # noqa: BLE001 - Redis unreachable, whatever it raises: the logs expire on their own
        logging.getLogger("gateway.eventlog").warning(
            "could not drop the event logs of %d purged response(s)", len(response_ids)
        )
