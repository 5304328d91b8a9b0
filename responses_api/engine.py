"""The engine: runs one response and yields its events, whoever the caller is.

A view (JSON or SSE), a Celery task or a WebSocket consumer drives the same
`ResponseRun`; only what they do with the events differs. Storage is injected
(`Persistence`), so the engine itself does no ORM work.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol

from .protocol.errors import GatewayError, InvalidRequest, RateLimited, UpstreamError
from .protocol.events import Event, EventBuilder
from .protocol.request import CreateRequest
from .protocol.response import response_object
from .protocol.tools import allowed_tool_names
from .routing import Route, Target
from .upstreams import UpstreamCall, UpstreamRequest, open_call

log = logging.getLogger("gateway.engine")


@dataclass(slots=True)
class ResponseJob:
    """Everything needed to run one response, already validated and loaded."""

    response_id: str
    created_at: int
    tenant_id: int
    request: CreateRequest
    params: dict[str, Any]
    route: Route
    context: list[dict[str, Any]]  # the previous chain + this input: what the model sees
    input_items: list[dict[str, Any]]  # this request's own input (stored with the response)


class Persistence(Protocol):
    async def finish(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None: ...


def _falls_back(error: GatewayError) -> bool:
    """Worth trying another target: the upstream failed, not the request."""
    return isinstance(error, (UpstreamError, RateLimited)) and not isinstance(error, InvalidRequest)


class ResponseRun:
    def __init__(self, job: ResponseJob, persistence: Persistence) -> None:
        self.job = job
        self.persistence = persistence
        req = job.request
        self.response = response_object(
            response_id=job.response_id,
            created_at=job.created_at,
            status="in_progress",
            model=req.model,
            previous_response_id=req.previous_response_id,
            params=job.params,
            output=[],
        )
        self.builder = EventBuilder(
            self.response, allowed_tools=allowed_tool_names(req.tool_choice, req.tools)
        )
        self.error: GatewayError | None = None
        self._call: UpstreamCall | None = None
        self._target: Target | None = None
        self._started = time.monotonic()
        self._persisted = False

    # -- before the first byte -------------------------------------------------
    async def connect(self) -> None:
        """Open the first upstream call, falling back across the route's targets.

        Raises the last GatewayError when every target fails; the response is
        then stored as failed, and the caller still owes the client an HTTP
        error (nothing has been sent yet)."""
        last: GatewayError | None = None
        for target in self.job.route.attempt_order():
            try:
                self._call = await open_call(target, self._upstream_request())
                self._target = target
                return
            except GatewayError as exc:
                last = exc
                log.warning("upstream %s failed before the first byte: %s", target.label, exc.message)
                if not _falls_back(exc):
                    break
        assert last is not None
        self.error = last
        self.builder.fail(last)
        await self._persist()
        raise last

    def _upstream_request(self) -> UpstreamRequest:
        req = self.job.request
        return UpstreamRequest(request=req, items=self.job.context, tools=req.tools, stream=req.stream)

    # -- the stream --------------------------------------------------------------
    async def events(self) -> AsyncIterator[Event]:
        """All events of the response, from `response.created` to the terminal one."""
        assert self._call is not None, "connect() first"
        try:
            for event in self.builder.start():
                yield event
            try:
                async for delta in self._call.deltas():
                    for event in self.builder.feed(delta):
                        yield event
                terminal = self.builder.finish()
            except GatewayError as exc:
                self.error = exc
                terminal = self.builder.fail(exc)
            await self._persist()
            for event in terminal:
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away (or the response was cancelled): stop the
            # upstream now and keep what was generated.
            await self._cancel()
            raise
        finally:
            if self._call is not None:
                await self._call.aclose()

    async def _cancel(self) -> None:
        if self._persisted:
            return
        if self._call is not None:
            await asyncio.shield(self._call.aclose())
        self.builder.cancel()
        await asyncio.shield(self._persist())

    async def _persist(self) -> None:
        if self._persisted:
            return
        self._persisted = True
        latency_ms = int((time.monotonic() - self._started) * 1000)
        await self.persistence.finish(
            self.response, upstream=self._target.label if self._target else "", latency_ms=latency_ms
        )

    async def run_to_end(self) -> dict[str, Any]:
        """The non-streaming path: the same machine, its final state."""
        async for _ in self.events():
            pass
        return self.response
