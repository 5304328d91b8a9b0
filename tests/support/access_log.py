"""The gateway's access log (`gateway.access`) as a test reads it: every line kept as a record;
the `access_log` fixture (tests/conftest.py) attaches one for a test."""

from __future__ import annotations

import logging
import time


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def for_request(self, request_id: str, timeout: float = 5.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [vars(r) for r in self.records if getattr(r, "request_id", None) == request_id]
            if found:
                return found
            time.sleep(0.02)
        return []

    def websocket_turns(self) -> list[dict]:
        """The lines of WebSocket turns (one per `response.create` or `response.steer`)."""
        return [vars(r) for r in self.records if getattr(r, "method", None) == "WEBSOCKET"]
