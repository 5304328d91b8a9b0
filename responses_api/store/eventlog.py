"""The event log of worker-run responses: append as it happens, replay from any sequence number, follow live.

Redis Streams when REDIS_URL is set (any web process can serve any
response); an in-process log otherwise (embedded mode: durable only as long
as the process lives). Entry ids are `<sequence_number + 1>-0`, so Redis
itself refuses a duplicate or out-of-order append.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator
from enum import IntEnum
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

from ..protocol.wirejson import dumpb
from .redis_clients import STREAMS, async_client
from .redis_or_memory import RedisOrMemory

TERMINAL_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
CANCEL_PREFIX = "gw:cancel:"
EVENTS_PREFIX = "gw:events:"
VIEW_PREFIX = "gw:view:"
GONE_PREFIX = "gw:gone:"  # a running response deleted: its worker may still write a view, polls ignore it
# Someone follows the response's log live (a resumed stream, a streamed background create, a
# WebSocket turn): its worker writes events as they come instead of holding them
# (orchestration/worker.LogWriter).
READERS_PREFIX = "gw:readers:"
READERS_MARK_SECONDS = 30  # a reader's mark lasts this long; it renews it every third of it
# Someone polls the running response (its view): its worker writes the view and the events it
# reflects about once a second. Each poll that finds a view renews the mark.
POLLED_PREFIX = "gw:polled:"
POLLED_MARK_SECONDS = 30
# The log holds its terminal event: it takes nothing more (no event, no running view). Set in the
# same command as the terminal event. A run whose end someone else wrote (a forced cancel, the
# reaper, while its worker still lives and writes what it held) cannot append events after the
# end, which a reader resuming past the end would get, nor bring back a view a poll would show
# as running. It lives as long as the ended log.
ENDED_PREFIX = "gw:ended:"
# Cancels are also announced here (the response id), so that a worker learns of one at once
# from one subscription per process instead of probing each run's key (orchestration/worker.py).
# A channel is not a key: a cluster broadcasts classic PUBLISH to every node, so no command
# spans two slots; the key (gw:cancel:{resp_...}) stays the record a worker sweeps for.
CANCELS_CHANNEL = "gw:cancels"
# A reader or a poll came to a response nobody looked at ("f <id>" or "p <id>", as its mark is
# first set): its worker, subscribed once per process, writes what it held at once
# (orchestration/worker._UnseenRuns). A classic channel too, for the same reason.
WATCHED_CHANNEL = "gw:watched"


def key(prefix: str, response_id: str) -> str:
    """`prefix{response_id}`: the response's hash tag, so all of its keys share one slot."""
    return f"{prefix}{{{response_id}}}"


def view_ttl() -> float:
    """How long a running view lives unless its worker writes or touches it again: its worker
    touches it every GATEWAY_HEARTBEAT_SECONDS (orchestration/worker.LogWriter), so a view
    outlives a dead worker by about as long as the reaper waits (4 heartbeats) before it ends the
    response in the database; a poll then reads the database again."""
    return 4 * float(settings.GATEWAY_HEARTBEAT_SECONDS)


class Watch(IntEnum):
    """Who looks at a running response's log, as its worker learns it (the marks above)."""

    UNSEEN = 0  # nobody: nothing it holds back can be missed
    POLLED = 1  # a poll reads its running view
    FOLLOWED = 2  # a reader follows the log live


# A poll's read of the running view, which also marks the response as polled when the view is
# there and the poller's tenant's (ARGV[2]: "<tenant id>\n", the view's prefix; empty: no mark),
# and announces a mark that was not there (ARGV[3]: the message, ARGV[4]: WATCHED_CHANNEL). The
# three keys share the response's slot. The mark is best effort (pcall): a Redis out of memory
# refuses the SET, and the poll still reads the view.
_POLL_VIEW = """
local view = redis.call('GET', KEYS[1])
local gone = redis.call('EXISTS', KEYS[2])
local poller = ARGV[2]
if view and gone == 0 and #poller > 0 and string.sub(view, 1, #poller) == poller then
  local before = redis.pcall('SET', KEYS[3], '1', 'EX', ARGV[1], 'GET')
  if before == false then
    redis.pcall('PUBLISH', ARGV[4], ARGV[3])
  end
end
return {view, gone}
"""


