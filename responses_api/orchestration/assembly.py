"""The one place a ResponseRun is assembled: from a request on the web path (`run_for_request`)
and from a stored job on a worker (`run_for_job`).

Both take tools planned by toolplan.plan_tools and end in `_assemble`, which gives the run the
route's context window (learned from the upstream when the operator set none), its tool runner
and its MCP session. They differ only in where the context comes from (the web path reads the
chain or conversation, checking access, or continues a WebSocket's previous response from
memory; a worker reads it when the run starts), in what a run stores (the web path's row is
inserted while a stream's upstream is asked; a worker's exists already) and in where events go
(the worker streams from the upstream into the event log).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ..domain import Principal, Route
from ..engine.interfaces import ResponseJob, SummaryScreen
from ..engine.run import ResponseRun
from ..mcp.credentials import restore_credentials
from ..mcp.planning import registry_mcp_now, toolset_for
from ..mcp.session import McpSession
from ..models import Response
from ..process import process_id
from ..protocol.answers import check_outputs_answer_calls
from ..protocol.compaction import InputSpans, client_instructions, span_after
from ..protocol.errors import InvalidRequest
from ..protocol.files import FileContent, check_references, file_references
from ..protocol.guardrail_remote import Caller
from ..protocol.ids import new_id
from ..protocol.request import CreateRequest, parse_create_request
from ..protocol.response import request_params
from ..store import db, selectors, services
from ..store.eventlog import event_log
from ..store.files import file_content, live_files
from ..store.persistence import DatabasePersistence
from ..store.selectors import FLATTENED_SPANS
from ..upstreams.tokenize import context_window
from . import lifecycle
from .guardrails import output_guard, output_recorder, screen_files, summary_screen
from .limits import Grant
from .routing import route_get
from .toolplan import ToolPlan, plan_tools, registry_specs_now, tool_runner
from .vector_stores import FileSearchRunner, check_file_search

__all__ = [
    "PriorContext",
    "check_answers_before_hand_off",
    "check_file_parts",
    "request_context",
    "run_for_job",
    "run_for_request",
]


@dataclass(slots=True)
class PriorContext:
    """A WebSocket connection's most recent response, kept in memory: a continuation from it
    needs no chain read, and works for `store: false` responses too."""

    response_id: str
    items: list[dict[str, Any]]  # its whole context: input (with what it continued) and output
    stored: bool
    input_spans: InputSpans  # where each request's input lies in `items` (what a compaction keeps)


async def run_for_request(
    principal: Principal,
    plan: ToolPlan,
    *,
    route: Route,
    prior: PriorContext | None = None,
    grant: Grant | None = None,
    compacted: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> ResponseRun:
    """A run of `plan.request` in this process. Validates access and loads the chain: one
    thread hop, and only for a chain or item references.

    `compacted`: /v1/responses/compact's summary run, which is stored as what it answers: a
    chain's root (its output, in the response `compacted` makes of the run's, stands for the
    whole context it summarised, so neither its input nor its chain is stored again) with the
    client's instructions as the Response's (the summariser prompt stays the gateway's)."""
    req = plan.request
    response_id = new_id("resp")
    now = time.time()
    params = request_params(req)
    created_at = datetime.fromtimestamp(now, UTC)
    references = any(i["type"] == "item_reference" for i in req.input_items)
    stored_input, stored_previous = req.input_items, req.previous_response_id
    stored_params = params
    if compacted is not None:
        stored_input, stored_previous = [], None
        stored_params = {**params, "instructions": client_instructions(params.get("instructions"))[0]}
    if prior is not None and req.previous_response_id == prior.response_id and not references:
        context = prior.items + req.input_items
        spans = span_after(prior.input_spans, len(prior.items), len(context))
        if not prior.stored:
            # Continuing an unstored response: a stored one keeps its whole context as input,
            # so its chain never points at a response the database does not have. That input
            # holds several requests' inputs and their outputs: where the inputs lie is kept
            # with it, or a compaction item in it would keep them all (chain_input_spans).
            stored_input, stored_previous = context, None
            stored_params = {**stored_params, FLATTENED_SPANS: [[span.start, span.stop] for span in spans]}
    else:
        loaded = await request_context(principal, req)
        context, spans = loaded.items, loaded.input_spans
    check_outputs_answer_calls(context, len(req.input_items))
    create_row = None
    if req.store:
        create_row = services.response_row(
            response_id=response_id,
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            previous_response_id=stored_previous,
            model=req.model,
            params=stored_params,
            created_at=created_at,
            served_by=process_id() if req.stream else "",  # a stream's row is open meanwhile
            completion_window=req.completion_window,
            continuation_id=req.continuation_id,
        )
        # The column keeps what the model was given (the admin marks the gateway's prompt).
        create_row["instructions"] = req.instructions
    job = ResponseJob(
        response_id=response_id,
        created_at=int(now),
        tenant_id=principal.tenant_id,
        request=req,
        params=params,
        route=route,
        context=context,
        input_items=req.input_items,
        input_spans=spans,
    )
    persistence = DatabasePersistence(
        tenant_id=principal.tenant_id,
        input_items=stored_input,
        store=req.store,
        create_row=create_row,
        insert_at_open=req.stream,
        conversation_id=req.conversation,
        grant=grant,
        stored_output=compacted,
        api_key_id=principal.key_id,
    )
    run = await _assemble(job, persistence, plan, key_id=principal.key_id, where="responses")
    lifecycle.track_run(run)  # a drain (SIGTERM) waits for it, then ends it
    return run


async def check_answers_before_hand_off(principal: Principal, req: CreateRequest) -> None:
    """The tool outputs of a request a worker will run answer calls (a 400 now, not a failed
    run later): read the chain or conversation only when the input alone does not show it."""
    if not any(item["type"] == "item_reference" for item in req.input_items):
        try:
            check_outputs_answer_calls(req.input_items, len(req.input_items))
            return
        except InvalidRequest:
            if not (req.previous_response_id or req.conversation):
                raise  # the input is the whole context: the call is nowhere
    check_outputs_answer_calls((await request_context(principal, req)).items, len(req.input_items))


async def request_context(principal: Principal, req: CreateRequest) -> selectors.Context:
    """What the request's model sees, with where each request's input lies in it: the chain
    or conversation it continues and its input with item references resolved (one thread hop,
    selectors.context_load), or its input alone, with no database read, when it needs none."""
    if req.previous_response_id or req.conversation or any(i["type"] == "item_reference" for i in req.input_items):
        return await db.run(
            selectors.context_load,
            tenant_id=principal.tenant_id,
            previous_response_id=req.previous_response_id,
            conversation_id=req.conversation,
            input_items=req.input_items,
        )
    return selectors.Context(list(req.input_items), (range(len(req.input_items)),))


async def run_for_job(row: Response) -> tuple[ResponseRun, str]:
    """A worker's run of a stored job, continuing its event log; with the status its opening
    events still have to announce ("in_progress", or "none" when the web process did)."""
    stored = row.job or {}
    job, plan = await db.run_in_transaction(_job_from_row, row)
    # Where the web process's opening events end (handoff.start_on_worker): kept in the job, it
    # spares the run a round trip to the log; a job stored without it asks the log.
    first = stored.get("next_sequence_number")
    if not isinstance(first, int):
        first = await event_log().last_sequence_number(row.id) + 1
    persistence = DatabasePersistence(
        tenant_id=job.tenant_id,
        input_items=job.input_items,
        store=True,
        conversation_id=job.request.conversation,
        grant=Grant.from_job(stored.get("limits")),
    )
    run = await _assemble(
        job,
        persistence,
        plan,
        key_id=row.api_key_id,
        where="background",
        stream_upstream=True,
        first_sequence_number=first,
    )
    return run, stored.get("opening", "in_progress")


def _job_from_row(row: Response) -> tuple[ResponseJob, ToolPlan]:
    """The stored job's request, tools and context, read in one thread hop.

    The request is parsed again from the stored body: a `CreateRequest` (with its tools and
    MCP servers) is not JSON, and storing a second, serialised form of it would be a format
    to keep in step with the parser, to save a parse that is small beside a run that waits
    for a worker anyway (bench/README.md has the timeit figures). The input items are taken as the web process stored them (opened)."""
    stored = row.job or {}
    body = restore_credentials(stored["body"], stored.get("mcp_credentials"), row.tenant_id)
    # The input as the web process stored it (reasoning it opened included), not as sent.
    req = dataclasses.replace(parse_create_request(body), input_items=stored["input_items"])
    route = route_get(req.model)
    # Through the web process's caches: two queries per run otherwise, for what rarely changes.
    specs = registry_specs_now(row.tenant_id, req, route)
    servers = registry_mcp_now(row.tenant_id, req)
    plan = plan_tools(req, route, specs, servers)
    own = selectors.resolve_references(row.tenant_id, req.input_items)
    history = selectors.Context([], ())
    if row.previous_response_id:
        compacted = any(item["type"] == "compaction" for item in own)
        history = selectors.chain_load(response_id=row.previous_response_id, compacted=compacted)
    elif row.conversation_id:  # the conversation as it is when the run starts
        history = selectors.conversation_load(tenant_id=row.tenant_id, conversation_id=row.conversation_id)
    job = ResponseJob(
        response_id=row.id,
        created_at=int(row.created_at.timestamp()),
        tenant_id=row.tenant_id,
        request=plan.request,
        params=row.params,
        route=route,
        context=history.items + own,
        input_items=req.input_items,
        input_spans=span_after(history.input_spans, len(history.items), len(history.items) + len(own)),
    )
    return job, plan


async def _assemble(
    job: ResponseJob,
    persistence: DatabasePersistence,
    plan: ToolPlan,
    *,
    key_id: int | None,
    where: str,
    stream_upstream: bool | None = None,
    first_sequence_number: int = 0,
) -> ResponseRun:
    # Here, not in either caller: the window is what truncation "auto" fits the context to,
    # so a worker's run must learn it as the web run does. The output guardrails likewise: a
    # worker's run (whose events a resumed stream replays) is guarded as the web run is.
    job.route = await with_context_window(job.route)
    if job.files is None:
        job.files = await run_files(job.tenant_id, job.context)
        if job.files:  # their text goes to the model: checked like any input
            job.files = await screen_files(
                Caller(job.tenant_id, key_id), job.request.model, job.files, where=where, response_id=job.response_id
            )
    searches = await check_file_search(job.tenant_id, job.request)
    toolset = await toolset_for(job.response_id, plan.mcp, job.tenant_id)
    runner = await tool_runner(job.response_id, plan.specs)
    if searches:  # file_search over the gateway's own vector stores
        runner = FileSearchRunner(runner, tenant_id=job.tenant_id, specs=searches)
    guard = await output_guard(tenant_id=job.tenant_id, key_id=key_id, model=job.request.model)
    return ResponseRun(
        job,
        persistence,
        runner,
        max_iterations=settings.GATEWAY_MAX_TOOL_ITERATIONS,
        mcp=McpSession(toolset) if toolset is not None else None,
        stream_upstream=stream_upstream,
        first_sequence_number=first_sequence_number,
        output_guard=guard,
        record_guardrails=output_recorder(
            tenant_id=job.tenant_id, key_id=key_id, response_id=job.response_id, where=where
        )
        if guard is not None
        else None,
        screen_summary=_summary_screen(job, key_id),
    )


def _summary_screen(job: ResponseJob, key_id: int | None) -> SummaryScreen | None:
    """The input guardrails of an automatic compaction's summariser call (only a request with
    `context_management` can have one)."""
    if job.request.compact_threshold is None:
        return None
    return summary_screen(Caller(job.tenant_id, key_id), job.request.model, job.response_id)


async def check_file_parts(principal: Principal, req: CreateRequest) -> None:
    """Each input part naming a stored file (`file_id`) names one of the tenant's: a 400 naming
    the part now, on every transport, before anything runs or is handed to a worker."""
    references = file_references(req.input_items)
    if not references:
        return
    rows = await db.run(live_files, principal.tenant_id, {ref[3] for ref in references})
    check_references(req.input_items, {row.id: row.content_type for row in rows})


async def run_files(tenant_id: int, context: list[dict[str, Any]]) -> dict[str, FileContent] | None:
    """The stored files the context names, read once for the run (a PDF's text extracted);
    None when it names none. A file deleted since an earlier turn named it is left out (the
    model is told it is gone)."""
    references = file_references(context)
    if not references:
        return None
    rows = await db.run(live_files, tenant_id, {ref[3] for ref in references})
    # The bytes and the extraction in a thread of their own: no database connection is held.
    return await asyncio.to_thread(lambda: {row.id: file_content(row) for row in rows})


async def with_context_window(route: Route) -> Route:
    """The route, with the context window its first target's upstream reports when the
    operator set none (cached; see upstreams/tokenize.py)."""
    if route.context_window or not route.targets:
        return route

    learned = await context_window(route.targets[0])
    return dataclasses.replace(route, context_window=learned) if learned else route
