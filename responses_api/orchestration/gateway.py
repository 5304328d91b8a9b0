"""The create flow between the views (HTTP and WebSocket) and the engine: admit (admission.py),
plan the tools (toolplan.py), then run here (assembly.run_for_request) or hand the run to a
worker (handoff.start_on_worker). Compaction and token counting have their own modules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..domain import Principal, Route
from ..engine.run import ResponseRun
from ..mcp.planning import check_adhoc_urls, registry_mcp
from ..protocol.batches import singly
from ..protocol.errors import GatewayError, InvalidRequest
from ..protocol.events import Event
from ..protocol.request import CreateRequest
from .admission import admit_request, open_sealed_reasoning, route_for
from .assembly import PriorContext, check_answers_before_hand_off, check_file_parts, run_for_request
from .guardrails import guard_request
from .handoff import start_on_worker
from .prompts import apply_request_prompt
from .toolplan import plan_tools, registry_specs
from .worker import follow_log


@dataclass(slots=True)
class Started:
    """A started create, one type wherever it runs: what a view renders (connect, then the
    events streamed or the end as JSON), with the request as planned and the admission's
    rate-limit headers.

    `run`: the run this process drives; None when a worker runs the response: its events are
    then followed in the event log, and `handed_over` is the response as handed over (queued,
    or in progress), the answer of a create not streamed."""

    response_id: str
    request: CreateRequest  # as planned: its dropped tools and ignored fields are named in headers
    rate_limit_headers: dict[str, str]
    run: ResponseRun | None = None
    handed_over: dict[str, Any] | None = None

    async def connect(self) -> None:
        """Open the first model call (a worker's run opens its own). Raises the GatewayError of
        a run whose every target failed: nothing has been sent yet, the caller answers it."""
        if self.run is not None:
            await self.run.connect()

    def event_batches(self) -> AsyncIterator[list[Event]]:
        """The events to stream, to the terminal one: the run's, or the worker's, relayed live
        from the event log (the work survives a client that leaves)."""
        if self.run is None:
            return singly(follow_log(self.response_id))
        return self.run.event_batches()

    async def to_end(self) -> dict[str, Any]:
        """The response at its end (not streamed); a worker's as handed over."""
        if self.run is None:
            assert self.handed_over is not None  # start_response sets one or the other
            return self.handed_over
        return await self.run.run_to_end()

    @property
    def error(self) -> GatewayError | None:
        """What the run failed with (after `to_end`), to answer as an HTTP error."""
        return self.run.error if self.run is not None else None

    @property
    def truncated_items(self) -> int:
        """How many of the oldest items truncation "auto" dropped (the most of any step so far)."""
        return self.run.truncated_items if self.run is not None else 0


async def start_response(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    prior: PriorContext | None = None,
) -> Started:
    """Run here (a ResponseRun to drive) or on a worker (background, or a route/tool that asks for it).

    `body`: the request as sent, which a worker's job keeps; `prior`: a WebSocket connection's
    most recent response, which `req` may continue."""
    req, body = await apply_request_prompt(principal, req, body)  # first: the template may name the model
    route = await route_for(principal, req.model)
    req, body, screened = await guard_request(principal, req, body, where="responses")
    try:
        started = await _start(principal, req, body, route, prior)
    except Exception:
        await screened.audit(principal)  # refused later (a limit, a tool): the redaction still happened
        raise
    await screened.audit(principal, started.response_id)
    return started


async def _start(
    principal: Principal, req: CreateRequest, body: dict[str, Any], route: Route, prior: PriorContext | None
) -> Started:
    req = open_sealed_reasoning(req, principal.tenant_id)
    await check_file_parts(principal, req)
    specs = await registry_specs(principal, req, route)
    plan = plan_tools(req, route, specs, await registry_mcp(principal, req))
    await check_adhoc_urls(plan.request, principal.tenant_id)
    on_worker = req.background or route.run_on_worker or any(s.run_on_worker for s in specs)
    if on_worker and not req.store:
        raise InvalidRequest("This model runs on background workers, which requires 'store': true.", param="store")
    if on_worker:
        await check_answers_before_hand_off(principal, plan.request)
    # Before any upstream call; a worker run holds its lease until the worker ends it.
    grant = await admit_request(principal, plan.request, route, on_worker=on_worker)
    headers = grant.headers if grant is not None else {}
    try:
        if on_worker:
            response = await start_on_worker(principal, plan.request, body, grant)
            return Started(response["id"], plan.request, headers, handed_over=response)
        run = await run_for_request(principal, plan, route=route, prior=prior, grant=grant)
        return Started(run.job.response_id, run.job.request, headers, run=run)
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
