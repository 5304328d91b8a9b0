"""Automatic compaction, `context_management: [{"type": "compaction", "compact_threshold": N}]`,
on every upstream kind: when the context a model call would be given passes N tokens (the
gateway's estimate, protocol/tokens.py), the run first has the routed model summarise it, as
OpenAI's server-side compaction does: the stream shows a `compaction` item (added, then
`response.compaction.compacting`, then done with its sealed summary), the call then starts from
that item, and so do later turns (protocol/compaction.py `expand_compactions`), whether they
continue by `previous_response_id` or send the whole history back as input, compaction item
included (only the instructions before it are kept: its payload says `auto`).

The summary is the one compaction v2 writes (a `compaction_trigger`, Codex's remote
compaction): it stands for the whole context before it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..protocol.compaction import WHOLE_SUMMARY_PREFIX, summary_payload
from ..protocol.events import Event, EventBuilder
from ..protocol.request import CreateRequest
from ..protocol.tokens import estimate_request
from ..protocol.tools import Tool
from ..sealing import sealer
from .interfaces import ResponseJob

# `compact_threshold` left out: compact at this share of the route's context window.
WINDOW_SHARE = 0.8


class AutoCompaction:
    """One run's automatic compaction: whether the next model call is a summary first."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.pending = False  # the open call writes the summary; the model call proper follows

    @classmethod
    def for_request(cls, req: CreateRequest, context_window: int | None) -> AutoCompaction | None:
        if req.compact_threshold is None or req.compact or not req.generate:
            return None
        if req.compact_threshold:
            return cls(req.compact_threshold)
        return cls(int(context_window * WINDOW_SHARE)) if context_window else None

    def due(self, items: list[dict[str, Any]], tools: list[Tool], req: CreateRequest) -> bool:
        """Whether these items (already starting at the last compaction) pass the threshold. A
        summary followed by at most one item is not compacted again: its summary would be no
        smaller."""
        if items and items[0].get("type") == "message" and _is_summary(items[0]) and len(items) <= 2:
            return False
        return estimate_request(items, req.instructions, [t.schema() for t in tools]) > self.threshold


def _is_summary(item: dict[str, Any]) -> bool:
    content = item.get("content") or []
    return bool(content) and str(content[0].get("text", "")).startswith(WHOLE_SUMMARY_PREFIX)


class Summarizing(Protocol):
    """What a compaction needs of its run (run.ResponseRun): whose events, whose tenant, and the
    summary its open model call writes."""

    @property
    def builder(self) -> EventBuilder: ...

    @property
    def job(self) -> ResponseJob: ...

    async def read_summary(self) -> str: ...


async def compaction_events(run: Summarizing, *, auto: bool = False) -> AsyncIterator[Event]:
    """The compaction item the open call's summary becomes: added and `compacting` before the
    summary is read, done with it sealed for the tenant. `auto`: an automatic compaction's,
    which a later request keeps only the instructions before (its clients send the whole
    history back, item included)."""
    item, events = run.builder.open_compaction()
    for event in events:
        yield event
    summary = await run.read_summary()
    payload = summary_payload(summary, whole=True, auto=auto)
    sealed = sealer().seal(payload, tenant_id=run.job.tenant_id, purpose="compaction")
    for event in run.builder.close_compaction(item, sealed):
        yield event