# A batch of a run's events in one command (RedisEventLog.append_batch): KEYS are the response's
# log, view, reader's mark, poll's mark and ended mark (one slot: its tag). ARGV: the number of
# events, each event's entry id and JSON, then the view's fate ("set" with its value and time to
# live in ms, "del": the batch ends with the terminal event, or ""), the log's expiry in seconds
# (0: leave it) and "1" to answer who looks (the two marks). An id already in the log (a retried
# batch) is skipped; any other refusal (maxmemory) ends the script there with that error, after
# the events before it: a prefix, never a view ahead of the log. A log marked ended takes
# nothing; a terminal event the log took marks it (with the log's expiry). It answers {events
# added, reader's mark, poll's mark}.
_APPEND = """
local n = tonumber(ARGV[1])
local at = 2 + 2 * n
local added = 0
if redis.call('EXISTS', KEYS[5]) == 0 then
  local last = false
  for i = 0, n - 1 do
    local r = redis.pcall('XADD', KEYS[1], ARGV[2 + 2 * i], 'e', ARGV[3 + 2 * i])
    last = not (type(r) == 'table' and r.err)
    if not last then
      if not string.find(r.err, 'equal or smaller', 1, true) then
        return redis.error_reply(r.err)
      end
    else
      added = added + 1
    end
  end
  if ARGV[at] == 'set' then
    redis.call('SET', KEYS[2], ARGV[at + 1], 'PX', ARGV[at + 2])
  elseif ARGV[at] == 'del' then
    redis.call('DEL', KEYS[2])
  end
  if ARGV[at + 3] ~= '0' then
    redis.call('EXPIRE', KEYS[1], ARGV[at + 3])
  end
  if ARGV[at] == 'del' and last then
    if ARGV[at + 3] ~= '0' then
      redis.call('SET', KEYS[5], '1', 'EX', ARGV[at + 3])
    else
      redis.call('SET', KEYS[5], '1')
    end
  end
end
if ARGV[at + 4] == '1' then
  return {added, redis.call('GET', KEYS[3]), redis.call('GET', KEYS[4])}
end
return {added}
"""


def _is_terminal(events: list[dict[str, Any]]) -> bool:
    return bool(events) and events[-1]["type"] in TERMINAL_TYPES


class EventLog:
    async def append(self, response_id: str, event: dict[str, Any]) -> bool:
        """Append one event; False if its sequence number is already there (a duplicate)."""
        return await self.append_many(response_id, [event]) == 1

    async def append_many(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        view: tuple[int, bytes] | None = None,
        expire: bool = True,
    ) -> int:
        """Append events in order, in one round trip; those already there (a retried batch) are
        skipped. Returns how many were new. `view`: (tenant id, Response JSON) of the running
        response after these events, written after them (never ahead of the log); a terminal
        event drops the view instead. `expire`: (re)set the log's expiry (a writer does it on its
        first batch and its last; the terminal event always does).

        A log that holds its terminal event takes nothing more (0: the batch, its view and all,
        is dropped): the end is the last event a reader gets, whoever wrote it. A terminal event
        whose sequence number another event took meanwhile is refused like any duplicate, and
        the log is not ended (orchestration/worker._append_end then writes the end after what is there)."""
        return (await self.append_batch(response_id, events, view=view, expire=expire))[0]

    async def append_batch(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        view: tuple[int, bytes] | None = None,
        expire: bool = True,
        probe_watchers: bool = False,
    ) -> tuple[int, Watch]:
        """`append_many`, and with `probe_watchers` who looks at the log (a reader's mark, `read`;
        a poll's, `running_view`), in the same round trip: FOLLOWED where the log cannot tell (a
        worker then writes every batch at once, as it does for a reader)."""
        raise NotImplementedError

    async def watchers(self, response_ids: list[str]) -> list[Watch]:
        """Who looks at each of these responses' logs, in one round trip (a worker's unseen runs)."""
        return [Watch.FOLLOWED for _ in response_ids]

    async def running_view(self, response_id: str, *, tenant_id: int | None = None) -> tuple[int, bytes] | None:
        """(tenant id, Response JSON) of a running worker response, if its worker wrote one; a
        view of `tenant_id` found marks the response as polled (its worker then keeps the view
        about a second behind: orchestration/worker.LogWriter)."""
        raise NotImplementedError

    async def touch_view(self, response_id: str) -> None:
        """The worker is alive and the view still true: keep it (view_ttl)."""
        raise NotImplementedError

    async def hide_view(self, response_id: str) -> None:
        """The response was deleted while it ran: polls read the database (a 404) from now on,
        whatever its worker still writes."""
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

    # Whether `cancel_feed` pushes cancels; if not, a worker asks with `cancels_requested`.
    pushes_cancels = False

    def cancel_feed(self) -> AsyncGenerator[str | None, None]:
        """Cancels as they are requested: first None once subscribed (a cancel requested before
        that is only in the keys: sweep them with `cancels_requested`), then each cancelled
        response id. Raises when the subscription is lost; cancels requested meanwhile are in
        the keys (subscribe again, then sweep)."""
        raise NotImplementedError

    def watch_feed(self) -> AsyncGenerator[tuple[str, Watch] | None, None]:
        """Who came to look at a response nobody looked at, as they come: first None once
        subscribed (a mark set before that is only in the keys: ask with `watchers`), then
        (response id, FOLLOWED or POLLED). Raises when the subscription is lost. Only a log whose
        `append_batch` can answer UNSEEN needs it."""
        raise NotImplementedError

    async def touch_views(self, response_ids: list[str]) -> None:
        """`touch_view` for many responses in one round trip (a worker's quiet runs, per beat)."""
        for response_id in response_ids:
            await self.touch_view(response_id)

    async def forget(self, response_ids: list[str]) -> None:
        """Drop these responses' logs now (a purge: their content goes everywhere)."""
        raise NotImplementedError


