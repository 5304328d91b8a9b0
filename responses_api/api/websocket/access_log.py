"""The access log and request metrics of WebSocket turns: one line per client message, as an
HTTP request writes one."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...observability import metrics
from ...protocol.errors import GatewayError

access_log = logging.getLogger("gateway.access")
# The route label of WebSocket turns in the request metrics (HTTP's are URL patterns).
WEBSOCKET_ROUTE = "v1/responses (websocket)"
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class TurnRecord:
    """What one WebSocket turn's access-log line and metrics say."""

    __slots__ = (
        "connection_id",
        "tenant",
        "stream_id",
        "started",
        "first_event",
        "kind",
        "model",
        "response_id",
        "status",
        "state",
        "usage",
        "error_code",
        "error_param",
        "ignored_fields",
    )

    def __init__(self, connection_id: str, tenant: str, stream_id: str | None = None) -> None:
        self.connection_id = connection_id
        self.tenant = tenant  # as HTTP's line names the key's tenant
        self.stream_id = stream_id
        self.started = time.monotonic()
        self.first_event: float | None = None
        self.kind = "response.create"
        self.model = ""  # set once the request reached a route (no client-typed label otherwise)
        self.response_id: str | None = None
        self.status = 200
        self.state: str | None = None  # the response's final status
        self.usage: dict[str, Any] = {}
        self.error_code: str | None = None
        self.error_param: str | None = None
        # Request fields accepted but not applied (HTTP names them in x-gateway-ignored-fields;
        # a WebSocket turn has no headers, so its access-log line does).
        self.ignored_fields: list[str] = []

    def saw(self, event: dict[str, Any]) -> None:
        if self.first_event is None:
            self.first_event = time.monotonic()
        response = event.get("response")
        if response is not None:
            self.response_id = response["id"]
            if event["type"] in TERMINAL:
                self.state = response["status"]
                self.usage = response.get("usage") or {}
                failure = response.get("error")
                if failure and self.error_code is None:  # why it failed, as HTTP's line says
                    self.error_code = failure.get("code")
        elif event["type"] == "error":  # a streamed failure's error event (a worker's log)
            self.error_code = event.get("code")
            self.error_param = event.get("param")

    def fail(self, error: GatewayError) -> None:
        self.status = error.status
        self.error_code, self.error_param = error.code, error.param

    def log(self) -> None:
        elapsed = time.monotonic() - self.started
        first_byte = self.first_event - self.started if self.first_event is not None else None
        tokens = (self.usage.get("input_tokens"), self.usage.get("output_tokens"))
        if self.kind != "steer":
            metrics.observe_request(WEBSOCKET_ROUTE, self.model, self.status, elapsed, first_byte, tokens)
        fields: dict[str, Any] = {
            "request_id": self.connection_id,
            "method": "WEBSOCKET",
            "path": "/v1/responses",
            "message_type": self.kind,
            "status": self.status,
            "latency_ms": round(elapsed * 1000, 2),
            "first_byte_ms": round(first_byte * 1000, 2) if first_byte is not None else None,
            "tenant": self.tenant,
        }
        if self.stream_id is not None:
            fields["stream_id"] = self.stream_id
        if self.model:
            fields["model"] = self.model
        if self.response_id is not None:
            fields["response_id"] = self.response_id
        if self.state is not None:
            fields["response_status"] = self.state
            fields["input_tokens"], fields["output_tokens"] = tokens
        if self.ignored_fields:
            fields["ignored_fields"] = self.ignored_fields
        if self.error_code is not None:
            fields["error_code"] = self.error_code
            fields["error_param"] = self.error_param
        access_log.info("websocket turn", extra=fields)
