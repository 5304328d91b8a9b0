"""The event log's batched writes (orchestration/worker.LogWriter, store/eventlog.append_batch) on
a real Redis of this module's own: order kept and nothing lost while Redis refuses writes, a
batch's cost (one expiry per stream, not per event; the running view at most once a second;
batches held while nobody looks at the log, written once a reader or a poll comes), and every key
and pipeline in one hash slot (the response's tag), so a Redis Cluster takes them as they are."""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from responses_api.orchestration.worker import LogWriter
from responses_api.store import eventlog
from tests.support.servers import RedisServer, ServerBinaryMissing, start_redis


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    try:
        server = start_redis(Path(tempfile.mkdtemp(prefix="eventlog-batches-")))
    except ServerBinaryMissing:
        pytest.skip("redis-server is needed")
    with server:
        yield server


@pytest.fixture
def log(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, settings) -> Iterator[redis.Redis]:
    settings.GATEWAY_HEARTBEAT_SECONDS = 0.5
    monkeypatch.setattr(eventlog.event_log, "instance", eventlog.RedisEventLog(redis_server.url))
    direct = redis.Redis.from_url(redis_server.url)
    direct.flushall()
    direct.config_resetstat()
    yield direct
    direct.config_set("maxmemory", 0)
    direct.close()


def _events(response_id: str, deltas: int) -> list[dict[str, Any]]:
    """A response's events as an engine yields them: an item, its text part, deltas, the end."""
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "delta": f"w{i} ",
        }
        for i in range(deltas)
    ]
    events.append({"type": "response.completed", "response": {"id": response_id, "status": "completed"}})
    for n, event in enumerate(events):
        event["sequence_number"] = n
    return events


def _logged(direct: redis.Redis, response_id: str) -> list[dict[str, Any]]:
    import json

    entries: Any = direct.xrange(eventlog.key(eventlog.EVENTS_PREFIX, response_id))
    return [json.loads(fields[b"e"]) for _, fields in entries]


def _followed(direct: redis.Redis, response_id: str) -> None:
    """A reader's mark, as `read` sets it: the writer writes each batch at once (no hold)."""
    direct.set(eventlog.key(eventlog.READERS_PREFIX, response_id), b"1", ex=600)
    direct.config_resetstat()  # the tests count the writer's commands only


def _calls(direct: redis.Redis, command: str) -> int:
    return int(direct.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


async def _first_batch_unseen(direct: redis.Redis, writer: LogWriter, events: list[dict[str, Any]]) -> None:
    """The run's first batch (two events) written, and with it the writer's answer that nobody
    looks: later events are held from here on."""
    await writer.append_all(events[:2])
    deadline = time.monotonic() + 30
    while len(_logged(direct, writer.response_id)) < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)


VIEW = {"id": "resp_b1", "object": "response", "status": "in_progress", "output": []}


def test_a_batch_is_one_expiry_not_one_per_event(log: redis.Redis) -> None:
    events = _events("resp_b1", 100)

    async def run() -> tuple[int, bytes] | None:
        _followed(log, "resp_b1")
        writer = LogWriter("resp_b1", tenant_id=7, view=VIEW)
        for event in events[:50]:  # yielded together (no await between them): one batch
            await writer.append(event)
        await asyncio.sleep(0.2)
        view = await eventlog.event_log().running_view("resp_b1")
        for event in events[50:]:
            await writer.append(event)
        assert await writer.close(10)
        return view

    view = asyncio.run(run())
    assert _logged(log, "resp_b1") == events
    assert _calls(log, "xadd") == len(events)
    assert _calls(log, "expire") == 2  # the first batch's (the longest run) and the terminal one's
    # The running view after the first batch: tenant, the Response with its output so far.
    assert view is not None and view[0] == 7
    import json

    shown = json.loads(view[1])
    assert shown["status"] == "in_progress"
    assert shown["output"][0]["content"][0]["text"] == "".join(f"w{i} " for i in range(48))
    assert log.get(eventlog.key(eventlog.VIEW_PREFIX, "resp_b1")) is None  # the end dropped it


