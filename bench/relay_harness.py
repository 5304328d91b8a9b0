"""The stream relay's Python path in one process, without sockets: what a relayed token costs.

N streams, each a real `ResponseRun` reading a `ChatCompletionCall` whose body is a real aiohttp
`StreamReader`, fed here with the bytes a chunked upstream body would bring, and written by
`EventStream.write_to` into uvicorn's own `RequestResponseCycle.send`, whose transport only
counts bytes. Per tick every stream gets one read of `per_read` tokens. The process runs with
the production settings' garbage-collector tuning (gc.freeze, GATEWAY_GC_THRESHOLDS).

Timed on a shared machine the figure is noisy; counted under valgrind it is exact (instructions,
not time): the difference of two token counts leaves out start-up,

    for t in 10 110; do SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))') \\
        valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        .venv/bin/python bench/relay_harness.py 100 $t 1 2>&1 | grep 'I *refs'; done

and (I(110) - I(10)) / (100 streams * 100 ticks * per_read) is the instructions per token
(bench/README.md, the stream relay's CPU per event). Run from the repository's root.

    .venv/bin/python bench/relay_harness.py [streams=200] [ticks=100] [per_read=1]

With GUARDED=1 in the environment every stream goes through the output guardrails issue 58's
cost target names (a patterns and a credentials (pii) guardrail on the output, the default
hold-back): what an output guardrail adds per relayed token.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402 - after the path and settings above

django.setup()

import aiohttp  # noqa: E402
import uvloop  # noqa: E402
from aiohttp.base_protocol import BaseProtocol  # noqa: E402
from django.conf import settings  # noqa: E402
from uvicorn.protocols.http.flow_control import FlowControl  # noqa: E402
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle  # noqa: E402

from responses_api.api.sse import EventStream  # noqa: E402
from responses_api.engine.run import ResponseRun  # noqa: E402
from responses_api.protocol.guardrails import compile_detector  # noqa: E402
from responses_api.protocol.output_guard import OutputDetectors, OutputGuard  # noqa: E402
from responses_api.upstreams.chat_completions import ChatCompletionCall  # noqa: E402
from tests.engine.standins import Stored, Tools, make_job  # noqa: E402


def chunk(delta: dict[str, Any]) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    body = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


class CountingTransport:
    """Both ends' transport: the upstream side's reader needs one to be 'connected'; the client
    side's writes are counted, not sent."""

    def __init__(self) -> None:
        self.bytes = 0
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, *args: Any) -> None:
        return None

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class FedResponse:
    """What ChatCompletionCall reads of an aiohttp response."""

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self.content = content

    def release(self) -> None:
        pass

    def close(self) -> None:
        self.content.feed_eof()


def feed(reader: aiohttp.StreamReader, data: bytes) -> None:
    """As aiohttp's response handler does with one HTTP chunk of the body."""
    reader.begin_http_chunk_receiving()
    reader.feed_data(data)
    reader.end_http_chunk_receiving()


def guard() -> OutputGuard | None:
    """The output guardrails of a guarded run (GUARDED=1), else none."""
    if os.environ.get("GUARDED") != "1":
        return None
    patterns = compile_detector(
        1,
        "codenames",
        "patterns",
        "block",
        {"categories": {"codename": {"words": ["Project Zeus"], "regex": ["ZX-\\d{4}"]}}},
    )
    pii = compile_detector(2, "pii", "pii", "redact", {})
    detectors = OutputDetectors(output=(patterns, pii))
    return OutputGuard(detectors, holdback=settings.GATEWAY_GUARDRAIL_HOLDBACK_CHARS)


async def main(streams: int, ticks: int, per_read: int) -> None:
    loop = asyncio.get_running_loop()
    readers: list[aiohttp.StreamReader] = []
    clients: list[CountingTransport] = []
    tasks: list[asyncio.Future[None]] = []
    for _ in range(streams):
        protocol = BaseProtocol(loop)
        protocol.transport = CountingTransport()  # type: ignore[assignment]  # only needs to be set
        reader = aiohttp.StreamReader(protocol, 2**16, loop=loop)
        readers.append(reader)

        async def opener(target: Any, request: Any, reader: aiohttp.StreamReader = reader) -> ChatCompletionCall:
            return ChatCompletionCall(target, FedResponse(reader), None, None)  # type: ignore[arg-type]

        run = ResponseRun(
            make_job({"input": "hi", "stream": True}), Stored(), Tools(), open_upstream=opener, output_guard=guard()
        )
        await run.connect()
        client = CountingTransport()
        clients.append(client)
        cycle = RequestResponseCycle(
            scope={"method": "POST", "http_version": "1.1", "type": "http"},  # type: ignore[arg-type]
            transport=client,  # type: ignore[arg-type]
            flow=FlowControl(client),  # type: ignore[arg-type]
            logger=logging.getLogger("harness"),
            access_logger=logging.getLogger("harness.access"),
            access_log=False,
            default_headers=[],
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=lambda: None,
        )
        start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
        stream = EventStream(run.event_batches(), 30.0, {})
        tasks.append(asyncio.ensure_future(stream.write_to(cycle.send, start)))  # type: ignore[arg-type]
    for first in (chunk({"role": "assistant", "content": ""}), chunk({"content": "abcd"})):
        for reader in readers:
            feed(reader, first)
        for _ in range(5):
            await asyncio.sleep(0)
    gc.freeze()
    gc.set_threshold(*settings.GATEWAY_GC_THRESHOLDS)
    writes_before = sum(c.writes for c in clients)
    payload = chunk({"content": "abcd"}) * per_read
    started = time.process_time()
    for _ in range(ticks):
        for reader in readers:
            feed(reader, payload)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    spent = time.process_time() - started
    tokens = streams * ticks * per_read
    writes = sum(c.writes for c in clients) - writes_before
    print(
        f"{'guarded ' if os.environ.get('GUARDED') == '1' else ''}"
        f"{streams} streams x {ticks} reads x {per_read} tokens/read: {spent / tokens * 1e6:.2f} us CPU per token, "
        f"{writes / tokens:.2f} writes per token"
    )
    for reader in readers:
        reader.feed_eof()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    defaults = [200, 100, 1]
    uvloop.run(main(*(args + defaults[len(args) :])))
