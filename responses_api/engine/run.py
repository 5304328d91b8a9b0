"""The engine: runs one response and yields its events, whoever the caller is.

A view (JSON or SSE), a Celery task or a WebSocket consumer drives the same `ResponseRun`;
only what they do with the events differs. Storage, registry tools and MCP servers are
injected (interfaces.py), so the engine itself does no ORM work. Its parts: context.py (what
the model is sent), tools.py (a step's tool calls), router.py (targets), ending.py (an end the
store refused)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from ..domain import Target
from ..observability.metrics import upstream_error
from ..protocol.batches import flatten
from ..protocol.errors import GatewayError, InvalidRequest, ServerError, UpstreamError
from ..protocol.events import INCOMPLETE_REASONS, Event, EventBuilder
from ..protocol.mcp import pending_approvals
from ..protocol.prefix import ConvertedPrefix
from ..protocol.response import response_object
from ..protocol.tools import Tool, allowed_tool_names
from ..store.sealing import reasoning_sealer, signed_reasoning_sealer
from ..upstreams import UpstreamCall, UpstreamRequest, delta_batches, open_call, withheld_reasoning
from ..upstreams.tokenize import exact_counter
from . import tracing
from .autocompact import AutoCompaction, compact_then_open, compaction_events
from .context import collect_summary, compaction_opener, compaction_request, fit_context, model_items
from .ending import store_failure, store_failure_when_back
from .interfaces import McpSession, Persistence, ResponseJob, ToolRunner
from .router import SlotCall, route_call
from .steering import STEERED, Steering, ends_a_message
from .tool_search import RunToolSearch
from .tools import run_tool_step

log = logging.getLogger("gateway.engine")


class _Cancelled(Exception):
    """Raised inside the engine once a cancel was requested and the running step stopped."""


class ResponseRun:
    def __init__(
        self,
        job: ResponseJob,
        persistence: Persistence,
        tools: ToolRunner,
        *,
        max_iterations: int = 10,
        mcp: McpSession | None = None,
        stream_upstream: bool | None = None,
        first_sequence_number: int = 0,
        open_upstream: Callable[[Target, UpstreamRequest], Awaitable[UpstreamCall]] = open_call,
    ) -> None:
        """`stream_upstream`: stream from the upstream even when the client does not (workers
        do, so that a cancel stops generation and a poll sees the output so far); default: as
        the client asked. `first_sequence_number`: where this run's events continue an event
        log. `open_upstream`: how a model call is opened on a target (upstreams.open_call)."""
        self.job = job
        self._open_compaction = compaction_opener(job.tenant_id)
        self.persistence = persistence
        self.tools = tools
        self.mcp = mcp
        self._approved, unknown = pending_approvals(job.context, job.input_items)
        self._unknown_approvals = unknown
        # Listing servers and running approved calls come before the first model call; then
        # the upstream is opened inside the stream instead of before it. A compaction or a
        # warm-up (generate: false) runs no tool.
        plain = job.request.generate and not job.request.compact
        self._prelude = plain and (bool(mcp and mcp.labels) or bool(self._approved))
        self.max_iterations = max_iterations
        self.tool_calls_made = 0
        self.stream_upstream = job.request.stream if stream_upstream is None else stream_upstream
        self._open_upstream = open_upstream
        req = job.request
        self._autocompact = AutoCompaction.for_request(req, job.route.context_window)
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
            self.response,
            allowed_tools=allowed_tool_names(req.tool_choice, req.tools),
            tools=req.tools,
            reasoning_summary=bool(req.reasoning and req.reasoning.get("summary")),
            seal_reasoning=reasoning_sealer(job.tenant_id) if "reasoning.encrypted_content" in req.include else None,
            seal_signed=signed_reasoning_sealer(job.tenant_id),
            sequence_number=first_sequence_number,
        )
        self.tool_search = RunToolSearch(req.tool_choice, job.context)
        self.error: GatewayError | None = None
        # OpenTelemetry (tracing.py): None unless an exporter is configured.
        self._span = tracing.response_span(
            model=req.model, response_id=job.response_id, conversation=req.conversation, request=req
        )
        self._call_span: Any = None
        self._call_usage = (0, 0)  # the builder's usage when the current model call began
        self.failure_events: list[Event] = []  # what connect() would have streamed on failure
        self._call: UpstreamCall | None = None
        self._target: Target | None = None
        self._started = time.monotonic()
        self._persisted = False
        self.truncated_items = 0  # the most items truncation "auto" dropped at one step
        self._cancel_requested = False
        self._stop_error: GatewayError | None = None  # request_stop: end failed with this, not cancelled
        self._tools_task: asyncio.Future | None = None
        # WebSocket steering (api/steering.py): asked at the safe boundaries (engine/steering.py).
        self.steering: Steering | None = None
        # A WebSocket lane's converted upstream prefix (protocol/prefix.py), given by the lane:
        # model calls of this run reuse and keep it; a compaction or truncation clears it.
        self.converted_prefix: ConvertedPrefix | None = None

    # -- before the first byte -------------------------------------------------
    async def connect(self) -> None:
        """Open the first upstream call, falling back across the route's targets.

        Raises the last GatewayError when every target fails; the response is
        then stored as failed, and the caller still owes the client an HTTP
        error (nothing has been sent yet)."""
        try:
            if self._unknown_approvals:
                raise InvalidRequest(
                    f"'mcp_approval_response' answers {self._unknown_approvals[0]!r}, which is not an "
                    "mcp_approval_request of the previous response chain.",
                    param="input.approval_request_id",
                )
            if self._approved and self.mcp is None:
                raise InvalidRequest(
                    "An approved MCP call needs its server: send the 'mcp' tool again in 'tools'.",
                    param="tools",
                )
            # The row is written while the upstream is being asked, not before.
            opening = asyncio.ensure_future(self._open_row())
            try:
                if not self._prelude and self.job.request.generate:
                    self._call = await self._open_next()
                elif self._prelude and self.mcp is not None:
                    # Before anything is sent: a named MCP server whose tools cannot be listed
                    # fails the request (424), as at OpenAI.
                    await self.mcp.list_requested(self.job.context)
            finally:
                try:
                    await opening
                except BaseException:
                    if self._call is not None:
                        await self._call.aclose()
                    raise
        except GatewayError as exc:
            self.error = exc
            self.failure_events = self.builder.fail(exc)
            try:
                await self._persist()
            except GatewayError:  # the store is unreachable: end the row once it is back
                log.warning(
                    "response %s: its failure could not be stored; retrying in the background", self.job.response_id
                )
                self._retry_when_back()
            raise
        except asyncio.CancelledError:
            # The client left while the upstream was being asked: the row may exist already.
            if not self._persisted:
                self._persisted = True
                self.builder.cancel()
                self._retry_when_back()
            raise

    async def _open_row(self) -> None:
        """The response's row, written once the upstream request is on its way.

        aiohttp sends a request's body (and its headers, held to go out with it) from a task
        of its own, which on Python 3.11 waits behind whatever is ready on the loop: started
        right away, the insert (building and sending its statement) went first and delayed
        the upstream request: 0.4-0.6 ms of a stream's time to first event (bench/README.md,
        performance round 4). One turn of the loop lets that task run first."""
        await asyncio.sleep(0)
        await self.persistence.open()

    async def _open_with_fallback(self) -> UpstreamCall:
        """Open the next model call through the router (priorities, weights, cooldowns, per-target
        concurrency, retries with backoff before the first byte)."""
        spans: dict[str, Any] = {}

        async def open_one(target: Target) -> UpstreamCall:
            span = tracing.model_call_span(self._span, target, self.job.request)
            try:
                request = await self._upstream_request(target)
                call = await self._open_upstream(target, request)
            except BaseException as exc:
                tracing.end_model_call(span, error=exc)
                raise
            spans[target.label] = span
            self.builder.withheld_reasoning(withheld_reasoning(target, request))
            return call

        def failed(target: Target, exc: GatewayError) -> None:
            log.warning("upstream %s failed before the first byte: %s", target.label, exc.message)
            if isinstance(exc, UpstreamError):
                upstream_error(target.label, exc.code)

        target, call, slot = await route_call(self.job.route, open_one, on_failure=failed)
        self._target = target
        self._call_span = spans.get(target.label)
        self._call_usage = (self.builder.usage.input_tokens, self.builder.usage.output_tokens)
        return call if slot.lease is None else SlotCall(call, slot)

    async def _open_next(self) -> UpstreamCall:
        """The next model call; when its context passes `context_management`'s threshold, a
        summary call first (autocompact.py), which `_steps` reads before the call proper."""
        if self._autocompact is not None:
            self._autocompact.pending = self._autocompact.due(*self._model_items(), self.job.request)
        return await self._open_with_fallback()

    async def _upstream_request(self, target: Target) -> UpstreamRequest:
        req = self.job.request
        prefix = self.converted_prefix
        if req.compact:
            req, items = compaction_request(req, self.job.context, self.job.input_spans, self._open_compaction)
            tools: list[Tool] = []
            prefix = None
        else:
            items, tools = self._model_items()
            if self._autocompact is not None and self._autocompact.pending:
                # context_management: the summary first, over what the call proper would be given
                req, items = compaction_request(
                    req, self.job.context, self.job.input_spans, self._open_compaction, items=items
                )
                tools = []
                prefix = None
        window = self.job.route.context_window
        if window:
            items, dropped = await fit_context(items, tools, window, req, exact_counter(target, req, tools))
            if dropped:  # the oldest items are gone: nothing converted before begins these
                prefix = None
            if dropped > self.truncated_items:  # the most of any step is what the client is told
                self.truncated_items = dropped
                log.info("response %s: truncation dropped the %d oldest items", self.job.response_id, dropped)
        if prefix is None and self.converted_prefix is not None:
            # A compaction or truncation changes the context's beginning: the lane's next call
            # must not build on what was converted before it (the item check would refuse it
            # too; this frees it now).
            self.converted_prefix.clear()
        return UpstreamRequest(
            request=req,
            items=items,
            tools=tools,
            stream=self.stream_upstream,
            tenant_id=self.job.tenant_id,
            prefix=prefix,
        )

    def _model_items(self) -> tuple[list[dict[str, Any]], list[Tool]]:
        """What the model is given: the context and this response's output so far, from the last
        compaction on; and the tools."""
        names = self.mcp.names if self.mcp is not None else {}
        hosted = self.builder.hosted_outputs
        items = model_items(
            self.job.context, self.job.input_spans, self.response["output"], hosted, names, self._open_compaction
        )
        # Deferred tools stay out until a search finds them; searches show as the calls they were.
        tools, items = self.tool_search.offered(self.job.request.tools + self.mcp_tools, items, names, self.builder)
        return items, tools

    # -- the stream --------------------------------------------------------------
    def events(self, opening: str = "created") -> AsyncIterator[Event]:
        """All events of the response, to the terminal one, one by one (`event_batches`; closing
        the stream closes them: the client left, the run stops the upstream now)."""
        return flatten(self.event_batches(opening))

    async def event_batches(self, opening: str = "created") -> AsyncGenerator[list[Event], None]:
        """All events of the response, to the terminal one, as lists of the events that are ready
        together (what one upstream delta or one step makes): an SSE writer sends each list in
        one write (api/sse.py), and a relayed token passes one generator level less than
        event by event would (bench/README.md, performance round 5b). No list is empty.

        `opening`: "created" emits response.created + response.in_progress;
        "in_progress" (a worker taking a queued response) only the latter;
        "none" (a worker continuing a stream the web process opened) neither."""
        assert self._call is not None or self._prelude or not self.job.request.generate, "connect() first"
        try:
            opening_events = {"created": self.builder.start, "in_progress": self.builder.begin}
            first = opening_events.get(opening, list)()
            if first:
                yield first
            try:
                terminal: list[Event] = []
                async for batch in self._steps(terminal):
                    yield batch
            except _Cancelled:
                terminal = self._stopped()
            except GatewayError as exc:
                if self._cancel_requested:
                    terminal = self._stopped()
                else:
                    self.error = exc
                    terminal = self.builder.fail(exc)
                    if isinstance(exc, UpstreamError) and self._target is not None:
                        upstream_error(self._target.label, exc.code)
            except Exception:
                # A bug must still end the response cleanly: stored failed, stream terminated.
                log.exception("response %s failed unexpectedly", self.job.response_id)
                self.error = ServerError("The gateway failed while generating this response.")
                terminal = self.builder.fail(self.error)
            try:
                await self._persist()
            except GatewayError as exc:  # the store is unreachable (an outage)
                log.warning(
                    "response %s: its end could not be stored (%s); retrying in the background",
                    self.job.response_id,
                    exc.code,
                )
                self.error = exc
                terminal = self.builder.fail(exc)
                self._retry_when_back()  # store the failure once the database is back
            except Exception:
                # Whatever the store refused, the response still ends: failed, for the
                # client and (with its output left out, the likeliest cause) in the row.
                log.exception("response %s could not be stored", self.job.response_id)
                self.error = ServerError("The gateway could not store this response.")
                terminal = self.builder.fail(self.error)
                await store_failure(
                    self.persistence, self.response, upstream=self._upstream_label, started=self._started
                )
            if terminal:
                yield terminal
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away (or the response was cancelled): stop the
            # upstream now and keep what was generated.
            await self._cancel()
            raise
        finally:
            if self._call is not None:
                await self._call.aclose()

    async def _steps(self, terminal: list[Event]) -> AsyncIterator[list[Event]]:
        """Model calls and server tool calls until an answer, as non-empty lists of events; fills
        `terminal` at the end."""
        if not self.job.request.generate:  # a warm-up: the context is prepared, nothing generated
            terminal += self.builder.finish()
            return
        if self.job.request.compact:
            async for event in self._compaction(terminal):
                yield [event]
            return
        if self._prelude:
            assert self.mcp is not None  # connect() refused approvals without their servers
            prelude = self.mcp.prelude(
                self.builder,
                context=self.job.context,
                request=self.job.request,
                approved=self._approved,
                stopped=lambda: self._cancel_requested,
            )
            async for event in prelude:
                yield [event]
            self.tool_calls_made += len(self._approved)
            if self._cancel_requested:
                raise _Cancelled()
            self._call = await self._open_next()
        assert self._call is not None
        iteration = 0
        while True:
            if self._autocompact is not None and self._autocompact.pending:
                async for event in compact_then_open(self):
                    yield [event]
            # What _deltas does, inline and a batch (a network read) at a time: a relayed token
            # passes one generator level less, and a burst of them becomes one list of events.
            try:
                async for deltas in delta_batches(self._call):
                    if self._cancel_requested:
                        raise _Cancelled()
                    events: list[Event] = []
                    failure: Exception | None = None
                    for delta in deltas:
                        if self.steering is not None and ends_a_message(self.builder, delta) and self.steering.wanted():
                            if events:
                                yield events
                            terminal += self.builder.finish(incomplete_reason=STEERED)
                            return
                        try:
                            events += self.builder.feed(delta)
                        except Exception as exc:  # noqa: BLE001 - raised below, after the events before it
                            failure = exc
                            break
                    if events:
                        yield events
                    if failure is not None:
                        raise failure
            except _Cancelled:
                raise
            except Exception:
                if self._cancel_requested:
                    raise _Cancelled() from None
                raise
            if self._cancel_requested:
                raise _Cancelled()
            self._end_call_span()
            events = self.builder.end_step()
            if events:
                yield events
            calls = self.builder.step_calls
            server_calls = [
                c
                for c in calls
                if c["type"] == "function_call" and "namespace" not in c and self.tools.is_server_tool(c["name"])
            ]
            mcp_calls = self.builder.step_mcp_calls
            hosted_calls = self.builder.step_hosted_calls
            searches = self.builder.step_search_calls  # the gateway answers them (tool_search.py)
            if self.builder.finish_reason in INCOMPLETE_REASONS or not (
                server_calls or mcp_calls or hosted_calls or searches
            ):
                events = self.builder.skip_mcp_calls("not run: the model's output was cut short")
                for item in hosted_calls:
                    events += self.builder.finish_hosted_call(item, None)
                if events:
                    yield events
                terminal += self.builder.finish()
                return
            events = []
            for search in searches:  # answered at once: a search is a lookup in memory
                events += self.builder.add_item(self.tool_search.answer(search))
            if events:
                yield events
            budget = self.job.request.max_tool_calls
            wanted = len(server_calls) + len(mcp_calls) + len(hosted_calls)
            room = wanted if budget is None else max(budget - self.tool_calls_made, 0)
            run_hosted = hosted_calls[:room]
            run_mcp = mcp_calls[: max(room - len(run_hosted), 0)]
            run_server = server_calls[: max(room - len(run_hosted) - len(run_mcp), 0)]
            self.tool_calls_made += len(run_server) + len(run_mcp) + len(run_hosted)
            self._tools_task = asyncio.ensure_future(
                run_tool_step(
                    self.tools,
                    self._mcp_call,
                    run_server,
                    run_mcp,
                    [(self.builder.hosted_outputs[item["id"]], item["id"]) for item in run_hosted],
                    span=self._span,
                    parallel=self.job.request.parallel_tool_calls,
                )
            )
            try:
                outputs, outcomes = await self._tools_task
            except asyncio.CancelledError:
                if self._cancel_requested and self._tools_task.cancelled():
                    raise _Cancelled() from None
                raise
            finally:
                self._tools_task = None
            events = []
            for item, outcome in zip(run_mcp, outcomes[: len(run_mcp)]):
                events += self.builder.finish_mcp_call(item, output=outcome.output, error=outcome.error)
            for item, output in zip(hosted_calls, [*outcomes[len(run_mcp) :], *[None] * len(hosted_calls)]):
                events += self.builder.finish_hosted_call(item, output)
            events += self.builder.skip_mcp_calls("not run: max_tool_calls was reached")
            for item in outputs:
                events += self.builder.add_item(item)
            if events:
                yield events
            if len(run_server) + len(run_mcp) + len(run_hosted) < wanted:
                terminal += self.builder.finish(incomplete_reason="max_tool_calls")
                return
            if len(server_calls) < len(calls) or self.builder.step_approvals:
                # Client tools or approval requests remain: the client answers them.
                terminal += self.builder.finish()
                return
            iteration += 1
            if iteration >= self.max_iterations:
                terminal += self.builder.finish(incomplete_reason="max_tool_calls")
                return
            if self._cancel_requested:
                raise _Cancelled()
            if self.steering is not None and self.steering.wanted():  # between model calls
                terminal += self.builder.finish(incomplete_reason=STEERED)
                return
            self.builder.new_step()
            self._call = await self._open_next()

    async def _compaction(self, terminal: list[Event]) -> AsyncIterator[Event]:
        """The summary the model writes becomes the response's one output item, a `compaction`
        item sealed for the tenant; its text is never streamed (the client gets the item whole)."""
        async for event in compaction_events(self):
            yield event
        terminal += self.builder.finish()

    async def read_summary(self) -> str:
        """The summary the open call writes for a compaction (never streamed: the client gets
        the sealed item); its usage counts for the response."""
        summary = await collect_summary(self._deltas(), self.builder.feed)
        self._end_call_span()
        return summary

    async def _deltas(self) -> AsyncIterator[Any]:
        """The current model call's deltas; a cancel request (or the error a call closed by one
        raises) ends them with _Cancelled."""
        assert self._call is not None
        try:
            async for delta in self._call.deltas():
                if self._cancel_requested:
                    raise _Cancelled()
                yield delta
        except _Cancelled:
            raise
        except Exception:
            if self._cancel_requested:
                raise _Cancelled() from None
            raise

    def _mcp_call(self, item: dict[str, Any]) -> Any:
        assert self.mcp is not None
        return self.mcp.call(
            item["server_label"], item["name"], item["arguments"], key=(self.job.response_id, item["id"])
        )

    async def _cancel(self) -> None:
        if self._persisted:
            return
        if self._call is not None:
            await asyncio.shield(self._call.aclose())
        self.builder.cancel()
        try:
            await asyncio.shield(self._persist())
        except GatewayError:  # the store is unreachable: store the cancellation once it is back
            log.warning(
                "response %s: its cancellation could not be stored; retrying in the background", self.job.response_id
            )
            self._retry_when_back()

    def _retry_when_back(self) -> None:
        store_failure_when_back(self.persistence, self.response, upstream=self._upstream_label, started=self._started)

    def _end_call_span(self, error: BaseException | None = None) -> None:
        if self._call_span is None:
            return
        before_in, before_out = self._call_usage
        tracing.end_model_call(
            self._call_span,
            input_tokens=self.builder.usage.input_tokens - before_in,
            output_tokens=self.builder.usage.output_tokens - before_out,
            finish_reason=self.builder.finish_reason,
            error=error,
        )
        self._call_span = None

    async def _persist(self) -> None:
        if self._persisted:
            return
        self._persisted = True
        if self._span is not None:
            self._end_call_span(self.error)
            tracing.end_response(self._span, self.response)
        latency_ms = int((time.monotonic() - self._started) * 1000)
        await self.persistence.finish(
            self.response,
            upstream=self._upstream_label,
            latency_ms=latency_ms,
            cache_write_1h_tokens=self.builder.usage.cache_write_1h_tokens,
        )

    @property
    def _upstream_label(self) -> str:
        return self._target.label if self._target else ""

    @property
    def mcp_tools(self) -> list[Tool]:
        """The MCP tools the model sees (none before the prelude listed them)."""
        return self.mcp.tools if self.mcp is not None else []

    @property
    def ended(self) -> bool:
        """Its end is stored (or being stored): nothing more will happen."""
        return self._persisted

    def _stopped(self) -> list[Event]:
        """The end of a run stopped on request: cancelled, or failed with `request_stop`'s error."""
        if self._stop_error is not None:
            self.error = self._stop_error
            return self.builder.fail(self._stop_error)
        self.builder.cancel()
        return [self.builder.cancelled_event()]

    def request_stop(self, error: GatewayError) -> None:
        """As `request_cancel`, but the run ends `failed` with `error` (a process shutting down:
        the client is told to retry, and the row says why)."""
        if self._cancel_requested or self._persisted:
            return
        self._stop_error = error
        self.request_cancel()

    def request_cancel(self) -> None:
        """Stop soon: close the upstream request, stop running tools; the run ends `cancelled`."""
        if self._cancel_requested or self._persisted:
            return
        self._cancel_requested = True
        if self._tools_task is not None:
            self._tools_task.cancel()
        if self._call is not None:
            asyncio.ensure_future(self._call.aclose())

    async def run_to_end(self) -> dict[str, Any]:
        """The non-streaming path: the same machine, its final state."""
        self.builder.discard_events()
        async for _ in self.event_batches():
            pass
        return self.response