class MemoryEventLog(EventLog):
    def __init__(self) -> None:
        self._events: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._changed: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._cancels: set[str] = set()
        self._expiry: dict[str, float] = {}
        self._views: dict[str, tuple[int, bytes, float]] = {}
        self._gone: set[str] = set()
        self._ended: set[str] = set()  # ENDED_PREFIX's mark

    def _expire(self) -> None:
        now = time.monotonic()
        for rid in [r for r, t in self._expiry.items() if t <= now]:
            self._events.pop(rid, None)
            self._changed.pop(rid, None)
            self._expiry.pop(rid, None)
            self._cancels.discard(rid)
            self._views.pop(rid, None)
            self._ended.discard(rid)

    async def append_batch(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        view: tuple[int, bytes] | None = None,
        expire: bool = True,
        probe_watchers: bool = False,
    ) -> tuple[int, Watch]:
        if response_id in self._ended:
            return 0, Watch.FOLLOWED
        logged = self._events[response_id]
        added = 0
        for event in events:
            if event["sequence_number"] != len(logged):
                continue
            logged.append(event)
            added += 1
            if event["type"] in TERMINAL_TYPES:
                self._expiry[response_id] = time.monotonic() + settings.GATEWAY_EVENT_LOG_TTL_SECONDS
                self._ended.add(response_id)
        if _is_terminal(events):
            self._views.pop(response_id, None)
        elif view is not None:
            self._views[response_id] = (*view, time.monotonic() + view_ttl())
        if added:
            changed = self._changed[response_id]
            changed.set()
            self._changed[response_id] = asyncio.Event()
        self._expire()
        # In this process a write costs no round trip: nothing to save by holding events.
        return added, Watch.FOLLOWED

    async def running_view(self, response_id: str, *, tenant_id: int | None = None) -> tuple[int, bytes] | None:
        held = self._views.get(response_id)
        if held is None or held[2] <= time.monotonic() or response_id in self._gone:
            return None
        return held[0], held[1]

    async def touch_view(self, response_id: str) -> None:
        held = self._views.get(response_id)
        if held is not None:
            self._views[response_id] = (held[0], held[1], time.monotonic() + view_ttl())

    async def hide_view(self, response_id: str) -> None:
        self._gone.add(response_id)
        self._views.pop(response_id, None)

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
            self._views.pop(rid, None)
            self._ended.discard(rid)


