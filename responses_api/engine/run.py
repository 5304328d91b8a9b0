"""The engine: runs one response and yields its events, whoever the caller is.

A view (JSON or SSE), a Celery task or a WebSocket consumer drives the same `ResponseRun`;
only what they do with the events differs. Storage, registry tools and MCP servers are
injected (interfaces.py), so the engine itself does no ORM work. Its parts: calls.py (opening
the model calls), context.py (what the model is sent), router.py (targets), tools.py (a step's
tool calls), autocompact.py (a summary first), ending.py (how a run ends)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from ..domain import Target
from ..observability.metrics import upstream_error
from ..protocol.batches import flatten
from ..protocol.errors import GatewayError, ServerError, UpstreamError
from ..protocol.events import INCOMPLETE_REASONS, Event, EventBuilder
from ..protocol.guardrails import Decision
from ..protocol.mcp_tools import pending_approvals
from ..protocol.output_guard import CONTENT_FILTER, OutputGuard, unreported_usage
from ..protocol.prefix import ConvertedPrefix
from ..protocol.response import response_object
from ..protocol.tools import allowed_tool_names
from ..sealing import reasoning_sealer, signed_reasoning_sealer
from ..upstreams import UpstreamCall, UpstreamRequest, delta_batches, open_call
from . import tracing
from .autocompact import compaction_events
from .calls import ModelCalls
from .context import collect_summary
from .ending import Ending, store_failure, store_failure_when_back
from .interfaces import McpSession, Persistence, ResponseJob, SummaryScreen, ToolRunner
from .steering import STEERED, Steering, feed
from .tool_search import RunToolSearch
from .tools import ToolRound, check_approvals

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
        output_guard: OutputGuard | None = None,
        record_guardrails: Callable[[list[Decision]], Awaitable[None]] | None = None,
        screen_summary: SummaryScreen | None = None,
    ) -> None:
        """`stream_upstream`: stream from the upstream even when the client does not (workers
        do, so that a cancel stops generation and a poll sees the output so far); default: as
        the client asked. `first_sequence_number`: where this run's events continue an event
        log. `open_upstream`: how a model call is opened on a target (upstreams.open_call).
        `output_guard`: the output guardrails whose scope takes the response (None: none
        does, and the relay does nothing more per delta); `record_guardrails` audits their
        decisions once the run ends.
        `screen_summary`: the input guardrails an automatic compaction's summariser call passes."""
        self.job = job
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
            self.response,
            allowed_tools=allowed_tool_names(req.tool_choice, req.tools),
            tools=req.tools,
            reasoning_summary=bool(req.reasoning and req.reasoning.get("summary")),
            seal_reasoning=reasoning_sealer(job.tenant_id) if "reasoning.encrypted_content" in req.include else None,
            seal_signed=signed_reasoning_sealer(job.tenant_id),
            sequence_number=first_sequence_number,
            file_search_results="file_search_call.results" in req.include,
        )
        self.tool_search = RunToolSearch(req.tool_choice, job.context)
        self.error: GatewayError | None = None
        # OpenTelemetry (tracing.py): None unless an exporter is configured.
        self._span = tracing.response_span(
            model=req.model, response_id=job.response_id, conversation=req.conversation, request=req
        )
        self.calls = ModelCalls(
            job,
            self.builder,
            self.tool_search,
            mcp,
            span=self._span,
            stream=req.stream if stream_upstream is None else stream_upstream,
            open_upstream=open_upstream,
            screen_summary=screen_summary,
        )
        self.failure_events: list[Event] = []  # what connect() would have streamed on failure
        self._call: UpstreamCall | None = None
        self._started = time.monotonic()
        self._persisted = False
        self._cancel_requested = False
        self._stop_error: GatewayError | None = None  # request_stop: end failed with this, not cancelled
        self._tools_task: asyncio.Future[tuple[list[dict[str, Any]], list[Any]]] | None = None
        # WebSocket steering (api/steering.py): asked at the safe boundaries (engine/steering.py).
        self.steering: Steering | None = None
        # A WebSocket lane's converted upstream prefix (protocol/prefix.py), given by the lane:
        # model calls of this run reuse and keep it; a compaction or truncation clears it.
        self.converted_prefix: ConvertedPrefix | None = None
        self.output_guard = output_guard
        self._record_guardrails = record_guardrails
        self._tool_output_blocked = False

    # -- before the first byte -------------------------------------------------
    async def connect(self) -> None:
        """Open the first upstream call, falling back across the route's targets.

        Raises the last GatewayError when every target fails; the response is
        then stored as failed, and the caller still owes the client an HTTP
        error (nothing has been sent yet)."""
        try:
            check_approvals(self._unknown_approvals, approved=bool(self._approved), mcp=self.mcp)
            # The row is written while the upstream is being asked, not before.
            opening = asyncio.ensure_future(self._open_row())
            try:
                if not self._prelude and self.job.request.generate:
                    self._call = await self.calls.open_next(self.converted_prefix)
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
                self._retry_when_back("failure")
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
        the upstream request, and so a stream's first event (measured in bench/README.md,
        performance round 4). One turn of the loop lets that task run first."""
        await asyncio.sleep(0)
        await self.persistence.open()

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
                ending: Ending | None = None
                async for batch in self._steps():
                    if isinstance(batch, Ending):
                        ending = batch
                    else:
                        yield batch
                assert ending is not None, "the steps end with their Ending"
                terminal = self.builder.finish(incomplete_reason=ending.reason)
            except Exception as exc:  # noqa: BLE001 - whatever ended the steps, the response ends
                terminal = self._failed(exc)
            terminal = await self._store_end(terminal)
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

    async def _steps(self) -> AsyncIterator[list[Event] | Ending]:
        """Model calls and server tool calls until an answer, as non-empty lists of events, then
        the Ending they came to (its terminal events are made once the steps are closed)."""
        if not self.job.request.generate:  # a warm-up: the context is prepared, nothing generated
            yield Ending()
            return
        if self.job.request.compact:
            # The summary becomes the response's one output item, a `compaction` item sealed for
            # the tenant; its text is never streamed (the client gets the item whole).
            async for event in compaction_events(self):
                yield [event]
            yield Ending()
            return
        if self._prelude:
            async for event in self._run_prelude():
                yield [event]
            if self._tool_output_blocked:
                yield Ending(CONTENT_FILTER)
                return
        assert self._call is not None
        iteration = 0
        while True:
            if self.calls.autocompact is not None and self.calls.autocompact.pending:
                async for event in self._compact_then_open():
                    yield [event]
            # What _deltas does, inline and a batch (a network read) at a time: a relayed token
            # passes one generator level less, and a burst of them becomes one list of events.
            # The output guardrails (when any applies) stand between the deltas and the builder:
            # every sink (JSON, SSE, WebSocket, a worker's event log) and the store get what
            # they release.
            guard = self.output_guard
            chars_before = guard.begin_call() if guard is not None else 0
            try:
                async for deltas in delta_batches(self._call):
                    if self._cancel_requested:
                        raise _Cancelled()
                    if guard is not None:
                        deltas = await guard.feed(deltas)
                    events, steered, failure = feed(self.builder, self.steering, deltas)
                    if events:
                        yield events
                    if steered:
                        yield Ending(STEERED)
                        return
                    if failure is not None:
                        raise failure
                    if guard is not None and guard.blocked is not None:
                        await self._call.aclose()  # blocked: the model's answer ends here
                        estimated = unreported_usage(
                            guard, input_estimate=self.calls.input_estimate(), chars_before=chars_before
                        )
                        if estimated is not None:  # closed before its usage came: counted as estimated
                            feed(self.builder, self.steering, [estimated])
                        break
                if guard is not None and guard.blocked is None:
                    events, steered, failure = feed(self.builder, self.steering, await guard.end())
                    if events:
                        yield events
                    if steered:
                        yield Ending(STEERED)
                        return
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
            self.calls.end_span()
            events = self.builder.end_step()
            if events:
                yield events
            tool_round = ToolRound.of_step(
                self.builder, self.tools, self.job.request.max_tool_calls, self.tool_calls_made
            )
            if self.builder.finish_reason in INCOMPLETE_REASONS or not (tool_round.wanted or tool_round.searches):
                events = tool_round.skipped(self.builder)
                if events:
                    yield events
                yield Ending()
                return
            events = []
            for search in tool_round.searches:  # answered at once: a search is a lookup in memory
                events += self.builder.add_item(self.tool_search.answer(search))
            if events:
                yield events
            events = await self._run_round(tool_round)
            if events:
                yield events
            iteration += 1
            ending = self._after_round(tool_round, iteration)
            if ending is not None:
                yield ending
                return
            self.builder.new_step()
            self._call = await self.calls.open_next(self.converted_prefix)

    async def _run_prelude(self) -> AsyncIterator[Event]:
        """Before the first model call: the MCP servers' tools listed and the approved calls run;
        then the model call opens."""
        assert self.mcp is not None  # connect() refused approvals without their servers
        prelude = self.mcp.prelude(
            self.builder,
            context=self.job.context,
            request=self.job.request,
            approved=self._approved,
            stopped=lambda: self._cancel_requested,
            check_output=self._checked_tool_output
            if self.output_guard is not None and self.output_guard.detectors.tool_output
            else None,
        )
        async for event in prelude:
            yield event
        self.tool_calls_made += len(self._approved)
        if self._cancel_requested:
            raise _Cancelled()
        if self._tool_output_blocked:
            return  # withheld from the model: no call (the steps end content_filter)
        self._call = await self.calls.open_next(self.converted_prefix)

    async def _compact_then_open(self) -> AsyncIterator[Event]:
        """The pending automatic compaction (autocompact.py), then the model call proper, which
        starts at it."""
        assert self.calls.autocompact is not None
        async for event in compaction_events(self, auto=True):
            yield event
        self.calls.autocompact.pending = False
        self._call = await self.calls.open(self.converted_prefix)

    async def _run_round(self, tool_round: ToolRound) -> list[Event]:
        """The round's calls the budget lets run (a cancel request stops them), their outcomes as
        events."""
        self.tool_calls_made += tool_round.running
        task = self._tools_task = asyncio.ensure_future(
            tool_round.run(
                self.tools,
                self.mcp,
                self.job.response_id,
                self.builder,
                span=self._span,
                parallel=self.job.request.parallel_tool_calls,
            )
        )
        try:
            outputs, outcomes = await task
        except asyncio.CancelledError:
            if self._cancel_requested and task.cancelled():
                raise _Cancelled() from None
            raise
        finally:
            self._tools_task = None
        if self._cancel_requested:  # a tool ignored the cancel: its late result is not used
            raise _Cancelled()
        if self.output_guard is not None and self.output_guard.detectors.tool_output:
            outputs, outcomes = await self._guard_tool_outputs(tool_round, outputs, outcomes)
        return tool_round.outcome_events(self.builder, outputs, outcomes)

    async def _guard_tool_outputs(
        self, tool_round: ToolRound, outputs: list[dict[str, Any]], outcomes: list[Any]
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """The tools' outputs through the `tool_output` guardrails: redacted where one redacts;
        an output a `block` one matched is withheld (`[BLOCKED:category]` in its place, for the
        client, the store and no further model call: the run then ends `content_filter`)."""
        checked = self._checked_tool_output
        outputs = [
            dict(item, output=await checked(item["output"])) if isinstance(item.get("output"), str) else item
            for item in outputs
        ]
        mcp_count = len(tool_round.run_mcp)
        guarded: list[Any] = []
        for n, outcome in enumerate(outcomes):
            if n < mcp_count:  # an MCP call's outcome
                output = await checked(outcome.output)
                guarded.append(outcome if output is outcome.output else dataclasses.replace(outcome, output=output))
            else:  # a served hosted call's output
                guarded.append(await checked(outcome) if isinstance(outcome, str) else outcome)
        return outputs, guarded

    async def _checked_tool_output(self, text: str | None) -> str | None:
        """One tool output as the client, the store and the model may get it (`_guard_tool_outputs`)."""
        guard = self.output_guard
        if not text or guard is None:
            return text
        out, blocked = await guard.check_tool_output(text)
        if blocked is not None:
            self._tool_output_blocked = True
            return f"[BLOCKED:{blocked.category}]"
        return out

    def _after_round(self, tool_round: ToolRound, iteration: int) -> Ending | None:
        """The end the loop comes to after its `iteration`th tool round, if it ends; raises
        _Cancelled when a cancel was requested meanwhile."""
        if self._tool_output_blocked:
            return Ending(CONTENT_FILTER)
        ending = tool_round.ending(self.builder, iteration, self.max_iterations)
        if ending is not None:
            return ending
        if self._cancel_requested:
            raise _Cancelled()
        if self.steering is not None and self.steering.wanted():  # between model calls
            return Ending(STEERED)
        return None

    def _failed(self, exc: Exception) -> list[Event]:
        """The terminal events of steps that raised: stopped on request, failed with the error,
        or failed all the same (a bug must still end the response cleanly)."""
        if isinstance(exc, _Cancelled) or (isinstance(exc, GatewayError) and self._cancel_requested):
            return self._stopped()
        if isinstance(exc, GatewayError):
            self.error = exc
            terminal = self.builder.fail(exc)
            if isinstance(exc, UpstreamError) and self.calls.target is not None:
                upstream_error(self.calls.target.label, exc.code)
            return terminal
        log.error("response %s failed unexpectedly", self.job.response_id, exc_info=exc)
        self.error = ServerError("The gateway failed while generating this response.")
        return self.builder.fail(self.error)

    async def _store_end(self, terminal: list[Event]) -> list[Event]:
        """Store the response's end. Returns what the client is told last: `terminal`, or the
        failure the store's refusal made of it."""
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
            await store_failure(self.persistence, self.response, upstream=self._upstream_label, started=self._started)
        return terminal

    async def read_summary(self) -> str:
        """The summary the open call writes for a compaction (never streamed: the client gets
        the sealed item); its usage counts for the response."""
        summary = await collect_summary(self._deltas(), self.builder.feed)
        self.calls.end_span()
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

    async def _cancel(self) -> None:
        if self._persisted:
            return
        if self._call is not None:
            await asyncio.shield(self._call.aclose())
        self.builder.cancel()
        try:
            await asyncio.shield(self._persist())
        except GatewayError:  # the store is unreachable: store the cancellation once it is back
            self._retry_when_back("cancellation")

    def _retry_when_back(self, unstored: str = "") -> None:
        """Store the end from a task, once the store is back; `unstored`: what could not be
        stored now (logged; a client that left before anything was stored logs nothing)."""
        if unstored:
            log.warning(
                "response %s: its %s could not be stored; retrying in the background", self.job.response_id, unstored
            )
        store_failure_when_back(self.persistence, self.response, upstream=self._upstream_label, started=self._started)

    async def _persist(self) -> None:
        if self._persisted:
            return
        self._persisted = True
        if self._span is not None:
            self.calls.end_span(self.error)
            tracing.end_response(self._span, self.response)
        latency_ms = int((time.monotonic() - self._started) * 1000)
        try:
            await self.persistence.finish(
                self.response,
                upstream=self._upstream_label,
                latency_ms=latency_ms,
                cache_write_1h_tokens=self.builder.usage.cache_write_1h_tokens,
            )
        finally:
            if self.output_guard is not None and self._record_guardrails is not None:
                decisions = self.output_guard.take_decisions()
                if decisions:  # the callback never raises (a lost audit row is logged)
                    await self._record_guardrails(decisions)

    @property
    def _upstream_label(self) -> str:
        return self.calls.target.label if self.calls.target else ""

    @property
    def truncated_items(self) -> int:
        """The most items truncation "auto" dropped at one step so far."""
        return self.calls.truncated_items

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