def test_the_running_view_is_written_at_most_once_a_second_and_never_after_the_end(log: redis.Redis) -> None:
    """A token every 0.1 s for 2.5 s is 25 batches but about four views (the first batch's, one a
    second, the last one on its own once the run went quiet); the quiet run's view shows every
    token; the end drops the view and no late write brings it back."""
    import json

    events = _events("resp_b4", 25)
    view_key = eventlog.key(eventlog.VIEW_PREFIX, "resp_b4")

    def shown() -> str:
        held: Any = log.get(view_key)
        return json.loads(held.partition(b"\n")[2])["output"][0]["content"][0]["text"]

    async def run() -> tuple[float, int]:
        _followed(log, "resp_b4")
        writer = LogWriter("resp_b4", tenant_id=7, view=VIEW)
        started = time.monotonic()
        await writer.append_all(events[:2])
        for event in events[2:-1]:
            await writer.append(event)
            await asyncio.sleep(0.1)
        streamed = time.monotonic() - started
        sets_while_streaming = _calls(log, "set")
        assert _calls(log, "xadd") >= 10  # the events went as they came, not held for the view
        everything = "".join(f"w{i} " for i in range(25))
        deadline = time.monotonic() + 30
        while shown() != everything:  # quiet now: the view catches up on its own within a second
            assert time.monotonic() < deadline, shown()
            await asyncio.sleep(0.05)
        await writer.append(events[-1])
        await asyncio.sleep(LogWriter.VIEW_EVERY + 0.5)  # nothing may write the view again
        assert await writer.close(10)
        return streamed, sets_while_streaming

    streamed, sets = asyncio.run(run())
    assert _logged(log, "resp_b4") == events
    # 25 batches; one view with the first, then one a second at most (however slow the machine)
    assert 1 <= sets <= 2 + streamed / LogWriter.VIEW_EVERY, (sets, streamed)
    assert _calls(log, "set") <= sets + 2  # and the quiet run's one, and the end's mark (ENDED_PREFIX)
    assert log.get(view_key) is None
    assert log.get(eventlog.key(eventlog.ENDED_PREFIX, "resp_b4")) == b"1"