class RedisEventLog(EventLog):
    def __init__(self, url: str) -> None:
        self.url = url
        self._poll_view_script: Any = None
        self._append_script: Any = None

    def _client(self) -> Any:
        return async_client(self.url, STREAMS)

    async def append_batch(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        view: tuple[int, bytes] | None = None,
        expire: bool = True,
        probe_watchers: bool = False,
    ) -> tuple[int, Watch]:
        """One command (the `_APPEND` script, EVALSHA): a pipeline of an XADD per event cost the
        worker more CPU to pack and parse than anything else a held batch does (bench/README.md,
        "Fifteenth session"). Redis runs a script whole, so a view is never ahead of the log; a
        refusal midway (maxmemory) leaves a prefix, which a retried batch skips (XADD refuses an
        id not above the last one)."""
        terminal = _is_terminal(events)
        args: list[Any] = [len(events)]
        for event in events:
            # orjson (wirejson.dumpb): a tenth of the standard encoder's time, one event per token.
            args += (f"{event['sequence_number'] + 1}-0", dumpb(event))
        if terminal:
            args += ("del", b"", 0)
        elif view is not None:
            tenant_id, body = view
            args += ("set", b"%d\n%s" % (tenant_id, body), int(view_ttl() * 1000))
        else:
            args += ("", b"", 0)
        ttl = settings.GATEWAY_EVENT_LOG_TTL_SECONDS
        # Until the end, keep the log for the longest job; after it, for the configured TTL.
        args.append((ttl if terminal else settings.CELERY_TASK_TIME_LIMIT + ttl) if expire or terminal else 0)
        args.append(1 if probe_watchers else 0)
        client = self._client()
        if self._append_script is None:  # EVALSHA, loading the script again where Redis lost it
            self._append_script = client.register_script(_APPEND)
        prefixes = (EVENTS_PREFIX, VIEW_PREFIX, READERS_PREFIX, POLLED_PREFIX, ENDED_PREFIX)
        keys = [key(prefix, response_id) for prefix in prefixes]
        answer = await self._append_script(keys=keys, args=args, client=client)
        return int(answer[0]), _watch(answer[1:]) if probe_watchers else Watch.FOLLOWED

    async def watchers(self, response_ids: list[str]) -> list[Watch]:
        if not response_ids:
            return []
        async with self._client().pipeline(transaction=False) as pipe:
            for response_id in response_ids:  # one slot each: a cluster client splits by slot
                pipe.mget(key(READERS_PREFIX, response_id), key(POLLED_PREFIX, response_id))
            found = await pipe.execute()
        return [_watch(marks) for marks in found]

    async def running_view(self, response_id: str, *, tenant_id: int | None = None) -> tuple[int, bytes] | None:
        client = self._client()
        if self._poll_view_script is None:  # EVALSHA, loading the script again where Redis lost it
            self._poll_view_script = client.register_script(_POLL_VIEW)
        keys = [key(VIEW_PREFIX, response_id), key(GONE_PREFIX, response_id), key(POLLED_PREFIX, response_id)]
        poller = b"" if tenant_id is None else b"%d\n" % tenant_id  # empty: no mark
        args = [POLLED_MARK_SECONDS, poller, f"p {response_id}", WATCHED_CHANNEL]
        held, gone = await self._poll_view_script(keys=keys, args=args, client=client)
        if not held or gone:
            return None
        tenant, _, body = bytes(held).partition(b"\n")
        return int(tenant), body

    async def touch_view(self, response_id: str) -> None:
        await self._client().pexpire(key(VIEW_PREFIX, response_id), int(view_ttl() * 1000))

    async def hide_view(self, response_id: str) -> None:
        pipe = self._client().pipeline(transaction=False)
        pipe.set(key(GONE_PREFIX, response_id), b"1", ex=settings.CELERY_TASK_TIME_LIMIT + 600)
        pipe.delete(key(VIEW_PREFIX, response_id))
        await pipe.execute()

    async def read(
        self, response_id: str, after: int = -1, *, idle_seconds: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        events_key = key(EVENTS_PREFIX, response_id)
        readers_key = key(READERS_PREFIX, response_id)
        client = self._client()
        last_id = f"{after + 1}-0" if after >= 0 else "0-0"
        block_ms = 5000 if idle_seconds is None else max(1, min(5000, int(idle_seconds * 1000)))
        marked = -math.inf
        while True:
            if time.monotonic() - marked >= READERS_MARK_SECONDS / 3:
                # Followed live: the worker learns of it at once (the announcement, or its next
                # write's answer: orchestration/worker.LogWriter), writes what it held and each
                # batch at once from then on. A renewal needs no announcement.
                if marked == -math.inf:
                    pipe = client.pipeline(transaction=False)
                    pipe.set(readers_key, b"1", ex=READERS_MARK_SECONDS)
                    pipe.publish(WATCHED_CHANNEL, f"f {response_id}")
                    await pipe.execute()
                else:
                    await client.set(readers_key, b"1", ex=READERS_MARK_SECONDS)
                marked = time.monotonic()
            batches = await client.xread({events_key: last_id}, block=block_ms, count=500)
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
        entries = await self._client().xrevrange(key(EVENTS_PREFIX, response_id), count=1)
        if not entries:
            return -1
        entry_id = entries[0][0]
        entry_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        return int(entry_id.split("-")[0]) - 1

    async def snapshot(self, response_id: str) -> list[dict[str, Any]]:
        entries = await self._client().xrange(key(EVENTS_PREFIX, response_id))
        return [json.loads(fields[b"e"]) for _, fields in entries]

    async def request_cancel(self, response_id: str) -> None:
        # The key first: a worker that misses the message (not subscribed at that moment) finds
        # the key when it subscribes again, or at its next sweep.
        pipe = self._client().pipeline(transaction=False)
        pipe.set(key(CANCEL_PREFIX, response_id), b"1", ex=settings.CELERY_TASK_TIME_LIMIT + 600)
        pipe.publish(CANCELS_CHANNEL, response_id)
        await pipe.execute()

    pushes_cancels = True

    async def cancel_feed(self) -> AsyncGenerator[str | None, None]:
        async for message in self._feed(CANCELS_CHANNEL):
            yield None if message is None else message.decode()

    async def watch_feed(self) -> AsyncGenerator[tuple[str, Watch] | None, None]:
        async for message in self._feed(WATCHED_CHANNEL):
            if message is None:
                yield None
                continue
            kind, _, response_id = message.decode().partition(" ")
            yield response_id, (Watch.FOLLOWED if kind == "f" else Watch.POLLED)

    async def _feed(self, channel: str) -> AsyncGenerator[bytes | None, None]:
        """A channel's messages: None once subscribed, then each message's data."""
        pubsub = self._client().pubsub()
        try:
            await pubsub.subscribe(channel)
            while True:
                # Waits without a socket timeout of its own; the client's health check pings
                # an idle subscription (health_check_interval), so a dead one raises.
                message = await pubsub.get_message(timeout=settings.GATEWAY_HEARTBEAT_SECONDS)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # redis-py swallowed a cancel that landed mid-read (the loop is closing):
                    # without this the generator would wait for the next message forever.
                    raise asyncio.CancelledError
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    yield None
                elif message["type"] == "message":
                    data = message["data"]
                    yield data if isinstance(data, bytes) else str(data).encode()
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def cancel_requested(self, response_id: str) -> bool:
        return bool(await self._client().exists(key(CANCEL_PREFIX, response_id)))

    async def touch_views(self, response_ids: list[str]) -> None:
        if not response_ids:
            return
        async with self._client().pipeline(transaction=False) as pipe:
            ttl = int(view_ttl() * 1000)
            for response_id in response_ids:  # one key each: a cluster client splits by slot
                pipe.pexpire(key(VIEW_PREFIX, response_id), ttl)
            await pipe.execute()

    async def cancels_requested(self, response_ids: list[str]) -> set[str]:
        # One round trip for all of a worker's runs; each command names one key, so a cluster
        # client splits the pipeline by slot.
        async with self._client().pipeline(transaction=False) as pipe:
            for response_id in response_ids:
                pipe.exists(key(CANCEL_PREFIX, response_id))
            found = await pipe.execute()
        return {response_id for response_id, n in zip(response_ids, found, strict=True) if n}

    async def forget(self, response_ids: list[str]) -> None:
        if not response_ids:
            return
        # One DEL per response (its keys share its slot), pipelined: no command spans two slots.
        pipe = self._client().pipeline(transaction=False)
        for rid in response_ids:
            pipe.delete(
                key(EVENTS_PREFIX, rid),
                key(VIEW_PREFIX, rid),
                key(CANCEL_PREFIX, rid),
                key(GONE_PREFIX, rid),
                key(READERS_PREFIX, rid),
                key(POLLED_PREFIX, rid),
                key(ENDED_PREFIX, rid),
            )
        await pipe.execute()


def _watch(marks: Any) -> Watch:
    """Who looks, from an MGET of the reader's and the poll's marks."""
    if isinstance(marks, Exception):
        return Watch.FOLLOWED  # cannot tell: as if followed
    readers, polled = marks
    return Watch.FOLLOWED if readers else Watch.POLLED if polled else Watch.UNSEEN


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


def hide_view_now(response_id: str) -> None:
    """Sync callers (a delete): see EventLog.hide_view. Redis unreachable: the view expires on
    its own within view_ttl(), and polls read the database meanwhile anyway (they cannot read it)."""
    try:
        async_to_sync(event_log().hide_view)(response_id)
    except Exception:  # noqa: BLE001 - Redis unreachable, whatever it raises
        logging.getLogger("gateway.eventlog").warning("could not hide the running view of deleted %s", response_id)
