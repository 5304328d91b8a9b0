"""The engine: runs one response and yields its events, whoever the caller is.

A view (JSON or SSE), a Celery task or a WebSocket consumer drives the same
`ResponseRun`; only what they do with the events differs. Storage is injected
(`Persistence`), so the engine itself does no ORM work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..api.metrics import upstream_error
from ..orchestration.routing import Route, Target
from ..protocol.compaction import (
    WHOLE_CONTEXT_INSTRUCTIONS,
    expand_compactions,
    summary_request_item,
)
from ..protocol.deltas import TextDelta, Usage
from ..protocol.errors import GatewayError, InvalidRequest, ServerError, UpstreamError
from ..protocol.events import INCOMPLETE_REASONS, Event, EventBuilder
from ..protocol.ids import new_id
from ..protocol.mcp import McpBinding, as_model_items, model_names, pending_approvals
from ..protocol.request import CreateRequest
from ..protocol.response import response_object
from ..protocol.tokens import DEFAULT_OUTPUT_RESERVE, estimate_request, truncate
from ..protocol.tools import Tool, allowed_tool_names, make_tool
from ..upstreams import UpstreamCall, UpstreamRequest, open_call
from . import tracing
from .autocompact import AutoCompaction, compact_then_open, compaction_item
from .router import Slot, route_call
from .steering import STEERED, Steering, ends_a_message

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
    async def open(self) -> None:
        """Make the running response visible (where it is stored at all)."""
        ...

    async def finish(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None: ...

    async def finish_failed(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        """Store a response that failed while being stored: its terminal state, no items."""
        ...


class ToolRunner(Protocol):
    def is_server_tool(self, name: str) -> bool: ...

    async def execute(self, call: dict[str, Any]) -> str:
        """Run one function_call item; returns the output (errors become outputs)."""
        ...


class McpRunner(Protocol):
    """The response's MCP servers (tool_registry.runner.McpToolset)."""

    labels: list[str]

    async def listing(self, label: str) -> list[dict[str, Any]]:
        """The server's tools; raises an exception with `message` when it cannot be listed."""
        ...

    def allows(self, label: str, name: str, annotations: dict | None) -> bool: ...

    def requires_approval(self, label: str, name: str, annotations: dict | None) -> bool: ...

    async def call(self, label: str, name: str, arguments: str, *, key: tuple[str, str]) -> Any:
        """Run one call once; returns an outcome with `output` and `error` (never raises)."""
        ...


# Pending retries of storing a failure: the loop holds tasks only weakly.
_retries: set[asyncio.Task] = set()


def _reasoning_sealer(tenant_id: int) -> Callable[[str], str]:
    """Reasoning text -> `encrypted_content` only this gateway can open, for this tenant."""
    from ..store.sealing import sealer

    seal = sealer().seal
    return lambda text: seal({"text": text}, tenant_id=tenant_id, purpose="reasoning")


def _signed_reasoning_sealer(tenant_id: int) -> Callable[[str, str], str]:
    """Reasoning an upstream signed (Anthropic's thinking): text and signature sealed into
    `encrypted_content`, so that the next turn can give the upstream both back."""
    from ..store.sealing import sealer

    return lambda text, signature: sealer().seal(
        {"text": text, "signature": signature}, tenant_id=tenant_id, purpose="reasoning"
    )


class _Cancelled(Exception):
    """Raised inside the engine once a cancel was requested and the running step stopped."""


class _SlotCall:
    """A call holding a target's concurrency slot (router.py) until it ends or is closed."""

    def __init__(self, call: UpstreamCall, slot: Slot) -> None:
        self.call = call
        self.slot = slot

    async def deltas(self) -> AsyncIterator[Any]:
        try:
            async for delta in self.call.deltas():
                yield delta
        finally:
            await self.slot.release()

    async def aclose(self) -> None:
        try:
            await self.call.aclose()
        finally:
            await self.slot.release()