def test_nobody_following_the_log_its_batches_wait_and_a_reader_makes_them_go_at_once(
    log: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a minute's hold (so that nothing here depends on the machine's speed): nobody
    following, the events after the first batch wait for the hold (or the end); a reader's mark
    there before the first write makes every batch go at once."""
    monkeypatch.setattr(LogWriter, "HOLD_UNSEEN", 60.0)
    unseen, followed = _events("resp_b5", 10), _events("resp_b6", 10)
    log.set(eventlog.key(eventlog.READERS_PREFIX, "resp_b6"), b"1", ex=60)

    async def wait_logged(response_id: str, n: int) -> None:
        deadline = time.monotonic() + 30  # half the hold: arriving at all proves no hold
        while len(_logged(log, response_id)) < n:
            assert time.monotonic() < deadline, (response_id, len(_logged(log, response_id)), n)
            await asyncio.sleep(0.02)

    async def run() -> None:
        quiet = LogWriter("resp_b5", tenant_id=7, view=VIEW)
        watched = LogWriter("resp_b6", tenant_id=7, view=VIEW)
        await quiet.append_all(unseen[:2])
        await watched.append_all(followed[:2])
        await wait_logged("resp_b5", 2)  # the first batch goes at once either way
        await wait_logged("resp_b6", 2)
        for n in range(2, len(unseen) - 1):
            await quiet.append(unseen[n])
            await watched.append(followed[n])
            await wait_logged("resp_b6", n + 1)  # followed: each event as it comes
        await asyncio.sleep(0.3)
        assert len(_logged(log, "resp_b5")) == 2  # nobody following: held
        await quiet.append(unseen[-1])  # the end goes at once, with what waited
        await wait_logged("resp_b5", len(unseen))
        await watched.append(followed[-1])
        assert await quiet.close(10) and await watched.close(10)

    asyncio.run(run())
    assert _logged(log, "resp_b5") == unseen and _logged(log, "resp_b6") == followed


def test_a_reader_who_comes_mid_run_gets_every_event_once_in_order(
    log: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token every 0.1 s and nobody looking: after the first batch nothing is written (a
    minute's hold, so that the machine's speed does not matter); then a reader from the start
    gets what was held without waiting for the hold (its mark is announced, and the process's
    subscription tells the run), then every later event, once, in order, to the end."""
    monkeypatch.setattr(LogWriter, "HOLD_UNSEEN", 60.0)
    events = _events("resp_b7", 40)

    async def run() -> tuple[int, list[int]]:
        writer = LogWriter("resp_b7", tenant_id=7, view=VIEW)
        await _first_batch_unseen(log, writer, events)
        for event in events[2:22]:
            await writer.append(event)
            await asyncio.sleep(0.1)
        logged_unseen = len(_logged(log, "resp_b7"))
        seen: list[int] = []

        async def read() -> None:
            async for event in eventlog.event_log().read("resp_b7"):
                seen.append(event["sequence_number"])

        reader = asyncio.ensure_future(read())
        deadline = time.monotonic() + 30  # half the hold: arriving at all proves it was asked for
        while len(seen) < 22:
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.05)
        for event in events[22:-1]:  # followed now: each as it comes, without the end's help
            await writer.append(event)
            deadline = time.monotonic() + 30
            while seen[-1] != event["sequence_number"]:
                assert time.monotonic() < deadline, (seen[-1], event["sequence_number"])
                await asyncio.sleep(0.01)
        await writer.append(events[-1])
        assert await writer.close(10)
        await asyncio.wait_for(reader, 30)
        return logged_unseen, seen

    logged_unseen, seen = asyncio.run(run())
    assert logged_unseen == 2  # the first batch only: 20 writes of a token each otherwise
    assert seen == list(range(len(events)))
    assert _logged(log, "resp_b7") == events


