"""A scripted moderation server on loopback speaking OpenAI's `POST /v1/moderations`: it flags
a category when the input contains one of that category's words, and can be made slow, failing
or strict about its key. It records what it was asked."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Self

from tests.support.loopback import LoopbackHTTPServer

MODERATION_CATEGORIES = ("harassment", "hate", "self-harm", "sexual", "violence")


@dataclass
class ModerationCall:
    headers: dict[str, str]
    body: dict[str, Any]


class ModerationServer:
    def __init__(self) -> None:
        self.words: dict[str, list[str]] = {}  # category -> words that flag it
        self.delay = 0.0
        self.status = 200
        self.raw_answer: bytes | None = None  # answered instead of a verdict (a broken server)
        self.api_key: str | None = None  # required as "Bearer <key>" when set
        self.calls: list[ModerationCall] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.calls.append(ModerationCall(headers, body))
                if outer.delay:
                    time.sleep(outer.delay)
                status, raw = outer._answer(self.path, headers, body)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(raw)

        self._server = LoopbackHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/moderations"

    def _answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, bytes]:
        if path != "/v1/moderations":
            return 404, b'{"error": {"message": "not found"}}'
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, b'{"error": {"message": "bad key"}}'
        if self.status != 200:
            return self.status, b'{"error": {"message": "scripted failure"}}'
        if self.raw_answer is not None:
            return 200, self.raw_answer
        inputs = body.get("input")
        texts = inputs if isinstance(inputs, list) else [inputs]
        results = []
        for text in texts:
            lowered = str(text).lower()
            categories = {c: any(w.lower() in lowered for w in self.words.get(c, [])) for c in MODERATION_CATEGORIES}
            scores = {c: 0.9 if hit else 0.01 for c, hit in categories.items()}
            results.append({"flagged": any(categories.values()), "categories": categories, "category_scores": scores})
        answer = {"id": "modr-1", "model": body.get("model") or "scripted-moderation", "results": results}
        return 200, json.dumps(answer).encode()

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
