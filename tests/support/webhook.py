"""A real HTTP webhook server on loopback for tool tests: records calls, scripted behaviour per path."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.loopback import LoopbackHTTPServer


@dataclass
class WebhookCall:
    path: str
    headers: dict[str, str]
    body: bytes
    started: float
    finished: float = 0.0

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Route:
    status: int = 200
    delay: float = 0.0
    body: Any = field(default_factory=lambda: {"ok": True})
    content_type: str = "application/json"
    handler: Callable[[WebhookCall], Any] | None = None  # computes the body from the call
    redirect_to: str | None = None


class WebhookServer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Route] = {}
        self.calls: list[WebhookCall] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                call = WebhookCall(
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                    time.monotonic(),
                )
                with outer._lock:
                    outer.calls.append(call)
                route = outer.routes.get(self.path, Route(status=404, body={"error": "no route"}))
                if route.delay:
                    time.sleep(route.delay)
                if route.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", route.redirect_to)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    call.finished = time.monotonic()
                    return
                body = route.handler(call) if route.handler else route.body
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(route.status)
                self.send_header("content-type", route.content_type)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(raw)
                call.finished = time.monotonic()

            do_POST = _serve  # noqa: N815 - BaseHTTPRequestHandler's method names
            do_GET = _serve  # noqa: N815 - BaseHTTPRequestHandler's method names

        self.server = LoopbackHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 loopback server
        return f"http://{host}:{port}"

    def start(self) -> WebhookServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls_to(self, path: str) -> list[WebhookCall]:
        with self._lock:
            return [c for c in self.calls if c.path == path]
