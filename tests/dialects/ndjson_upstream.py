"""A scripted upstream on loopback speaking the test-only "ndjson" dialect (ndjson_protocol.py),
with ScriptedUpstream's interface where the shared dialect tests use it: `enqueue(model,
Reply)`, `requests`, `base_url`. It runs on the test's own event loop (aiohttp's server)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from tests.support.upstream import RecordedRequest, Reply


class NdjsonUpstream:
    def __init__(self) -> None:
        self._replies: dict[str, deque[Reply]] = defaultdict(deque)
        self.requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def enqueue(self, model: str, *replies: Reply) -> None:
        self._replies[model].extend(replies)

    async def start(self) -> NdjsonUpstream:
        app = web.Application()
        app.router.add_post("/v1/generate", self._generate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[NdjsonUpstream]:
        """Served from a thread of its own (for the threaded gateway, whose test is not async)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), loop).result(10)
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(RecordedRequest(request.path, dict(request.headers), body))
        reply = self._replies[body["model"]].popleft()
        if reply.status != 200:
            return web.json_response(reply.error_body or {"error": {"message": "scripted"}}, status=reply.status)
        lines: list[dict[str, Any]] = []
        text = reply.text or ""
        lines += [{"say": text[i : i + reply.chunk_chars]} for i in range(0, len(text), reply.chunk_chars)]
        for call in reply.tool_calls or []:
            args = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])
            lines.append({"call": {"id": call["id"], "name": call["name"], "args": args}})
        turns = body.get("turns") or []
        lines.append({"done": "call" if reply.tool_calls else "stop", "used": [len(turns), len(lines)]})
        response = web.StreamResponse(headers={"content-type": "application/x-ndjson"})
        await response.prepare(request)
        for line in lines:  # a write per line: the client reads them as they come
            await response.write(json.dumps(line).encode() + b"\n")
            await asyncio.sleep(0)
        await response.write_eof()
        return response
