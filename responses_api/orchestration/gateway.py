"""The async orchestration between the views and the engine: route, admit, plan the tools,
then run here (assembly.run_for_request) or hand the run to a worker (tasks.enqueue). Tool and
MCP planning are in toolplan.py, run assembly in assembly.py, the worker's side in background.py."""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ..api.auth import Principal
from ..engine.run import ResponseRun
from ..models import Response
from ..protocol.errors import InvalidRequest, NotFound, UpstreamError
from ..protocol.events import EventBuilder
from ..protocol.ids import new_id
from ..protocol.request import CreateRequest
from ..protocol.response import request_params, response_object
from ..store import db, services
from ..tasks import enqueue
from .assembly import PriorContext, check_answers_before_hand_off, run_for_request
from .limits import Grant, admit
from .outages import unavailable
from .routing import Route, route_cached, route_get
from .toolplan import ToolPlan, check_adhoc_urls, plan_tools, registry_mcp, registry_specs


async def route_for(principal: Principal, model: str) -> Route:
    if not principal.may_use(model):
        # Indistinguishable from an unknown model: a key learns nothing of others' routes.
        raise NotFound(
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    cached = route_cached(model)
    return cached if cached is not None else await db.run(route_get, model)


@dataclass(slots=True)
class WorkerStarted:
    """A response handed to a worker: what the create call answers with."""

    response: dict[str, Any]
    response_id: str
    request: CreateRequest  # as planned: its `dropped_tools` are named in a header
    rate_limit_headers: dict[str, str] = dataclasses.field(default_factory=dict)


async def start_on_worker(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    grant: Grant | None = None,
) -> WorkerStarted:
    """Store the run as a job, write its opening events to the log, enqueue it."""
    from ..engine.eventlog import event_log

    response_id = new_id("resp")
    now = time.time()
    params = request_params(req)
    from ..protocol.mcp import split_mcp_credentials

    job_body, credentials = split_mcp_credentials({k: v for k, v in body.items() if k != "stream"})
    job: dict[str, Any] = {
        "body": job_body,
        "input_items": req.input_items,
        # background: the worker announces in_progress; a relayed foreground stream already did.
        "opening": "in_progress" if req.background else "none",
    }
    if grant is not None:  # the worker settles and releases it when the run ends
        job["limits"] = grant.as_job()
    if credentials:
        # MCP tokens never sit in the database in plain text; they are dropped when the run ends.
        from ..store.sealing import sealer

        job["mcp_credentials"] = sealer().seal(credentials, tenant_id=principal.tenant_id, purpose="mcp-credentials")
    await db.run(
        services.response_begin,
        tenant_id=principal.tenant_id,
        api_key_id=principal.key_id,
        response_id=response_id,
        created_at=datetime.fromtimestamp(now, UTC),
        model=req.model,
        previous_response_id=req.previous_response_id,
        input_items=req.input_items,
        params=params,
        status=Response.Status.QUEUED if req.background else Response.Status.IN_PROGRESS,
        store=True,
        job=job,
        conversation_id=req.conversation,
    )
    response = response_object(
        response_id=response_id,
        created_at=int(now),
        status="in_progress",
        model=req.model,
        previous_response_id=req.previous_response_id,
        params=params,
        output=[],
    )
    builder = EventBuilder(response)
    try:
        for event in builder.start(queued=req.background):
            await event_log().append(response_id, event)
        await enqueue(response_id)
    except Exception as exc:
        outage = unavailable(exc)
        if outage is None:
            raise
        # The row is committed but no worker will ever hear of it: end it now, with the
        # reason, instead of leaving it queued forever; the client gets a 503 to retry.
        builder.response.update(status="failed", error=outage.as_response_error())
        await db.run(
            services.response_finish,
            tenant_id=principal.tenant_id,
            response=builder.response,
            input_items=req.input_items,
        )
        raise outage from exc
    return WorkerStarted(
        response=copy.deepcopy(builder.response),
        response_id=response_id,
        request=req,
        rate_limit_headers=grant.headers if grant is not None else {},
    )


def open_sealed_reasoning(req: CreateRequest, tenant_id: int) -> CreateRequest:
    """Reasoning items a client carries back (store: false) get their text again from
    `encrypted_content`, which this gateway sealed for this tenant; anything else there is a 400.
    The result is `req` with those items opened (copies: the parsed request is not changed)."""
    from ..store.sealing import SealBroken, sealer

    opened: dict[int, dict[str, Any]] = {}
    for i, item in enumerate(req.input_items):
        if item["type"] == "compaction":
            try:  # checked here so a bad one is a 400 before any work; the engine opens it again
                sealer().unseal(item["encrypted_content"], tenant_id=tenant_id, purpose="compaction")
            except SealBroken:
                raise InvalidRequest(
                    "This compaction item's 'encrypted_content' was not produced by this gateway's "
                    "/v1/responses/compact for this key's tenant, or was altered.",
                    param=f"input[{i}].encrypted_content",
                    code="invalid_encrypted_content",
                ) from None
            continue
        if item["type"] != "reasoning" or "encrypted_content" not in item:
            continue
        try:
            payload = sealer().unseal(item["encrypted_content"], tenant_id=tenant_id, purpose="reasoning")
        except SealBroken:
            raise InvalidRequest(
                "This reasoning item's 'encrypted_content' was not produced by this gateway for this "
                "key's tenant, or was altered.",
                param=f"input[{i}].encrypted_content",
                code="invalid_encrypted_content",
            ) from None
        if not item.get("content") and isinstance(payload, dict) and payload.get("text"):
            opened[i] = {**item, "content": [{"type": "reasoning_text", "text": payload["text"]}]}
    if not opened:
        return req
    return dataclasses.replace(req, input_items=[opened.get(i, item) for i, item in enumerate(req.input_items)])


async def start_response(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    prior: PriorContext | None = None,
) -> ResponseRun | WorkerStarted:
    """Run here (a ResponseRun to drive) or on a worker (background, or a route/tool that asks for it).

    `prior`: a WebSocket connection's most recent response, which `req` may continue."""
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


async def admit_request(
    principal: Principal, req: CreateRequest, route: Route, *, on_worker: bool = False
) -> Grant | None:
    """The rate limits and budget of the principal, for one create (None: it has none)."""
    if not principal.quotas and principal.budget is None:
        return None
    if not req.generate:  # a warm-up calls no model: one request, no tokens, no slot held
        return await admit(principal, concurrent=False)
    from ..protocol.tokens import DEFAULT_OUTPUT_RESERVE, estimate_request

    def estimate() -> int:  # the new input only: a chain's context is settled at the end
        tools = [t.as_dict() for t in req.tools]
        return estimate_request(req.input_items, req.instructions, tools) + (req.max_output_tokens or 0)

    lease = settings.GATEWAY_QUEUED_MAX_SECONDS + settings.CELERY_TASK_TIME_LIMIT if on_worker else None
    # A budget reserves the output a request may produce: its max_output_tokens (in the estimate)
    # or, without one, what the engine leaves room for in a context window.
    output_reserve = 0 if req.max_output_tokens else DEFAULT_OUTPUT_RESERVE
    return await admit(
        principal, price=route.price, estimate=estimate, lease_seconds=lease, output_reserve=output_reserve
    )


# -- /v1/responses/compact -----------------------------------------------------------


async def compact_conversation(principal: Principal, body: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Summarise a conversation with its routed model: the `response.compaction` object, and
    the rate-limit headers of its admission (OpenAI's `x-ratelimit-*`, as a create has)."""
    from ..protocol.compaction import COMPACTION_INSTRUCTIONS, compacted_output, summary_payload, summary_request_item
    from ..protocol.request import parse_create_request
    from ..store.sealing import sealer

    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("Invalid type for 'instructions': expected a string.", param="instructions")
    req = parse_create_request(
        {
            "model": body.get("model"),
            "input": body.get("input"),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "instructions": f"{instructions}\n\n{COMPACTION_INSTRUCTIONS}" if instructions else COMPACTION_INSTRUCTIONS,
            "store": True,
        }
    )
    route = await route_for(principal, req.model)
    req = open_sealed_reasoning(req, principal.tenant_id)
    req = dataclasses.replace(req, input_items=[*req.input_items, summary_request_item()])
    grant = await admit_request(principal, req, route)
    try:
        # Usage and history record the compaction like any response; the conversation itself
        # is not stored again (the client may have sent it with store: false).
        plan = ToolPlan(req, specs=[], mcp=([], {}, {}))
        run = await run_for_request(principal, plan, route=route, grant=grant, keep_items=False)
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
    await run.connect()
    result = await run.run_to_end()
    if run.error is not None:
        raise run.error
    summary = "".join(
        part.get("text", "")
        for item in result["output"]
        if item["type"] == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    ).strip()
    if not summary:
        raise UpstreamError("The model returned no summary for the compaction.", code="upstream_empty")
    sealed = sealer().seal(summary_payload(summary, whole=False), tenant_id=principal.tenant_id, purpose="compaction")
    compacted = {
        "id": result["id"],
        "object": "response.compaction",
        "created_at": result["created_at"],
        "output": compacted_output(run.job.context[:-1], sealed),
        "usage": result["usage"],
    }
    return compacted, grant.headers if grant is not None else {}


# -- /v1/responses/input_tokens --------------------------------------------------------


async def count_input_tokens(principal: Principal, body: Any) -> tuple[int, bool, dict[str, str]]:
    """The input tokens a create request with this body would send its routed model, whether
    the count is exact (the upstream tokenized it) or the gateway's estimate, and the
    rate-limit headers of its admission.

    A count is admitted as a request (it may call the upstream's tokenizer): it takes one from
    the requests-per-minute limits, reserves no tokens and holds no concurrency slot."""
    from ..protocol.request import parse_create_request

    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    req = parse_create_request({k: v for k, v in body.items() if k not in ("stream", "background", "store")})
    route = await route_for(principal, req.model)  # as a create: an unknown model is refused first
    grant = await admit(principal, concurrent=False)
    try:
        count, exact = await _count_input_tokens(principal, req, route)
    finally:
        if grant is not None:
            await grant.end(None)
    return count, exact, grant.headers if grant is not None else {}


async def _count_input_tokens(principal: Principal, req: CreateRequest, route: Route) -> tuple[int, bool]:
    from ..protocol.chat import build_chat_request
    from ..protocol.compaction import expand_compactions
    from ..protocol.tokens import estimate_request
    from ..store.sealing import sealer
    from ..upstreams.chat_completions import chat_options
    from ..upstreams.tokenize import count_tokens

    req = open_sealed_reasoning(req, principal.tenant_id)
    context = list(req.input_items)
    if req.previous_response_id or req.conversation or any(i["type"] == "item_reference" for i in context):
        context = await db.run(
            services.context_read,
            tenant_id=principal.tenant_id,
            previous_response_id=req.previous_response_id,
            conversation_id=req.conversation,
            input_items=req.input_items,
        )
    unseal = sealer().unseal
    items = expand_compactions(
        context, lambda sealed: unseal(sealed, tenant_id=principal.tenant_id, purpose="compaction")
    )
    if route.targets:
        target = route.targets[0]
        chat = build_chat_request(
            req,
            items,
            upstream_model=target.upstream_model,
            stream=False,
            tools=req.tools,
            options=chat_options(target.provider.options),
        )
        exact = await count_tokens(target, chat)
        if exact is not None:
            return exact, True
    return estimate_request(items, req.instructions, [t.as_dict() for t in req.tools]), False
