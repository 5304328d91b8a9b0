"""The upstream HTTP client (aiohttp): stale keep-alive connections, proxies from the environment."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypedDict, Unpack

import pytest

from responses_api.domain import ProviderConfig, Target
from responses_api.protocol.request import parse_create_request
from responses_api.upstreams import UpstreamRequest, open_call
from responses_api.upstreams.http import close_session, proxy_for

pytestmark = pytest.mark.embedded

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bool:
    """One request (head and body) from a kept-alive connection; False once the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return False
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    return True


class Timeouts(TypedDict, total=False):
    """The provider timeouts a test sets (the rest: ProviderConfig's defaults, 5 s for the two required)."""

    timeout: float
    connect_timeout: float
    first_byte_timeout: float
    idle_timeout: float


@contextlib.asynccontextmanager
async def _upstream(
    serve: Handler,
    *,
    stream: bool,
    host: str = "127.0.0.1",
    **timeouts: Unpack[Timeouts],
) -> AsyncIterator[tuple[Target, UpstreamRequest]]:
    """A raw HTTP server on loopback, a target pointing at it (by `host`) and a request to send it."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    provider = ProviderConfig(
        name="p",
        kind="chat_completions",
        base_url=f"http://{host}:{port}/v1",
        api_key=None,
        timeout=5.0,
        connect_timeout=5.0,
    )
    target = Target(
        dataclasses.replace(provider, **timeouts),
        "m",
        1,
    )
    request = UpstreamRequest(
        request=parse_create_request({"model": "m", "input": "hi", "stream": stream}),
        items=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        tools=[],
        stream=stream,
    )
    try:
        yield target, request
    finally:
        await close_session()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("drop", ["close", "reset"])
async def test_a_pooled_connection_the_server_drops_is_retried_once_on_a_fresh_one(drop: str) -> None:
    """Like llama.cpp's server: a kept-alive connection is closed (or reset) as the next request
    arrives. That request was never answered, so it is sent again on a new connection."""
    answered: list[int] = []  # per request: the connection it was answered on
    connections = itertools.count()
    body = json.dumps(COMPLETION).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A counter, not id(writer): a closed connection's writer may be freed and its id reused.
        connection = next(connections)
        for turn in range(2):
            if not await _read_request(reader):
                break
            if turn == 1:
                if drop == "reset":  # RST instead of FIN
                    writer.get_extra_info("socket").setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                break  # drop the connection without an answer
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: keep-alive\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
            answered.append(connection)
        writer.close()

    async with _upstream(serve, stream=False) as (target, request):
        for _ in range(2):
            call = await open_call(target, request)
            assert [d async for d in call.deltas()]
        assert len(answered) == 2 and answered[0] != answered[1]


async def test_cookies_an_upstream_sets_are_not_sent_with_later_calls() -> None:
    """The session is shared by every tenant's calls: a cookie one answer sets (a load
    balancer's, a proxy's session) must not ride along with anyone's next request. By host
    name, since aiohttp's default jar ignores cookies from IP addresses anyway."""
    cookies: list[bytes | None] = []
    body = json.dumps(COMPLETION).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            lines = head.split(b"\r\n")
            cookies.append(next((line for line in lines if line.lower().startswith(b"cookie:")), None))
            length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nset-cookie: session=first-caller; Path=/\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        writer.close()

    async with _upstream(serve, stream=False, host="localhost") as (target, request):
        for _ in range(2):
            call = await open_call(target, request)
            assert [d async for d in call.deltas()]
    assert cookies == [None, None]


def test_proxies_come_from_the_environment_once_per_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "models.internal,localhost")
    proxy_for.cache_clear()
    try:
        assert proxy_for("https://api.openai.com/v1") == "http://proxy.internal:3128"
        assert proxy_for("https://models.internal/v1") is None
        assert proxy_for("http://vllm:8000/v1") is None  # no HTTP_PROXY
    finally:
        proxy_for.cache_clear()


async def test_a_finished_stream_leaves_its_connection_in_the_pool() -> None:
    """After `[DONE]` the rest of the body is read, so the next call reuses the connection."""
    connections: list[int] = []
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
    }
    events = [f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n"]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while await _read_request(reader):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for event in events:
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    async with _upstream(serve, stream=True) as (target, request):
        for _ in range(3):
            call = await open_call(target, request)
            assert [d async for d in call.deltas()]
        assert len(connections) == 1


def _sse_chunk(delta: dict, finish: str | None = None) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def test_a_burst_of_chunks_read_at_once_is_one_batch_and_a_lone_one_is_not_held_back() -> None:
    """What one network read brings is one batch of deltas, in the upstream's order (the client
    then gets their events in one write); a chunk that comes alone is handed on at once."""
    more, end = asyncio.Event(), asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        burst = b"".join(_sse_chunk({"content": text}) for text in ["He", "ll", "o,", " w"])
        writer.write(head + _sse_chunk({"role": "assistant", "content": ""}) + burst)
        await writer.drain()
        await more.wait()
        writer.write(_sse_chunk({"content": "orld"}))
        await writer.drain()
        await end.wait()
        tail = _sse_chunk({}, "stop") + b"%x\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" % len(b"data: [DONE]\n\n")
        writer.write(tail)
        await writer.drain()
        writer.close()

    async with _upstream(serve, stream=True) as (target, request):
        call = await open_call(target, request)
        batches = call.delta_batches()  # type: ignore[attr-defined]  # ChatCompletionCall's
        first = await asyncio.wait_for(batches.__anext__(), 5)
        assert [d.text for d in first] == ["He", "ll", "o,", " w"]
        more.set()
        lone = await asyncio.wait_for(batches.__anext__(), 5)  # not waiting for the end's chunks
        assert [d.text for d in lone] == ["orld"]
        end.set()
        rest = [d async for batch in batches for d in batch]
        assert [type(d).__name__ for d in rest] == ["Finish"]
