"""Request id on every response, and one structured access-log line per request."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest

from ..observability import metrics
from ..observability.metrics import OPEN_STREAMS
from .notes import ErrorResponse, RequestNotes
from .sse import EventStream

log = logging.getLogger("gateway.access")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _before(self, request: HttpRequest) -> float:
        # META, not `request.headers`: that builds a mapping of every header to read one.
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        # 128 random bits, as uuid4's hex (without its version bits), at two thirds of its cost.
        RequestNotes.of(request).request_id = incoming if _SAFE_ID.match(incoming) else f"req_{os.urandom(16).hex()}"
        return time.monotonic()

    def _after(self, request: HttpRequest, response: Any, started: float) -> Any:
        notes = RequestNotes.of(request)
        response["x-request-id"] = notes.request_id
        if request.path.startswith("/v1/"):
            match = request.resolver_match
            if match is not None and "response_id" in match.kwargs:
                notes.log_extra.setdefault("response_id", match.kwargs["response_id"])
            if isinstance(response, ErrorResponse):
                notes.log_extra.update(response.log_fields)
            if isinstance(response, EventStream):
                _log_stream_at_end(response, request, started)
            elif response.streaming and response.is_async:
                # A stream's line is written when it ends: by then its events have told
                # the request's log fields the response id, final status and tokens.
                response.streaming_content = _log_at_end(response.streaming_content, request, response, started)
            else:
                _access_line(request, response, started)
        return response

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        started = self._before(request)
        return self._after(request, self.get_response(request), started)

    async def __acall__(self, request: HttpRequest) -> Any:
        started = self._before(request)
        response = await self.get_response(request)
        return self._after(request, response, started)


def _access_line(request: HttpRequest, response: Any, started: float, **more: Any) -> None:
    elapsed = time.monotonic() - started
    notes = RequestNotes.of(request)
    _observe(request, notes.log_extra, response.status_code, elapsed, more.get("first_byte_ms"))
    log.info(
        "request",
        extra={
            "request_id": notes.request_id,
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "latency_ms": round(elapsed * 1000, 2),
            **notes.log_extra,
            **more,
        },
    )


async def _log_at_end(content: Any, request: HttpRequest, response: Any, started: float) -> AsyncIterator[Any]:

    first_byte: float | None = None
    ended = False
    OPEN_STREAMS.inc()
    try:
        async for chunk in content:
            if first_byte is None:
                first_byte = time.monotonic()
            yield chunk
        ended = True
    finally:
        OPEN_STREAMS.dec()
        more: dict[str, Any] = {"first_byte_ms": round((first_byte - started) * 1000, 2) if first_byte else None}
        if not ended:
            more["stream_end"] = "client_disconnected"
        _access_line(request, response, started, **more)


def _log_stream_at_end(response: EventStream, request: HttpRequest, started: float) -> None:
    """`_log_at_end` for the API's event streams, which the ASGI lane writes itself."""

    def ended(first_write: float | None, finished: bool) -> None:
        OPEN_STREAMS.dec()
        more: dict[str, Any] = {"first_byte_ms": round((first_write - started) * 1000, 2) if first_write else None}
        if not finished:
            more["stream_end"] = "client_disconnected"
        _access_line(request, response, started, **more)

    response.on_start = OPEN_STREAMS.inc
    response.on_end = ended


def _observe(
    request: HttpRequest, extra: dict[str, Any], status: int, seconds: float, first_byte_ms: float | None
) -> None:

    match = request.resolver_match
    route = match.route if match is not None and match.route else "unmatched"
    # A model label only for requests that reached a route: client-typed names stay out.
    model = extra.get("model", "") if extra.get("routed") else ""
    metrics.observe_request(
        route,
        model,
        status,
        seconds,
        first_byte_ms / 1000 if first_byte_ms is not None else None,
        (extra.get("input_tokens"), extra.get("output_tokens")),
    )
