"""A run's model calls: each opened through the router (router.py: priorities, weights,
cooldowns, per-target concurrency, retries before the first byte) with what its step gives the
model (context.py: the context from the last compaction on, the tools a search found, truncation
to the route's window, a WebSocket lane's converted prefix), a summary first when automatic
compaction is due (autocompact.py), and each traced (tracing.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..domain import Target
from ..observability.metrics import upstream_error
from ..protocol.errors import GatewayError, UpstreamError
from ..protocol.events import EventBuilder
from ..protocol.files import resolve_file_parts
from ..protocol.prefix import ConvertedPrefix
from ..protocol.tokens import estimate_request
from ..protocol.tools import Tool
from ..upstreams import UpstreamCall, UpstreamRequest, withheld_reasoning
from ..upstreams.dialects import dialect_of
from ..upstreams.tokenize import exact_counter
from . import tracing
from .autocompact import AutoCompaction
from .context import compaction_opener, compaction_request, fit_context, model_items
from .failover import SlotCall, route_call
from .interfaces import McpSession, ResponseJob, SummaryScreen
from .tool_search import RunToolSearch

log = logging.getLogger("gateway.engine")


class ModelCalls:
    """Opens a run's model calls; knows the target of the last one, and what truncation dropped."""

    def __init__(
        self,
        job: ResponseJob,
        builder: EventBuilder,
        tool_search: RunToolSearch,
        mcp: McpSession | None,
        *,
        span: Any,
        stream: bool,
        open_upstream: Callable[[Target, UpstreamRequest], Awaitable[UpstreamCall]],
        screen_summary: SummaryScreen | None = None,
    ) -> None:
        """`span`: the response's span (None: tracing is off); `stream`: stream from the
        upstream; `open_upstream`: how a model call is opened on a target (upstreams.open_call);
        `screen_summary`: the input guardrails an automatic compaction's summariser call passes."""
        self.job = job
        self.builder = builder
        self.tool_search = tool_search
        self.mcp = mcp
        self.stream = stream
        self._span = span
        self._open_upstream = open_upstream
        self.open_compaction = compaction_opener(job.tenant_id)
        self.autocompact = AutoCompaction.for_request(job.request, job.route.context_window)
        self._screen_summary = screen_summary
        self._summary_items: list[dict[str, Any]] | None = None  # the summariser's, as screened
        self.target: Target | None = None  # the last call's
        self.truncated_items = 0  # the most items truncation "auto" dropped at one step
        self._call_span: Any = None
        self._call_usage = (0, 0)  # the builder's usage when the current model call began

    async def open(self, converted: ConvertedPrefix | None = None) -> UpstreamCall:
        """Open the next model call through the router (priorities, weights, cooldowns, per-target
        concurrency, retries with backoff before the first byte). `converted`: a WebSocket lane's
        converted upstream prefix (protocol/prefix.py), which the call reuses and keeps."""
        spans: dict[str, Any] = {}

        async def open_one(target: Target) -> UpstreamCall:
            span = tracing.model_call_span(self._span, target, self.job.request)
            try:
                request = await self._request(target, converted)
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
        self.target = target
        self._call_span = spans.get(target.label)
        self._call_usage = (self.builder.usage.input_tokens, self.builder.usage.output_tokens)
        return call if slot.lease is None else SlotCall(call, slot)

    async def open_next(self, converted: ConvertedPrefix | None = None) -> UpstreamCall:
        """The next model call; when its context passes `context_management`'s threshold, a
        summary call first (autocompact.py), which the run reads before the call proper."""
        if self.autocompact is not None:
            items, tools = self.model_items()
            self.autocompact.pending = self.autocompact.due(items, tools, self.job.request)
            self._summary_items = None
            if self.autocompact.pending and self._screen_summary is not None:
                # Here, once, before the router: a block is the request's, not a target's failure.
                # The summariser gets the whole context, this run's output and tool results too.
                self._summary_items = await self._screen_summary(items)
        return await self.open(converted)

    def input_estimate(self) -> int:
        """The current step's input in estimated tokens (protocol/tokens.py): what a call closed
        before its upstream reported usage is counted as."""
        items, tools = self.model_items()
        return estimate_request(items, self.job.request.instructions, [t.schema() for t in tools])

    async def _request(self, target: Target, converted: ConvertedPrefix | None) -> UpstreamRequest:
        """What the call on `target` is sent (a compaction's summary request, or the step's
        items and tools), truncated to the route's context window."""
        req = self.job.request
        prefix = converted
        if req.compact:
            req, items = compaction_request(req, self.job.context, self.job.input_spans, self.open_compaction)
            tools: list[Tool] = []
            prefix = None
        else:
            items, tools = self.model_items()
            if self.autocompact is not None and self.autocompact.pending:
                # context_management: the summary first, over what the call proper would be given
                if self._summary_items is not None:
                    items = self._summary_items
                req, items = compaction_request(
                    req, self.job.context, self.job.input_spans, self.open_compaction, items=items
                )
                tools = []
                prefix = None
        if self.job.files is not None:
            # Before the fit: the window counts what the target is sent (a PDF's text, say).
            items = resolve_file_parts(items, self.job.files, dialect_of(target).wire.file_parts)
        window = self.job.route.context_window
        if window:
            items, dropped = await fit_context(items, tools, window, req, exact_counter(target, req, tools))
            if dropped:  # the oldest items are gone: nothing converted before begins these
                prefix = None
            if dropped > self.truncated_items:  # the most of any step is what the client is told
                self.truncated_items = dropped
                log.info("response %s: truncation dropped the %d oldest items", self.job.response_id, dropped)
        if prefix is None and converted is not None:
            # A compaction or truncation changes the context's beginning: the lane's next call
            # must not build on what was converted before it (the item check would refuse it
            # too; this frees it now).
            converted.clear()
        return UpstreamRequest(
            request=req,
            items=items,
            tools=tools,
            stream=self.stream,
            tenant_id=self.job.tenant_id,
            prefix=prefix,
        )

    def model_items(self) -> tuple[list[dict[str, Any]], list[Tool]]:
        """What the model is given: the context and this response's output so far, from the last
        compaction on; and the tools."""
        names = self.mcp.names if self.mcp is not None else {}
        hosted = self.builder.hosted_outputs
        items = model_items(
            self.job.context, self.job.input_spans, self.builder.response["output"], hosted, names, self.open_compaction
        )
        # Deferred tools stay out until a search finds them; searches show as the calls they were.
        tools, items = self.tool_search.offered(self.job.request.tools + self.mcp_tools, items, names, self.builder)
        return items, tools

    def end_span(self, error: BaseException | None = None) -> None:
        """End the current call's span (tracing on), with the tokens it used."""
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

    @property
    def mcp_tools(self) -> list[Tool]:
        """The MCP tools the model sees (none before the prelude listed them)."""
        return self.mcp.tools if self.mcp is not None else []
