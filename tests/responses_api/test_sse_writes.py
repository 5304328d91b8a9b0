"""How `EventStream` writes: a batch of ready events in one write, each batch as soon as it
is ready (nothing held back waiting for more), the wire bytes those of the events one by one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from responses_api.api.sse import DONE, EventStream, encode_event
from responses_api.protocol.batches import singly
from tests.support.stream_validator import parse_sse

pytestmark = pytest.mark.embedded


def _delta(n: int, text: str) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "sequence_number": n,
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "logprobs": [],
    }


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.ended = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])
            self.ended = not message.get("more_body", False)


async def test_a_batch_is_one_write_with_the_frames_of_its_events_in_order() -> None:
    first = [_delta(0, "a"), _delta(1, "b"), _delta(2, "c")]

    async def source() -> AsyncIterator[list[dict[str, Any]]]:
        yield first
        yield [_delta(3, "d")]

    send = Recorder()
    await EventStream(source(), keepalive=30.0).write_to(send, {"type": "http.response.start"})
    assert send.bodies == [b"".join(encode_event(e) for e in first), encode_event(_delta(3, "d")), DONE]
    assert send.ended
    parsed = parse_sse(b"".join(send.bodies))
    assert [e["sequence_number"] for e in parsed] == [0, 1, 2, 3]
    assert "".join(e["delta"] for e in parsed) == "abcd"


async def test_a_single_ready_event_is_written_before_the_source_is_read_again() -> None:
    """The writer never waits for a second event to fill a batch: while the source is waiting
    for its upstream, the event it gave is already on the wire."""
    release = asyncio.Event()
    seen_while_waiting: list[bytes] = []
    send = Recorder()

    async def source() -> AsyncIterator[list[dict[str, Any]]]:
        yield [_delta(0, "a")]
        seen_while_waiting.extend(send.bodies)  # the next read is asked for: what went out so far
        await release.wait()
        yield [_delta(1, "b")]

    writing = asyncio.ensure_future(
        EventStream(source(), keepalive=30.0).write_to(send, {"type": "http.response.start"})
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert seen_while_waiting == [encode_event(_delta(0, "a"))]
    assert send.bodies == [encode_event(_delta(0, "a"))]  # and nothing else while it waits
    release.set()
    await asyncio.wait_for(writing, 5)
    assert send.bodies == [encode_event(_delta(0, "a")), encode_event(_delta(1, "b")), DONE]


async def test_a_source_of_single_events_writes_each_alone_and_closes_its_source() -> None:
    closed = asyncio.Event()

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield _delta(0, "a")
            yield _delta(1, "b")
            await asyncio.Event().wait()  # a log that goes silent: the client leaves meanwhile
        finally:
            closed.set()

    send = Recorder()
    writing = asyncio.ensure_future(
        EventStream(singly(events()), keepalive=30.0).write_to(send, {"type": "http.response.start"})
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert send.bodies == [encode_event(_delta(0, "a")), encode_event(_delta(1, "b"))]
    writing.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert closed.is_set()
