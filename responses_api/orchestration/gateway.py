"""The create flow between the views (HTTP and WebSocket) and the engine: admit (admission.py),
plan the tools (toolplan.py), then run here (assembly.run_for_request) or hand the run to a
worker (handoff.start_on_worker). Compaction and token counting have their own modules."""

from __future__ import annotations

from typing import Any

from ..domain import Principal
from ..engine.run import ResponseRun
from ..mcp.planning import check_adhoc_urls, registry_mcp
from ..protocol.errors import InvalidRequest
from ..protocol.request import CreateRequest
from .admission import admit_request, open_sealed_reasoning, route_for
from .assembly import PriorContext, check_answers_before_hand_off, run_for_request
from .handoff import WorkerStarted, start_on_worker
from .toolplan import plan_tools, registry_specs


async def start_response(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    prior: PriorContext | None = None,
) -> ResponseRun | WorkerStarted:
    """Run here (a ResponseRun to drive) or on a worker (background, or a route/tool that asks for it).

    `body`: the request as sent, which a worker's job keeps; `prior`: a WebSocket connection's
    most recent response, which `req` may continue."""
    route = await route_for(principal, req.model)
    req = open_sealed_reasoning(req, principal.tenant_id)
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
    try:
        if on_worker:
            return await start_on_worker(principal, plan.request, body, grant)
        return await run_for_request(principal, plan, route=route, prior=prior, grant=grant)
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