class ResponseRun:
    def __init__(
        self,
        job: ResponseJob,
        persistence: Persistence,
        tools: ToolRunner,
        *,
        max_iterations: int = 10,
        mcp: McpRunner | None = None,
        stream_upstream: bool | None = None,
        first_sequence_number: int = 0,
        open_upstream: Callable[[Target, UpstreamRequest], Awaitable[UpstreamCall]] = open_call,
    ) -> None:
        """`stream_upstream`: stream from the upstream even when the client does not (workers
        do, so that a cancel stops generation and a poll sees the output so far); default: as
        the client asked. `first_sequence_number`: where this run's events continue an event
        log. `open_upstream`: how a model call is opened on a target (upstreams.open_call)."""
        self.job = job
        self.persistence = persistence
        self.tools = tools
        self.mcp = mcp
        self.mcp_tools: list[Tool] = []  # the MCP tools the model sees, once listed
        self._mcp_names: dict[tuple[str, str], str] = {}
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
            seal_reasoning=_reasoning_sealer(job.tenant_id) if "reasoning.encrypted_content" in req.include else None,
            seal_signed=_signed_reasoning_sealer(job.tenant_id),
            sequence_number=first_sequence_number,
        )
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
                call = await self._open_upstream(target, self._upstream_request())
            except BaseException as exc:
                tracing.end_model_call(span, error=exc)
                raise
            spans[target.label] = span
            return call

        def failed(target: Target, exc: GatewayError) -> None:
            log.warning("upstream %s failed before the first byte: %s", target.label, exc.message)
            if isinstance(exc, UpstreamError):
                upstream_error(target.label, exc.code)

        target, call, slot = await route_call(self.job.route, open_one, on_failure=failed)
        self._target = target
        self._call_span = spans.get(target.label)
        self._call_usage = (self.builder.usage.input_tokens, self.builder.usage.output_tokens)
        return call if slot.lease is None else _SlotCall(call, slot)

    def _open_compaction(self, sealed: str) -> dict[str, Any]:
        """A compaction item's sealed payload (its seal was checked when the request came in)."""
        from ..store.sealing import sealer

        return sealer().unseal(sealed, tenant_id=self.job.tenant_id, purpose="compaction")

    async def _open_next(self) -> UpstreamCall:
        """The next model call; when its context passes `context_management`'s threshold, a
        summary call first (autocompact.py), which `_steps` reads before the call proper."""
        if self._autocompact is not None:
            self._autocompact.pending = self._autocompact.due(*self._model_items(), self.job.request)
        return await self._open_with_fallback()

    def _upstream_request(self) -> UpstreamRequest:
        req = self.job.request
        if req.compact:
            return self._compaction_request()
        items, tools = self._model_items()
        if self._autocompact is not None and self._autocompact.pending:
            return self._compaction_request(items)
        if self.job.route.context_window:
            items = self._fit(items, tools, self.job.route.context_window)
        return UpstreamRequest(
            request=req, items=items, tools=tools, stream=self.stream_upstream, tenant_id=self.job.tenant_id
        )

    def _model_items(self) -> tuple[list[dict[str, Any]], list[Tool]]:
        """What the model is given: the context and this response's output so far, from the last
        compaction on; and the tools."""
        # Later steps of a tool loop see what this response produced so far; a served hosted
        # tool's call is shown to the model as the function call it made, with its output.
        output: list[dict[str, Any]] = []
        for item in self.response["output"]:
            served = self.builder.hosted_outputs.get(item["id"])
            if served is not None and "output" in served:
                output += [
                    {
                        "type": "function_call",
                        "id": item["id"],
                        "call_id": served["call_id"],
                        "name": served["name"],
                        "arguments": served.get("arguments") or "{}",
                    },
                    {"type": "function_call_output", "call_id": served["call_id"], "output": served["output"]},
                ]
            else:
                output.append(item)
        items = expand_compactions(as_model_items(self.job.context + output, self._mcp_names), self._open_compaction)
        return items, self.job.request.tools + self.mcp_tools

    def _compaction_request(self, items: list[dict[str, Any]] | None = None) -> UpstreamRequest:
        """The model call of a compaction: the context (`items`, or the job's), then a request to
        summarise it, with the summariser's instructions and no tools; the oldest items give way
        if it does not fit."""
        req = self.job.request
        instructions = (
            f"{req.instructions}\n\n{WHOLE_CONTEXT_INSTRUCTIONS}" if req.instructions else WHOLE_CONTEXT_INSTRUCTIONS
        )
        summarise = dataclasses.replace(
            req,
            instructions=instructions,
            tools=[],
            tool_choice="none",
            text={"format": {"type": "text"}, "verbosity": "medium"},
            truncation="auto",
            max_output_tokens=None,
        )
        if items is None:
            items = expand_compactions(as_model_items(self.job.context, {}), self._open_compaction)
        items = [*items, summary_request_item()]
        if self.job.route.context_window:
            items = self._fit(items, [], self.job.route.context_window, summarise)
        return UpstreamRequest(
            request=summarise, items=items, tools=[], stream=self.stream_upstream, tenant_id=self.job.tenant_id
        )

    def _fit(
        self, items: list[dict[str, Any]], tools: list[Any], window: int, req: CreateRequest | None = None
    ) -> list[dict[str, Any]]:
        """The context within the model's window: with truncation "auto" the oldest items are
        dropped; with "disabled" an over-long context is a 400 before the upstream is called."""
        req = req or self.job.request
        budget = window - (req.max_output_tokens or min(DEFAULT_OUTPUT_RESERVE, window // 4))
        tool_dicts = [t.as_dict() for t in tools]
        if req.truncation == "auto":
            fitted = truncate(items, budget=budget, instructions=req.instructions, tools=tool_dicts)
            if fitted is not None:
                kept, dropped = fitted
                if dropped > self.truncated_items:
                    self.truncated_items = dropped
                    log.info(
                        "response %s: truncation dropped the %d oldest items to fit %d tokens",
                        self.job.response_id,
                        dropped,
                        budget,
                    )
                return kept
        elif estimate_request(items, req.instructions, tool_dicts) <= budget:
            return items
        raise InvalidRequest(
            f"The input is longer than the model's context window ({window} tokens, {budget} for the input "
            "after room for the answer)"
            + (
                "; even its newest item alone does not fit."
                if req.truncation == "auto"
                else "; send 'truncation': 'auto' to drop the oldest items."
            ),
            param="input",
            code="context_length_exceeded",
        )

    # -- the stream --------------------------------------------------------------
    async def events(self, opening: str = "created") -> AsyncIterator[Event]:
        """All events of the response, to the terminal one.

        `opening`: "created" emits response.created + response.in_progress;
        "in_progress" (a worker taking a queued response) only the latter;
        "none" (a worker continuing a stream the web process opened) neither."""
        assert self._call is not None or self._prelude or not self.job.request.generate, "connect() first"
        try:
            opening_events = {"created": self.builder.start, "in_progress": self.builder.begin}
            for event in opening_events.get(opening, list)():
                yield event
            try:
                terminal: list[Event] = []
                async for event in self._steps(terminal):
                    yield event
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
                await self._persist_failure()
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

    async def _steps(self, terminal: list[Event]) -> AsyncIterator[Event]:
        """Model calls and server tool calls until an answer; fills `terminal` at the end."""
        if not self.job.request.generate:  # a warm-up: the context is prepared, nothing generated
            terminal += self.builder.finish()
            return
        if self.job.request.compact:
            async for event in self._compaction(terminal):
                yield event
            return
        if self._prelude:
            async for event in self._mcp_prelude():
                yield event
            if self._cancel_requested:
                raise _Cancelled()
            self._call = await self._open_next()
        assert self._call is not None
        iteration = 0
        while True:
            if self._autocompact is not None and self._autocompact.pending:
                async for event in compact_then_open(self):
                    yield event
            try:
                async for delta in self._call.deltas():
                    if self._cancel_requested:
                        raise _Cancelled()
                    if self.steering is not None and ends_a_message(self.builder, delta) and self.steering.wanted():
                        terminal += self.builder.finish(incomplete_reason=STEERED)
                        return
                    for event in self.builder.feed(delta):
                        yield event
            except _Cancelled:
                raise
            except Exception:
                if self._cancel_requested:
                    raise _Cancelled() from None
                raise
            if self._cancel_requested:
                raise _Cancelled()
            self._end_call_span()
            for event in self.builder.end_step():
                yield event
            calls = self.builder.step_calls
            server_calls = [
                c
                for c in calls
                if c["type"] == "function_call" and "namespace" not in c and self.tools.is_server_tool(c["name"])
            ]
            mcp_calls = self.builder.step_mcp_calls
            hosted_calls = self.builder.step_hosted_calls
            if self.builder.finish_reason in INCOMPLETE_REASONS or not (server_calls or mcp_calls or hosted_calls):
                for event in self.builder.skip_mcp_calls("not run: the model's output was cut short"):
                    yield event
                for item in hosted_calls:
                    for event in self.builder.finish_hosted_call(item, None):
                        yield event
                terminal += self.builder.finish()
                return
            budget = self.job.request.max_tool_calls
            wanted = len(server_calls) + len(mcp_calls) + len(hosted_calls)
            room = wanted if budget is None else max(budget - self.tool_calls_made, 0)
            run_hosted = hosted_calls[:room]
            run_mcp = mcp_calls[: max(room - len(run_hosted), 0)]
            run_server = server_calls[: max(room - len(run_hosted) - len(run_mcp), 0)]
            self._tools_task = asyncio.ensure_future(self._run_tools(run_server, run_mcp, run_hosted))
            try:
                outputs, outcomes = await self._tools_task
            except asyncio.CancelledError:
                if self._cancel_requested and self._tools_task.cancelled():
                    raise _Cancelled() from None
                raise
            finally:
                self._tools_task = None
            for item, outcome in zip(run_mcp, outcomes[: len(run_mcp)]):
                for event in self.builder.finish_mcp_call(item, output=outcome.output, error=outcome.error):
                    yield event
            for item, output in zip(hosted_calls, [*outcomes[len(run_mcp) :], *[None] * len(hosted_calls)]):
                for event in self.builder.finish_hosted_call(item, output):
                    yield event
            for event in self.builder.skip_mcp_calls("not run: max_tool_calls was reached"):
                yield event
            for item in outputs:
                for event in self.builder.add_item(item):
                    yield event
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
        async for event in compaction_item(self):
            yield event
        terminal += self.builder.finish()

    async def _read_summary(self) -> str:
        """The summary the open call writes for a compaction (never streamed: the client gets
        the sealed item); its usage counts for the response."""
        assert self._call is not None
        text: list[str] = []
        try:
            async for delta in self._call.deltas():
                if self._cancel_requested:
                    raise _Cancelled()
                if isinstance(delta, TextDelta):
                    text.append(delta.text)
                elif isinstance(delta, Usage):
                    self.builder.feed(delta)
        except _Cancelled:
            raise
        except Exception:
            if self._cancel_requested:
                raise _Cancelled() from None
            raise
        self._end_call_span()
        summary = "".join(text).strip()
        if not summary:
            raise UpstreamError("The model returned no summary for the compaction.", code="upstream_empty")
        return summary

    async def _run_tools(
        self, calls: list[dict[str, Any]], mcp_calls: list[dict[str, Any]], hosted: Sequence[dict[str, Any]] = ()
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """Registry calls, MCP calls and served hosted calls of one step; concurrently when
        parallel_tool_calls. Returns the registry calls' output items, then the MCP outcomes
        followed by the hosted calls' outputs."""
        self.tool_calls_made += len(calls) + len(mcp_calls) + len(hosted)
        served = [self.builder.hosted_outputs[item["id"]] for item in hosted]
        jobs = (
            [self.tools.execute(c) for c in calls]
            + [self._mcp_call(i) for i in mcp_calls]
            + [
                self.tools.execute(
                    {
                        "name": s["name"],
                        "call_id": s["call_id"],
                        "arguments": s.get("arguments") or "{}",
                        "type": "function_call",
                        "id": item["id"],
                    }
                )
                for s, item in zip(served, hosted)
            ]
        )
        if self._span is not None:
            named = (
                [(c["name"], c["call_id"], "function") for c in calls]
                + [(i["name"], i["id"], "extension") for i in mcp_calls]
                + [(s["name"], s["call_id"], "function") for s in served]
            )
            jobs = [
                tracing.traced_tool(self._span, job, name=n, call_id=c, tool_type=t)
                for job, (n, c, t) in zip(jobs, named)
            ]
        if self.job.request.parallel_tool_calls:
            results = await asyncio.gather(*jobs)
        else:
            results = [await job for job in jobs]
        outputs = results[: len(calls)]
        fco = [
            {
                "id": new_id("fco"),
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": output,
                "status": "completed",
            }
            for call, output in zip(calls, outputs)
        ]
        return fco, list(results[len(calls) :])

    def _mcp_call(self, item: dict[str, Any]) -> Any:
        assert self.mcp is not None
        return self.mcp.call(
            item["server_label"], item["name"], item["arguments"], key=(self.job.response_id, item["id"])
        )

    async def _mcp_prelude(self) -> AsyncIterator[Event]:
        """List the servers' tools (unless the chain already did), bind them to function names
        for the model, then run the calls the client approved."""
        listed_before = {
            i["server_label"]: i["tools"]
            for i in self.job.context
            if i["type"] == "mcp_list_tools" and not i.get("error")
        }
        listed: list[tuple[str, dict[str, Any]]] = []
        mcp = self.mcp
        for label in mcp.labels if mcp is not None else []:
            assert mcp is not None  # labels come from it

            def allowed(tools: list[dict[str, Any]], label: str = label) -> list[dict[str, Any]]:
                return [t for t in tools if mcp.allows(label, t["name"], t.get("annotations"))]

            if label in listed_before:
                tools = allowed(listed_before[label])
            else:
                item, events = self.builder.open_list_tools(label)
                for event in events:
                    yield event
                try:
                    # The item shows what this response may use: allowed_tools applied.
                    tools, error = allowed(await mcp.listing(label)), None
                except Exception as exc:  # the server is down or refused: answer without its tools
                    tools, error = [], getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                for event in self.builder.close_list_tools(item, tools, error):
                    yield event
            listed += [(label, t) for t in tools]
        req = self.job.request
        self._mcp_names = model_names([(label, t["name"]) for label, t in listed], {t.name for t in req.tools})
        bindings: dict[str, McpBinding] = {}
        for label, tool in listed:
            name = self._mcp_names[(label, tool["name"])]
            schema = tool.get("input_schema") if isinstance(tool.get("input_schema"), dict) else None
            self.mcp_tools.append(
                make_tool(
                    name=name,
                    description=tool.get("description") or None,
                    parameters=schema,
                    strict=False,
                    param=f"MCP tool {label}/{tool['name']}",
                    source="mcp",
                )
            )
            needs_approval = mcp is not None and mcp.requires_approval(label, tool["name"], tool.get("annotations"))
            bindings[name] = McpBinding(label, tool["name"], needs_approval)
        self.builder.mcp_bindings = bindings
        self.builder.allowed_tools = allowed_tool_names(req.tool_choice, req.tools + self.mcp_tools)
        for request, _answer in self._approved:
            if self._cancel_requested:
                raise _Cancelled()
            item, events = self.builder.open_mcp_call(
                request["server_label"],
                request["name"],
                request["arguments"],
                approval_request_id=request["id"],
            )
            for event in events:
                yield event
            self.tool_calls_made += 1
            assert self.mcp is not None
            outcome = await self.mcp.call(
                request["server_label"], request["name"], request["arguments"], key=(request["id"], "approved")
            )
            for event in self.builder.finish_mcp_call(item, output=outcome.output, error=outcome.error):
                yield event

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
        task = asyncio.ensure_future(self._persist_failure_when_back())
        _retries.add(task)
        task.add_done_callback(_retries.discard)

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
            self.response, upstream=self._target.label if self._target else "", latency_ms=latency_ms
        )

    async def _persist_failure_when_back(self, attempts: int = 20) -> None:
        """Store the response's end (failed or cancelled, without its items) once the database
        answers again, so that its row does not stay open."""
        delay = 0.5
        for _ in range(attempts):  # about 90 s in all; after that the reaper ends the row
            await asyncio.sleep(delay)
            try:
                await self.persistence.finish_failed(
                    self.response,
                    upstream=self._target.label if self._target else "",
                    latency_ms=int((time.monotonic() - self._started) * 1000),
                )
                log.warning("response %s: its end is stored now", self.job.response_id)
                return
            except Exception:
                delay = min(delay * 2, 5.0)
        log.warning("response %s: its failure could not be stored; the reaper will end it", self.job.response_id)

    async def _persist_failure(self) -> None:
        try:
            await self.persistence.finish_failed(
                self.response,
                upstream=self._target.label if self._target else "",
                latency_ms=int((time.monotonic() - self._started) * 1000),
            )
        except Exception:  # the database itself is down: the reaper ends the row later
            log.exception("response %s: its failure could not be stored either", self.job.response_id)

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
        async for _ in self.events():
            pass
        return self.response
