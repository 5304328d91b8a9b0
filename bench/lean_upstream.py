"""A lean stand-in for a streaming model server: the slow-stream benchmark's upstream.

bench/streams.py measures how many slow streams one gateway process relays. The
upstream it talks to stands for a model server, which in production runs on
machines of its own (GPUs). The scripted upstream (tests/support/upstream.py,
uvicorn + ASGI, a disconnect watcher per stream) is costly per chunk: at 2,000
streams of one token per 100 ms its two processes took 0.94-1.16 of this
machine's 2 cores (bench/README.md, performance rounds 3 and 4), which the
gateway under test then did not get. This server sends the same Chat Completions
chunks (the finish, usage and [DONE] go with the last token) for 3.5 times less
CPU: an asyncio protocol on uvloop, the request parsed by httptools, every
chunk's bytes built once, one timer per stream re-armed after each chunk
(relative, as the scripted upstream's sleep: a late tick delays the rest of the
stream instead of being caught up).

It answers `POST .../chat/completions` only, for the models the benchmark uses:
`slow-N` streams N tokens of 4 characters, one every `--interval` seconds after
a first (role) chunk sent at once; `stream: false` gets the whole completion.
Anything else is a 404. Keep-alive connections are kept.

    python bench/lean_upstream.py --port 8091 [--interval 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
import uuid

import httptools

_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _json_answer(status: int, body: dict, keep_alive: bool) -> bytes:
    payload = json.dumps(body, separators=(",", ":")).encode()
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    connection = b"keep-alive" if keep_alive else b"close"
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: %s\r\n\r\n%s" % (
        status,
        reason,
        len(payload),
        connection,
        payload,
    )


class _Stream:
    """One streamed reply: the chunks after the first, one per tick (`chunks` is shared by
    every stream of the model, so each keeps only its position)."""

    __slots__ = ("conn", "chunks", "next", "interval", "timer")

    def __init__(self, conn: Server, chunks: list[bytes], interval: float) -> None:
        self.conn = conn
        self.chunks = chunks
        self.next = 1
        self.interval = interval
        self.timer: asyncio.TimerHandle | None = None

    def tick(self) -> None:
        self.timer = None
        transport = self.conn.transport
        if transport is None or transport.is_closing():
            return
        transport.write(self.chunks[self.next])
        self.next += 1
        if self.next < len(self.chunks):
            self.timer = self.conn.loop.call_later(self.interval, self.tick)
        else:
            self.conn.stream = None
            if not self.conn.keep_alive:
                transport.close()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Server(asyncio.Protocol):
    interval = 0.1

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.keep_alive = True
        self.stream: _Stream | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(_json_answer(400, {"error": {"message": "bad request"}}, False))
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None
        self.transport = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        assert self.transport is not None
        path = self.url.split(b"?", 1)[0]
        try:
            request = json.loads(b"".join(self.body) or b"{}")
        except ValueError:
            request = None
        model = request.get("model") if isinstance(request, dict) else None
        tokens = _slow_tokens(model)
        if not path.endswith(b"/chat/completions") or tokens is None or not isinstance(request, dict):
            message = f"model {model!r} is not served here (slow-N on /chat/completions only)"
            self.transport.write(_json_answer(404, {"error": {"message": message}}, self.keep_alive))
            if not self.keep_alive:
                self.transport.close()
            return
        texts = [f"t{i % 100:02d} " for i in range(tokens)]
        if not request.get("stream"):
            self.transport.write(_json_answer(200, _completion(model, "".join(texts)), self.keep_alive))
            if not self.keep_alive:
                self.transport.close()
            return
        options = request.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        chunks = _stream_chunks(model, texts, usage)
        self.transport.write(_SSE_HEAD + chunks[0])
        if len(chunks) == 1:  # slow-0: the role chunk was the whole stream
            if not self.keep_alive:
                self.transport.close()
            return
        self.stream = _Stream(self, chunks, self.interval)
        self.stream.timer = self.loop.call_later(self.interval, self.stream.tick)


def _slow_tokens(model: object) -> int | None:
    if isinstance(model, str) and model.startswith("slow-") and model[5:].isdigit():
        return min(int(model[5:]), 100_000)
    return None


_CACHE: dict[tuple[str, int, bool], list[bytes]] = {}


def _stream_chunks(model: str, texts: list[str], usage: bool) -> list[bytes]:
    """The stream's HTTP chunks: role, one per token, finish (+ usage), [DONE] and the end.
    Built once per (model, usage): every stream of a level shares them (ids included, which
    the gateway does not rely on)."""
    key = (model, len(texts), usage)
    if key in _CACHE:
        return _CACHE[key]
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time())}
    head = b"data: " + json.dumps({**base, "model": model}, separators=(",", ":")).encode()[:-1]
    tail = b',"usage":null}\n\n' if usage else b"}\n\n"

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _chunked(head + b',"choices":[' + json.dumps(choice, separators=(",", ":")).encode() + b"]" + tail)

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": t}) for t in texts]
    last = chunk({}, "stop")
    if usage:
        n = len(texts)
        counted = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
        last += _chunked(head + b',"choices":[],"usage":' + json.dumps(counted).encode() + b"}\n\n")
    chunks[-1] += last + _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    _CACHE[key] = chunks
    return chunks


def _completion(model: str, text: str) -> dict:
    n = len(text) // 4
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n},
    }


async def serve(host: str, port: int, max_seconds: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Server, host, port, backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"lean upstream on http://{host}:{port}/v1 (pid {os.getpid()})", flush=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max_seconds)
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between tokens")
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args()
    Server.interval = args.interval
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # pragma: no cover - uvloop is in the benchmark's environment
        pass
    asyncio.run(serve(args.host, args.port, args.max_seconds))


if __name__ == "__main__":
    main()
