"""Output guardrails over a model's stream of neutral deltas (guardrails.py has the detectors):
a message's text, its refusal and each tool call's arguments are checked as they go, with a
bounded hold-back, before the event builder (or a Chat Completions or Messages writer) sees
them; the outputs of the tools the gateway runs are checked whole (`check_tool_output`).

The hold-back: the last `holdback` characters of a stream stay back until more text follows or
the stream ends, so a match of up to that many characters is seen whole before any of it is
released: no character a `block` guardrail stops reaches the client, and `redact` replaces a
match in what is released (and so in what is stored). A match that touches the end of the text
held (it may still grow) is held from its start. A match longer than the hold-back may have had
its first characters released before it could be seen; the rest is still blocked or redacted.

A block ends the stream where the match starts: the text before it is released, then
`Finish("content_filter")` (the response ends `incomplete`, a Chat completion with that
finish_reason, a Message with `stop_reason: "refusal"`), and nothing more.

Guardrails that need the whole text (Detector.whole_text: a moderation endpoint, a judge model)
hold their stream whole until it ends (`on_stream: "buffer"`), or are asked once it ended and
only audited (`on_stream: "log"`: `log_only`).

Pure: no Django. orchestration/guardrails.py builds the guard for a response and records its
decisions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .deltas import Delta, Finish, OutputItem, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta, Usage
from .guardrails import Decision, Detector, Span, redacted

CONTENT_FILTER = "content_filter"
# What a pattern may look back at before the first character it checks (already released).
_MIN_CONTEXT = 32
# A match that keeps growing (an operator's `secret.*`) is held whole only up to this many
# times the hold-back: past it the stream moves on, so it is never buffered whole by accident
# (and never scanned again and again from its start).
_GROWING_MATCH_FACTOR = 16


@dataclass(frozen=True, slots=True)
class OutputDetectors:
    """The output guardrails whose scope takes a response, by where they apply."""

    output: tuple[Detector, ...] = ()
    tool_arguments: tuple[Detector, ...] = ()
    tool_output: tuple[Detector, ...] = ()
    log_only: frozenset[int] = frozenset()  # whole-text guardrails run after a stream, audit only

    def __bool__(self) -> bool:
        return bool(self.output or self.tool_arguments or self.tool_output)


class _Stream:
    """One stream of text being checked: what was released (its tail, for look-behind), what is
    held, and (for whole-text guardrails run as log only) all of it."""

    __slots__ = ("live", "whole", "logged", "context", "held", "seen")

    def __init__(self, detectors: tuple[Detector, ...], log_only: frozenset[int]) -> None:
        self.live = tuple(d for d in detectors if not d.whole_text)
        self.whole = tuple(d for d in detectors if d.whole_text and d.guardrail_id not in log_only)
        self.logged = tuple(d for d in detectors if d.whole_text and d.guardrail_id in log_only)
        self.context = ""
        self.held = ""
        self.seen: list[str] | None = [] if self.logged else None


class OutputGuard:
    """One response's output guardrails, fed the deltas of its model calls in order."""

    def __init__(self, detectors: OutputDetectors, *, holdback: int) -> None:
        self.detectors = detectors
        self.holdback = max(holdback, 0)
        self._context = max(self.holdback, _MIN_CONTEXT)
        self._max_held = max(self.holdback, _MIN_CONTEXT) * _GROWING_MATCH_FACTOR
        # Text is released a step at a time past the hold-back, not a delta at a time: each
        # release scans the whole window (context + held), so releasing 4 characters per token
        # scanned it once per token; a quarter of the hold-back per scan costs a fraction of
        # that, and waits at most the step longer (never less than the hold-back).
        self._step = max(1, self.holdback // 4)
        self._text: _Stream | None = None
        self._text_type: type[TextDelta] | type[RefusalDelta] = TextDelta
        self._calls: dict[int, _Stream] = {}
        self.blocked: Decision | None = None
        # Characters of text and tool arguments fed, and whether the upstream reported usage:
        # a blocked call is closed before its usage comes (`unreported_usage`).
        self.chars_fed = 0
        self.reported = (False, False)  # input, output: by the current call's upstream
        self._decisions: dict[tuple[int, str], Decision] = {}
        self._unrecorded: list[Decision] = []

    def begin_call(self) -> int:
        """A model call begins: what it reports is counted afresh; the characters fed so far
        (`unreported_usage`'s `chars_before`)."""
        self.reported = (False, False)
        return self.chars_fed

    # -- decisions ---------------------------------------------------------------
    def _decide(self, detector: Detector, category: str, action: str | None = None) -> Decision:
        key = (detector.guardrail_id, category)
        decision = self._decisions.get(key)
        if decision is None:
            decision = Decision(detector.guardrail_id, detector.name, category, action or detector.action)
            self._decisions[key] = decision
            self._unrecorded.append(decision)
        return decision

    def take_decisions(self) -> list[Decision]:
        """The decisions made since the last call (each guardrail and category once a response)."""
        taken, self._unrecorded = self._unrecorded, []
        return taken

    # -- the stream ----------------------------------------------------------------
    async def feed(self, deltas: Iterable[Delta]) -> list[Delta]:
        """What may be released of `deltas` now (text and arguments held back, redacted); after a
        block, the text before the match and `Finish("content_filter")`, then nothing more."""
        out: list[Delta] = []
        if self.blocked is not None:
            return out
        for delta in deltas:
            if isinstance(delta, (TextDelta, RefusalDelta)):
                self.chars_fed += len(delta.text)
                if self._calls:
                    await self._end_calls(out)
                if self._text is not None and type(delta) is not self._text_type:
                    await self._end_text(out)
                if not self.detectors.output or not delta.text:
                    out.append(delta)
                    continue
                if self._text is None:
                    self._text = _Stream(self.detectors.output, self.detectors.log_only)
                    self._text_type = type(delta)
                self._hold(self._text, delta.text)
                released = self._release(self._text, final=False)
                if released:
                    out.append(self._text_type(released))
            elif isinstance(delta, ToolCallDelta):
                self.chars_fed += len(delta.arguments)
                if self._text is not None:
                    await self._end_text(out)
                if not self.detectors.tool_arguments:
                    out.append(delta)
                    continue
                stream = self._calls.get(delta.index)
                if stream is None:
                    stream = self._calls[delta.index] = _Stream(self.detectors.tool_arguments, self.detectors.log_only)
                if delta.call_id is not None or delta.name is not None:  # the call opens; its arguments wait
                    out.append(ToolCallDelta(delta.index, delta.call_id, delta.name))
                if delta.arguments:
                    self._hold(stream, delta.arguments)
                    released = self._release(stream, final=False)
                    if released:
                        out.append(ToolCallDelta(delta.index, arguments=released))
            elif isinstance(delta, (ReasoningDelta, OutputItem, Finish)):
                await self._end(out)
                if self.blocked is None:
                    out.append(delta)
            else:  # usage, signatures, upstream fields: nothing to check, nothing to wait for
                if isinstance(delta, Usage):
                    inputs, outputs = self.reported
                    self.reported = (inputs or delta.input_tokens > 0, outputs or delta.output_tokens > 0)
                out.append(delta)
            if self.blocked is not None:
                out.append(Finish(CONTENT_FILTER))
                return out
        return out

    async def end(self) -> list[Delta]:
        """Release what is held at the end of a model call: each stream checked whole (its
        whole-text guardrails asked now); after a block, the text before it and the finish."""
        out: list[Delta] = []
        if self.blocked is None:
            await self._end(out)
            if self.blocked is not None:
                out.append(Finish(CONTENT_FILTER))
        return out

    async def _end(self, out: list[Delta]) -> None:
        """Release what is held, before an item of another kind or the end."""
        if self._text is not None:
            await self._end_text(out)
        if self._calls and self.blocked is None:
            await self._end_calls(out)

    async def _end_text(self, out: list[Delta]) -> None:
        stream, self._text = self._text, None
        assert stream is not None
        released = await self._finish(stream)
        if released:
            out.append(self._text_type(released))

    async def _end_calls(self, out: list[Delta]) -> None:
        calls, self._calls = self._calls, {}
        for index in sorted(calls):
            released = await self._finish(calls[index])
            if released:
                out.append(ToolCallDelta(index, arguments=released))
            if self.blocked is not None:
                return

    def _hold(self, stream: _Stream, text: str) -> None:
        stream.held += text
        if stream.seen is not None:
            stream.seen.append(text)

    async def _finish(self, stream: _Stream) -> str:
        window = stream.context + stream.held
        found = [(d, await d.find_async(window)) for d in stream.whole]
        released = self._release(stream, final=True, found=found)
        if stream.seen is not None and self.blocked is None:
            whole = "".join(stream.seen)
            for detector in stream.logged:  # checked after the end: audited, nothing changed
                for span in await detector.find_async(whole):
                    self._decide(detector, span.category, "log")
        return released

    def _release(self, stream: _Stream, *, final: bool, found: list[tuple[Detector, list[Span]]] | None = None) -> str:
        """What of the stream may be released now, redacted; sets `blocked` on a block (then the
        text before the match). Held back: the last `holdback` characters, a match that may still
        grow, and everything while a whole-text guardrail waits for the end."""
        if not final and (stream.whole or len(stream.held) < self.holdback + self._step):
            return ""
        window = stream.context + stream.held
        base = len(stream.context)
        cut = len(window) if final else len(window) - self.holdback
        unsettled = len(window)  # where the first match that may still grow starts
        block_at: int | None = None
        block: Decision | None = None
        redact: list[Span] = []
        matches = [(d, d.find(window)) for d in stream.live] + (found or [])
        for detector, spans in matches:
            for span in spans:
                if span.end <= base:
                    continue  # in text released already: decided then
                start = max(span.start, base)
                if not final and span.end >= len(window):
                    if len(stream.held) < self._max_held:
                        unsettled = min(unsettled, start)  # it may grow: hold it whole
                    continue
                decision = self._decide(detector, span.category)
                if detector.action == "block" and (block_at is None or start < block_at):
                    block_at, block = start, decision
                elif detector.action == "redact":
                    redact.append(Span(start, span.end, span.category))
        # A block ends the stream: everything before the match is checked, and released.
        cut = min(block_at if block_at is not None else cut, unsettled)
        for span in redact:
            if span.start < cut < span.end:
                cut = span.start  # released whole, replaced, or not yet
        released = window[base:cut]
        inside = [Span(s.start - base, s.end - base, s.category) for s in redact if s.end <= cut]
        if inside:
            released = redacted(released, inside)
        stream.context = window[max(0, cut - self._context) : cut]
        stream.held = window[cut:]
        if block is not None:
            self.blocked = block
        return released

    # -- the outputs of tools the gateway runs -----------------------------------------
    async def check_tool_output(self, text: str) -> tuple[str, Decision | None]:
        """A tool's output as the model (and the client) may get it, redacted; with the block
        decision when a `block` guardrail matched (the caller withholds it)."""
        blocked: Decision | None = None
        redact: list[Span] = []
        for detector in self.detectors.tool_output:
            spans = await detector.find_async(text) if detector.whole_text else detector.find(text)
            for span in spans:
                decision = self._decide(detector, span.category)
                if detector.action == "block" and blocked is None:
                    blocked = decision
                elif detector.action == "redact":
                    redact.append(span)
        return (redacted(text, redact) if redact else text), blocked


def unreported_usage(guard: OutputGuard, *, input_estimate: int, chars_before: int = 0) -> Usage | None:
    """The usage a call the guard blocked did not report (the call is closed at the block, and an
    upstream reports usage last, or its output part last): the input as estimated, the output fed
    since `chars_before` at about four characters a token, so that a blocked answer still counts
    against limits and budgets. None when the call was not blocked or reported both."""
    inputs, outputs = guard.reported
    if guard.blocked is None or (inputs and outputs):
        return None
    return Usage(
        input_tokens=0 if inputs else max(input_estimate, 0),
        output_tokens=0 if outputs else max(1, (guard.chars_fed - chars_before + 3) // 4),
    )
