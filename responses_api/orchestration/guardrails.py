"""Guardrails on every path: input guardrails on what a client sends upstream (`check_input` /
`screen_input`, called by each front door: /v1/responses in gateway.start_response, which
covers JSON, SSE, WebSocket and background runs; /v1/responses/compact; /v1/chat/completions;
/v1/embeddings; /v1/messages; items added to /v1/conversations; and for text the gateway
itself sends a model: automatic compaction's summariser call (`summary_screen`), stored files'
extracted text (`screen_files`), vector stores' chunks and queries before they are embedded),
before any upstream call; and output guardrails on what comes back
(`output_guard`: the model's text, the tool-call arguments it emits and the outputs of the
tools the gateway runs, checked by protocol/output_guard.py where the deltas flow: the engine
for /v1/responses, the translating writers of /v1/chat/completions and /v1/messages).

Cost: the scope's guardrails are one TTLCache look-up per (tenant, key, model) (refreshed every
GATEWAY_CACHE_SECONDS, like routes and tools); with none configured nothing else runs. The
detectors are compiled once per definition version (its updated_at).

A `block` answers 400 naming the guardrail and the category (never the matched text; a remote
kind that failed closed: 503 `guardrail_unavailable`); `redact`
replaces what matched with `[REDACTED:category]` in what the upstream gets and what is stored;
`log` passes. Every decision but pass is audited (GuardrailEvent) and counted in /metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from ..domain import Principal
from ..engine.interfaces import SummaryScreen
from ..observability.metrics import guardrail_decision
from ..protocol.compaction import COMPACTION_INSTRUCTIONS, client_instructions
from ..protocol.deltas import Delta
from ..protocol.errors import GatewayError, InvalidRequest
from ..protocol.files import FileContent, is_image
from ..protocol.guardrail_remote import UNAVAILABLE, Caller
from ..protocol.guardrails import (
    Decision,
    Detector,
    GuardrailConfigError,
    RemoteDetector,
    compile_detector,
    on_stream,
    scan,
    texts,
)
from ..protocol.output_guard import OutputDetectors, OutputGuard, unreported_usage
from ..protocol.request import CreateRequest
from ..store import db
from ..store.guardrails import GuardrailAudit, GuardrailRow, record_events, scope_guardrails
from ..ttlcache import TTLCache
from ..upstreams import UpstreamCall, delta_batches
from . import guardrail_kinds

log = logging.getLogger("gateway.guardrails")

# Whose text is checked: a request's principal, or (a worker's run) its tenant and key.
Whose = Principal | Caller

# (tenant, key, model): the compiled detectors of the guardrails whose scope takes them.
_scoped: TTLCache[tuple[int, int | None, str], tuple[Detector, ...]] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)
# (guardrail id, version): its compiled detector (or None: a definition that does not compile,
# skipped with a warning; the admin and the config sync refuse one, so only a row written around them).
_compiled: TTLCache[tuple[int, str], Detector | None] = TTLCache(lambda: 24 * 3600.0)


# (tenant, key, model): the compiled output guardrails, by where they apply.
_scoped_output: TTLCache[tuple[int, int, str], OutputDetectors] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


def clear_cache() -> None:
    _scoped.clear()
    _scoped_output.clear()
    _compiled.clear()


class GuardrailBlocked(InvalidRequest):
    default_code = "guardrail_blocked"


class GuardrailUnavailable(GatewayError):
    """A remote `block` guardrail set to fail closed could not give a verdict: the request is
    refused, as a failure to try again later rather than a verdict on its text."""

    status = 503
    error_type = "server_error"
    default_code = "guardrail_unavailable"


def _detector(row: GuardrailRow) -> Detector | None:
    key = (row.id, row.version)
    cached = _compiled.get(key)
    if cached is not None:
        return cached[0]
    try:
        detector: Detector | None = compile_detector(row.id, row.name, row.kind, row.action, row.config)
        if isinstance(detector, RemoteDetector):
            detector = guardrail_kinds.bind(detector)
    except GuardrailConfigError as exc:
        log.warning("guardrail %r does not compile (%s: %s); skipped", row.name, exc.field, exc)
        detector = None
    return _compiled.put(key, detector)


def _lookup(*, tenant_id: int, key_id: int | None, model: str) -> tuple[Detector, ...]:
    rows = scope_guardrails(tenant_id=tenant_id, key_id=key_id, model=model, applies_to="input")
    return tuple(_for_caller(d, tenant_id, key_id) for d in map(_detector, rows) if d is not None)


def _lookup_output(*, tenant_id: int, key_id: int, model: str) -> OutputDetectors:
    found: dict[str, tuple[Detector, ...]] = {}
    log_only: set[int] = set()
    for applies_to in ("output", "tool_arguments", "tool_output"):
        rows = scope_guardrails(tenant_id=tenant_id, key_id=key_id, model=model, applies_to=applies_to)
        pairs = [(row, d) for row, d in ((row, _detector(row)) for row in rows) if d is not None]
        found[applies_to] = tuple(_for_caller(d, tenant_id, key_id or None) for _, d in pairs)
        log_only |= {d.guardrail_id for row, d in pairs if d.whole_text and _on_stream(row) == "log"}
    return OutputDetectors(found["output"], found["tool_arguments"], found["tool_output"], frozenset(log_only))


def _on_stream(row: GuardrailRow) -> str:
    try:
        return on_stream(row.config)
    except GuardrailConfigError:
        return "buffer"


async def output_guard(*, tenant_id: int, key_id: int | None, model: str) -> OutputGuard | None:
    """A guard for one response's output: the output guardrails whose scope takes this key and
    model (cached: one look-up per response), or None when none does (then nothing more runs)."""
    key = key_id or 0
    detectors = await db.run_cached(
        _scoped_output, (tenant_id, key, model), _lookup_output, tenant_id=tenant_id, key_id=key, model=model
    )
    if not detectors:
        return None
    return OutputGuard(detectors, holdback=settings.GATEWAY_GUARDRAIL_HOLDBACK_CHARS)


async def guarded_batches(
    call: UpstreamCall, guard: OutputGuard | None, *, input_estimate: int = 0
) -> AsyncIterator[list[Delta]]:
    """The call's deltas in batches (upstreams.delta_batches), through `guard` when one applies:
    what it releases, and after a block nothing more (the call is closed: the answer ends
    `content_filter`). What the /v1/chat/completions and /v1/messages writers are fed."""
    if guard is None:
        async for batch in delta_batches(call):
            yield batch
        return
    async for batch in delta_batches(call):
        released = await guard.feed(batch)
        if released:
            yield released
        if guard.blocked is not None:
            await call.aclose()
            estimated = unreported_usage(guard, input_estimate=input_estimate)
            if estimated is not None:  # closed before its usage came: counted as estimated
                yield [estimated]
            return
    tail = await guard.end()
    if tail:
        yield tail


async def record_output(guard: OutputGuard | None, principal: Principal, *, response_id: str, where: str) -> None:
    """Audit what `guard` decided (nothing to do without a guard or a decision)."""
    if guard is not None:
        decisions = guard.take_decisions()
        if decisions:
            await _record(principal.tenant_id, principal.key_id, decisions, where=where, response_id=response_id)


def output_recorder(
    *, tenant_id: int, key_id: int | None, response_id: str, where: str
) -> Callable[[list[Decision]], Awaitable[None]]:
    """What records an output guard's decisions (audited as `where`, under the response's id)."""

    async def record(decisions: list[Decision]) -> None:
        await _record(tenant_id, key_id, decisions, where=where, response_id=response_id)

    return record


def _for_caller(detector: Detector, tenant_id: int, key_id: int | None) -> Detector:
    """A remote detector knows whose request it checks (a judge's tokens are theirs): the scope's
    cache is per tenant and key, so is the binding."""
    if isinstance(detector, RemoteDetector):
        return guardrail_kinds.for_caller(detector, tenant_id, key_id)
    return detector


async def input_detectors(principal: Whose, model: str) -> tuple[Detector, ...]:
    """The compiled input guardrails for this key and model (cached)."""
    return await db.run_cached(
        _scoped,
        (principal.tenant_id, principal.key_id, model),
        _lookup,
        tenant_id=principal.tenant_id,
        key_id=principal.key_id,
        model=model,
    )


@dataclass(slots=True)
class Screened:
    """A payload checked: as the upstream may get it, and the decisions (none a block) that
    are still to be audited, once the caller knows the response's id."""

    payload: dict[str, Any]
    decisions: list[Decision] = field(default_factory=list)
    where: str = ""

    async def audit(self, principal: Whose, response_id: str = "") -> None:
        if self.decisions:
            await _audit(principal, self.decisions, where=self.where, response_id=response_id)


async def screen_input(
    principal: Whose, model: str, payload: dict[str, Any], fields: Iterable[str], *, where: str
) -> Screened:
    """`check_input` without the audit of a decision that passes (`Screened.audit` records it);
    a block is audited at once, and raised."""
    detectors = await input_detectors(principal, model)
    if not detectors:
        return Screened(payload)
    local = tuple(d for d in detectors if not d.whole_text)
    checked, decisions = scan(payload, fields, local) if local else (payload, [])
    failed: list[Decision] = []
    if not any(d.action == "block" for d in decisions):
        # A remote kind is asked only when no local guardrail blocked, and about the text as
        # redacted (a credential redacted here never reaches a moderation server or a judge).
        remote = tuple(d for d in detectors if d.whole_text)
        if remote:
            found = await _ask_remote(remote, "\n\n".join(texts(checked, fields)))
            failed = [d for d in found if d.category == UNAVAILABLE]
            decisions += found
    if not decisions:
        return Screened(payload)
    blocked = next((d for d in decisions if d.action == "block"), None)
    if blocked is not None:
        await _audit(principal, decisions, where=where, response_id="")
        if all(d in failed for d in decisions if d.action == "block"):
            raise GuardrailUnavailable(
                f"The guardrail '{blocked.guardrail}' could not check the request (it failed or timed out) "
                "and is set to fail closed; try again later.",
                param=None,
            )
        raise GuardrailBlocked(
            f"The request was blocked by the guardrail '{blocked.guardrail}' (category: {blocked.category}).",
            param=None,
        )
    return Screened(checked, decisions, where)


async def _ask_remote(detectors: tuple[Detector, ...], text: str) -> list[Decision]:
    """Every remote guardrail asked about `text` at once (each under its own timeout)."""
    if not text.strip():
        return []
    found = await asyncio.gather(*(d.find_async(text) for d in detectors))
    decisions: dict[tuple[int, str], Decision] = {}
    for detector, spans in zip(detectors, found):
        for span in spans:
            key = (detector.guardrail_id, span.category)
            decisions.setdefault(key, Decision(detector.guardrail_id, detector.name, span.category, detector.action))
    # A real finding names the block, not a fail-closed guardrail's `unavailable`.
    return sorted(decisions.values(), key=lambda d: d.category == UNAVAILABLE)


async def check_input(
    principal: Whose,
    model: str,
    payload: dict[str, Any],
    fields: Iterable[str],
    *,
    where: str,
    response_id: str = "",
) -> dict[str, Any]:
    """`payload` as the upstream may get it: the client's text in `fields` (e.g. ("input",
    "instructions") of a Responses body, ("messages",) of Chat Completions, ("system",
    "messages") of Anthropic Messages) checked by the input guardrails whose scope takes this
    key and model, redacted where a `redact` one matched. The same payload (not a copy) when
    no guardrail applies or none changed it. Raises GuardrailBlocked (400) when a `block`
    guardrail matched, before any upstream call; every decision but pass is audited as `where`."""
    screened = await screen_input(principal, model, payload, fields, where=where)
    await screened.audit(principal, response_id)
    return screened.payload


def _token_ids(value: Any) -> bool:
    """An embeddings input given as token ids (a list of integers, or a list of such lists)."""
    if not isinstance(value, list) or not value:
        return False
    rows = value if isinstance(value[0], list) else [value]
    return all(isinstance(row, list) and all(type(t) is int for t in row) for row in rows)


async def refuse_unchecked_token_ids(principal: Principal, model: str, body: dict[str, Any]) -> None:
    """/v1/embeddings input given as token ids is not text the guardrails can read (no tokenizer
    of the route decodes ids here): when a `block` or `redact` input guardrail applies to this
    key and model it is a 400 naming `input`, so token ids are no way around them."""
    if not _token_ids(body.get("input")):
        return
    enforcing = [d for d in await input_detectors(principal, model) if d.action in ("block", "redact")]
    if enforcing:
        raise InvalidRequest(
            f"Invalid 'input': token ids cannot be checked by the guardrail '{enforcing[0].name}' that applies "
            "to this model; send the text instead.",
            param="input",
        )


async def screen_files(
    whose: Whose, model: str, files: dict[str, FileContent], *, where: str, response_id: str
) -> dict[str, FileContent]:
    """The text extracted from stored files a run sends (`input_file` by `file_id`), checked like
    any input: a `block` raises before any upstream call, a `redact` changes the text the model
    gets. A redacted PDF goes as its redacted text, never as its bytes (which still hold what was
    redacted); images are not scanned. Files are read per run, so every run checks them."""
    named = [f for f in files.values() if f.text]
    if not named:
        return files
    payload: dict[str, Any] = {"input": [{"type": "input_text", "text": f.text} for f in named]}
    screened = await screen_input(whose, model, payload, ("input",), where=where)
    await screened.audit(whose, response_id)
    if screened.payload is payload:
        return files
    out = dict(files)
    for file, part in zip(named, screened.payload["input"], strict=True):
        if part["text"] != file.text:
            data = file.data if is_image(file.content_type) else b""
            out[file.file_id] = dataclasses.replace(file, text=part["text"], data=data)
    return out


async def _audit(principal: Whose, decisions: list[Decision], *, where: str, response_id: str) -> None:
    await _record(principal.tenant_id, principal.key_id, decisions, where=where, response_id=response_id)


async def _record(
    tenant_id: int, key_id: int | None, decisions: list[Decision], *, where: str, response_id: str
) -> None:
    """Count, log and store the decisions; never raises (a lost audit row is logged)."""
    try:
        for d in decisions:
            guardrail_decision(d.guardrail, d.category, d.action, where)
            log.info("guardrail %r: %s %s on %s", d.guardrail, d.action, d.category, where)
        rows = _rows(tenant_id, key_id, decisions, where=where, response_id=response_id)
        await db.run(record_events, rows)
    except Exception:
        log.exception("guardrail decisions on %s not recorded", where)


def _rows(
    tenant_id: int, key_id: int | None, decisions: list[Decision], *, where: str, response_id: str
) -> list[GuardrailAudit]:
    return [
        GuardrailAudit(
            tenant_id=tenant_id,
            key_id=key_id,
            response_id=response_id,
            guardrail_id=d.guardrail_id,
            guardrail=d.guardrail,
            category=d.category,
            action=d.action,
            where=where,
        )
        for d in decisions
    ]


async def guard_request(
    principal: Principal, req: CreateRequest, body: dict[str, Any], *, where: str
) -> tuple[CreateRequest, dict[str, Any], Screened]:
    """The input guardrails on a create's text (a prompt template already applied): `req` and
    the body a worker's job keeps, both redacted alike (the upstream and the store get the same
    text), and the decisions to audit once the response has an id. The context a
    `previous_response_id` or conversation brings was checked when it was sent."""
    # /compact's instructions end with the gateway's summariser prompt: the client's part is checked.
    instructions, summariser = client_instructions(req.instructions)
    fields = {"input": req.input_items, "instructions": instructions}
    screened = await screen_input(principal, req.model, fields, ("input", "instructions"), where=where)
    checked = screened.payload
    if checked is fields:
        return req, body, screened
    instructions = checked["instructions"]
    if summariser:
        instructions = f"{instructions}\n\n{COMPACTION_INSTRUCTIONS}" if instructions else COMPACTION_INSTRUCTIONS
    req = dataclasses.replace(req, input_items=checked["input"], instructions=instructions)
    # The items as parsed are a valid `input` too: the worker parses the same redacted text.
    return req, {**body, "input": checked["input"], "instructions": instructions}, screened


def summary_screen(whose: Whose, model: str, response_id: str) -> SummaryScreen:
    """Automatic compaction's summariser call, checked as input (engine/calls.py calls it before
    the call is opened): it is sent the whole context, this run's own output and tool results
    included. Redacted items are what the summariser gets; a block fails the run, as
    GuardrailBlocked."""

    async def screen(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        screened = await screen_input(whose, model, {"input": items}, ("input",), where="responses.autocompact")
        await screened.audit(whose, response_id)
        return list(screened.payload["input"])

    return screen