def test_a_mark_set_while_the_subscription_was_down_is_found_when_it_is_up_again(
    log: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process's watch subscription killed (Redis drops the connection) and a reader's mark
    set meanwhile with no announcement: the subscription comes back and asks about its unseen
    runs, so what was held is written well before the (minute's) hold ends."""
    monkeypatch.setattr(LogWriter, "HOLD_UNSEEN", 60.0)
    events = _events("resp_b12", 10)

    async def run() -> int:
        writer = LogWriter("resp_b12", tenant_id=7, view=VIEW)
        await _first_batch_unseen(log, writer, events)
        await writer.append_all(events[2:6])
        deadline = time.monotonic() + 30
        while not any(c.get("sub") != "0" for c in log.client_list(_type="pubsub")):  # it subscribed
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        log.client_kill_filter(_type="pubsub")
        log.set(eventlog.key(eventlog.READERS_PREFIX, "resp_b12"), b"1", ex=60)  # no announcement
        held = len(_logged(log, "resp_b12"))
        deadline = time.monotonic() + 30  # half the hold: arriving at all proves it was asked for
        while len(_logged(log, "resp_b12")) < 6:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await writer.append_all(events[6:])
        assert await writer.close(10)
        return held

    assert asyncio.run(run()) == 2
    assert _logged(log, "resp_b12") == events


def test_a_poll_makes_a_held_run_write_what_it_held(log: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody looking, a run's events wait (a minute's hold here); a poll that finds its view (the
    first batch's) marks it polled, and the view then shows what was held without waiting for the
    hold (the process asks about its unseen runs once a second)."""
    import json

    monkeypatch.setattr(LogWriter, "HOLD_UNSEEN", 60.0)
    events = _events("resp_b8", 30)

    def shown(view: tuple[int, bytes] | None) -> str:
        assert view is not None
        return json.loads(view[1])["output"][0]["content"][0]["text"]

    async def run() -> str:
        store = eventlog.event_log()
        writer = LogWriter("resp_b8", tenant_id=7, view=VIEW)
        await writer.append_all(events[:12])
        deadline = time.monotonic() + 30
        while len(_logged(log, "resp_b8")) < 12:  # the first batch goes at once, with its view
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        for event in events[12:22]:
            await writer.append(event)
        await asyncio.sleep(0.3)
        assert await store.running_view("resp_b8", tenant_id=8) is not None  # another tenant's poll:
        assert not log.exists(eventlog.key(eventlog.POLLED_PREFIX, "resp_b8"))  # (a 404) no mark
        first_poll = shown(await store.running_view("resp_b8", tenant_id=7))  # what the first batch showed
        everything = "".join(f"w{i} " for i in range(20))
        deadline = time.monotonic() + 30  # half the hold
        while shown(await store.running_view("resp_b8", tenant_id=7)) != everything:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        for event in events[22:]:
            await writer.append(event)
        assert await writer.close(10)
        return first_poll

    assert asyncio.run(run()) == "".join(f"w{i} " for i in range(10))
    assert _logged(log, "resp_b8") == events
    assert log.exists(eventlog.key(eventlog.POLLED_PREFIX, "resp_b8"))


def test_after_a_cancel_nothing_waits(log: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody looking and a minute's hold: a client's cancel makes what the run holds go at once,
    and every event after it too (the web process may end the response from its log), though
    each write's answer still says nobody looks."""
    monkeypatch.setattr(LogWriter, "HOLD_UNSEEN", 60.0)
    events = _events("resp_b10", 10)

    async def run() -> None:
        writer = LogWriter("resp_b10", tenant_id=7, view=VIEW)
        await _first_batch_unseen(log, writer, events)
        await writer.append(events[2])
        await asyncio.sleep(0.2)
        assert len(_logged(log, "resp_b10")) == 2  # held
        writer.cancelled()
        for n in range(3, len(events) - 1):
            deadline = time.monotonic() + 30  # half the hold
            while len(_logged(log, "resp_b10")) < n:
                assert time.monotonic() < deadline, (n, len(_logged(log, "resp_b10")))
                await asyncio.sleep(0.01)
            await writer.append(events[n])
        await writer.append(events[-1])
        assert await writer.close(10)

    asyncio.run(run())
    assert _logged(log, "resp_b10") == events


@pytest.fixture(params=["redis", "memory"])
def either_log(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis | None]:
    """The Redis log (with a direct client to look at its keys) or the in-process one (None)."""
    if request.param == "redis":
        yield request.getfixturevalue("log")
    else:
        monkeypatch.setattr(eventlog.event_log, "instance", eventlog.MemoryEventLog())
        yield None


def test_a_log_that_ended_takes_nothing_more(either_log: redis.Redis | None) -> None:
    """Someone else wrote the end (a forced cancel, the reaper) while the run's worker still held
    events: its later batch, the running view with it, is dropped whole, so the end stays the
    last event a reader gets and no poll finds the run running again."""
    events = _events("resp_e1", 6)
    store = eventlog.event_log()
    end = {"type": "response.failed", "sequence_number": 3, "response": {"id": "resp_e1", "status": "cancelled"}}

    async def run() -> list[dict[str, Any]]:
        assert await store.append_many("resp_e1", events[:3], view=(7, b"{}")) == 3
        assert await store.append_many("resp_e1", [end]) == 1  # the end, from elsewhere
        assert await store.running_view("resp_e1", tenant_id=7) is None
        late = events[3:6]  # the worker's held events; sequence numbers 3, 4, 5
        assert await store.append_many("resp_e1", late, view=(7, b'{"status": "in_progress"}')) == 0
        assert await store.running_view("resp_e1", tenant_id=7) is None
        return [event async for event in store.read("resp_e1", 0, idle_seconds=0.2)]

    assert asyncio.run(run()) == events[1:3] + [end]  # after 0: 1, 2 and the end, nothing past it
    if either_log is not None:
        assert _logged(either_log, "resp_e1") == events[:3] + [end]
        ended = eventlog.key(eventlog.ENDED_PREFIX, "resp_e1")
        ttl = either_log.ttl(ended)
        assert 0 < ttl <= either_log.ttl(eventlog.key(eventlog.EVENTS_PREFIX, "resp_e1"))


def test_an_end_whose_sequence_number_was_taken_goes_after_the_last_event(either_log: redis.Redis | None) -> None:
    """The end from the log's snapshot (`_end_from_log`) met events the worker wrote after the
    snapshot: refused as a duplicate (the log is not ended by it), then written after them; an
    end written when the log had already ended is not written again."""
    from responses_api.orchestration.worker import _append_end

    events = _events("resp_e2", 6)
    store = eventlog.event_log()
    end = {"type": "response.failed", "sequence_number": 3, "response": {"id": "resp_e2", "status": "failed"}}

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        await store.append_many("resp_e2", events[:5])  # the snapshot saw 0-2; 3 and 4 came after it
        await _append_end("resp_e2", [end])
        await _append_end("resp_e2", [{**end, "sequence_number": 9}])  # ended: not again
        return await store.snapshot("resp_e2"), [e async for e in store.read("resp_e2", 4, idle_seconds=0.2)]

    logged, resumed = asyncio.run(run())
    assert logged == events[:5] + [{**end, "sequence_number": 5}]
    assert resumed == [{**end, "sequence_number": 5}]


def test_a_writer_whose_run_someone_else_ended_drops_what_it_held(log: redis.Redis) -> None:
    """The worker's side of the fence: its held batch is refused (nothing past the end), the
    writer does not retry it, and its close returns at once."""
    events = _events("resp_e3", 6)

    async def run() -> bool:
        writer = LogWriter("resp_e3", tenant_id=7, view=VIEW)
        await _first_batch_unseen(log, writer, events)
        await writer.append_all(events[2:5])  # held: nobody looks
        end = {"type": "response.failed", "sequence_number": 2, "response": {"id": "resp_e3"}}
        assert await eventlog.event_log().append_many("resp_e3", [end]) == 1
        return await writer.close(10)

    assert asyncio.run(run())
    logged = _logged(log, "resp_e3")
    assert [e["sequence_number"] for e in logged] == [0, 1, 2] and logged[-1]["type"] == "response.failed"
    assert log.get(eventlog.key(eventlog.VIEW_PREFIX, "resp_e3")) is None


def test_a_held_batch_is_written_once_it_is_long(log: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody looking and a minute's hold: a fast run's batch is written once HOLD_MAX_EVENTS
    wait, so a worker's memory for held events is bounded whatever the pace."""
    monkeypatch.setattr(LogWriter, "HOLD_UNSEEN", 60.0)
    events = _events("resp_b9", LogWriter.HOLD_MAX_EVENTS + 40)

    async def run() -> int:
        writer = LogWriter("resp_b9", tenant_id=7, view=VIEW)
        await _first_batch_unseen(log, writer, events)
        for event in events[2:-1]:
            await writer.append(event)
            await asyncio.sleep(0)
        deadline = time.monotonic() + 30
        while len(_logged(log, "resp_b9")) < 2 + LogWriter.HOLD_MAX_EVENTS:
            assert time.monotonic() < deadline, len(_logged(log, "resp_b9"))
            await asyncio.sleep(0.02)
        logged = len(_logged(log, "resp_b9"))
        await writer.append(events[-1])
        assert await writer.close(10)
        return logged

    assert asyncio.run(run()) < len(events) - 1  # written before the end came
    assert _logged(log, "resp_b9") == events


def test_batches_keep_order_and_lose_nothing_while_redis_refuses_writes(log: redis.Redis) -> None:
    """Redis refusing every write (maxmemory reached, noeviction) for a while, then taking them
    again with its data kept: the run never waited, and the log holds every event once, in order."""
    events = _events("resp_b2", 60)

    async def run() -> bool:
        _followed(log, "resp_b2")
        writer = LogWriter("resp_b2", tenant_id=7, view=VIEW)
        for event in events[:20]:
            await writer.append(event)
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.2)
        log.config_set("maxmemory-policy", "noeviction")
        log.config_set("maxmemory", 1)
        for event in events[20:50]:  # written during the refusal: they wait, in order
            await writer.append(event)
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)  # a retry or two fails
        assert len(_logged(log, "resp_b2")) == 20
        # a poll still reads the view (its mark is refused: best effort)
        assert await eventlog.event_log().running_view("resp_b2", tenant_id=7) is not None
        log.config_set("maxmemory", 0)
        for event in events[50:]:
            await writer.append(event)
        return await writer.close(30)

    assert asyncio.run(run())
    logged = _logged(log, "resp_b2")
    assert [e["sequence_number"] for e in logged] == list(range(len(events)))
    assert logged == events


def test_a_second_close_after_one_that_gave_up_returns(log: redis.Redis) -> None:
    """A run cancelled during an outage of the log closes its writer twice (its cancel's short
    wait, then its end's): the first gives up on the flusher, and the second must say so, not
    raise the flusher's cancellation (which skipped the run's end: its slot's release)."""
    events = _events("resp_b11", 3)

    async def run() -> tuple[bool, bool]:
        _followed(log, "resp_b11")
        log.config_set("maxmemory-policy", "noeviction")
        log.config_set("maxmemory", 1)
        try:
            writer = LogWriter("resp_b11", tenant_id=7, view=VIEW)
            await writer.append_all(events)
            return await writer.close(0.3), await writer.close(0.3)
        finally:
            log.config_set("maxmemory", 0)

    assert asyncio.run(run()) == (False, False)


def test_every_key_and_every_pipeline_stays_in_the_responses_hash_slot(
    log: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.asyncio.client import Pipeline
    from redis.crc import key_slot

    slots_per_command: list[set[int]] = []
    execute = Pipeline.execute

    async def checked(self: Pipeline, raise_on_error: bool = True) -> Any:
        # every command here takes its keys first (XADD/SET/EXPIRE/DEL key ...); a pipeline may
        # hold several responses' commands (a purge), which a cluster client splits per node
        for args, _ in self.command_stack:
            keys = args[1:] if str(args[0]).upper() in ("DEL", "MGET") else args[1:2]
            slots_per_command.append({key_slot(k.encode() if isinstance(k, str) else k) for k in keys})
        return await execute(self, raise_on_error)

    monkeypatch.setattr(Pipeline, "execute", checked)
    from redis.commands.core import AsyncScript

    call = AsyncScript.__call__

    async def checked_script(self: AsyncScript, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        slots_per_command.append({key_slot(k.encode()) for k in keys})  # a script's keys: one slot
        return await call(self, keys=keys, args=args, client=client)

    monkeypatch.setattr(AsyncScript, "__call__", checked_script)

    async def run() -> None:
        store = eventlog.event_log()
        writer = LogWriter("resp_b3", tenant_id=7, view=VIEW)
        await writer.append_all(_events("resp_b3", 5)[:-1])
        await asyncio.sleep(0.1)
        await store.request_cancel("resp_b3")
        assert await store.watchers(["resp_b3", "resp_b4"]) == [eventlog.Watch.UNSEEN] * 2
        await store.hide_view("resp_b3")
        await writer.append(_events("resp_b3", 5)[-1])
        await writer.close(10)
        await store.forget(["resp_b3", "resp_b4"])

    asyncio.run(run())
    assert slots_per_command and all(len(slots) == 1 for slots in slots_per_command), slots_per_command
    asyncio.run(_write_every_key("resp_b5"))
    keys = [k.decode() for k in log.scan_iter("gw:*")]
    assert keys
    assert eventlog.key(eventlog.POLLED_PREFIX, "resp_b5") in keys
    for name in keys:
        assert re.fullmatch(r"gw:[a-z]+:\{resp_b5\}", name), name


async def _write_every_key(response_id: str) -> None:
    store = eventlog.event_log()
    await store.append_many(response_id, _events(response_id, 1)[:2], view=(7, b"{}"))
    await store.request_cancel(response_id)
    assert await store.running_view(response_id, tenant_id=7) is not None  # a poll: its mark
    await store.hide_view(response_id)
