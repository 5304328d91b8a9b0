"""The async orchestration between views (or workers) and the engine: prepare a run."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import TYPE_CHECKING, Any

from django.conf import settings

from . import db, services
from .auth import Principal
from .engine import ResponseJob, ResponseRun
from .limits import Grant, admit
from .outages import unavailable
from .protocol.errors import GatewayError, InvalidRequest, NotFound, UpstreamError
from .protocol.events import EventBuilder
from .protocol.ids import new_id
from .protocol.request import CreateRequest
from .protocol.response import request_params, response_object
from .protocol.tools import HostedTool, Tool, make_tool
from .routing import Route, route_cached, route_get
from .ttlcache import TTLCache

if TYPE_CHECKING:
    from tool_registry.executors import ToolSpec

log = logging.getLogger("gateway.tools")


async def route_for(principal: Principal, model: str) -> Route:
    if not principal.may_use(model):
        # Indistinguishable from an unknown model: a key learns nothing of others' routes.
        raise NotFound(
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return route_cached(model) or await db.run(route_get, model)


class DatabasePersistence:
    """Stores the response (store: true) or nothing at all (store: false).

    `create_row`: the request-time fields of a row not yet written. A stream's
    row is inserted by `open()`, while the upstream call is being opened, so it
    is visible (in_progress) from the first event on and can be cancelled; a
    non-streaming create writes its row once, in `finish()`."""

    def __init__(
        self,
        *,
        tenant_id: int,
        input_items: list[dict[str, Any]],
        store: bool,
        create_row: dict[str, Any] | None = None,
        insert_at_open: bool = False,
        conversation_id: str | None = None,
        grant: Grant | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.grant = grant  # the rate limits this run holds: settled and released at its end
        self.tenant_id = tenant_id
        self.input_items = input_items
        self.store = store
        self.keep_items = True  # False: the row records the response (status, usage), not its items
        self.create_row = create_row
        self.insert_at_open = insert_at_open

    async def open(self) -> None:
        if not (self.store and self.insert_at_open and self.create_row is not None):
            return
        try:
            if db.native_async():
                await db.fetch_one(*services.insert_statement(row=self.create_row, status="in_progress"))
            else:
                await db.run(services.response_insert, row=self.create_row, status="in_progress")
        except Exception as exc:
            outage = unavailable(exc)
            if outage is None:
                raise
            # The insert may have committed before the connection broke (the client gets a
            # 503 either way): end that row, if it exists, once the database answers again.
            log.warning(
                "response %s: its row may be half-written; it is ended once the database is back", self.create_row["id"]
            )
            task = asyncio.ensure_future(_fail_if_written(self.create_row["id"], outage))
            _background.add(task)
            task.add_done_callback(_background.discard)
            raise outage from exc
        self.create_row = None  # finish() updates the row from now on

    async def finish(
        self,
        response: dict[str, Any],
        *,
        upstream: str,
        latency_ms: int,
        input_items: list[dict[str, Any]] | None = None,
    ) -> None:
        try:
            await self._write(response, upstream=upstream, latency_ms=latency_ms, input_items=input_items)
        finally:
            if self.grant is not None:  # after the write: a budget seeded from the store then counts it
                await self.grant.end(response.get("usage"))

    async def _write(
        self,
        response: dict[str, Any],
        *,
        upstream: str,
        latency_ms: int,
        input_items: list[dict[str, Any]] | None,
    ) -> None:
        if not self.store and self.conversation_id is None:
            return
        input_items = self.input_items if input_items is None else input_items
        if not self.keep_items:
            response, input_items = {**response, "output": []}, []
        fields = dict(
            tenant_id=self.tenant_id,
            response=response,
            input_items=input_items,
            upstream=upstream,
            latency_ms=latency_ms,
            create_row=self.create_row,
        )
        try:
            if self.conversation_id is not None:  # with the conversation's append, one transaction
                await db.run(
                    services.response_finish_in_conversation,
                    **fields,
                    conversation_id=self.conversation_id,
                    store=self.store,
                )
            elif db.native_async() and services.item_sequence_known():
                await db.fetch_one(*services.finish_statement(**fields))
            else:  # SQLite, or the first write of this process (it looks up the item sequence)
                await db.run(services.response_finish, **fields)
        except Exception as exc:
            outage = unavailable(exc)
            if outage is not None:
                raise outage from exc
            raise

    async def finish_failed(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        await self.finish({**response, "output": []}, upstream=upstream, latency_ms=latency_ms, input_items=[])


_background: set[asyncio.Task] = set()  # the loop holds tasks only weakly


async def _fail_if_written(response_id: str, error: GatewayError, attempts: int = 20) -> None:
    delay = 0.5
    for _ in range(attempts):
        await asyncio.sleep(delay)
        try:
            await db.run(services.response_end_open, response_id=response_id, error=error.as_response_error())
            return
        except Exception:  # noqa: BLE001 - still down: wait and try again
            delay = min(delay * 2, 5.0)
    log.warning("response %s: could not check for a half-written row; the reaper will end it", response_id)


_tool_cache: TTLCache[tuple[int, str, tuple[str, ...]], list[ToolSpec]] = TTLCache(
    lambda: settings.GATEWAY_CACHE_SECONDS
)


def clear_cache() -> None:
    _tool_cache.clear()
    _mcp_cache.clear()


async def registry_specs(principal: Principal, req: CreateRequest, route: Route | None = None) -> list[ToolSpec]:
    """Registry tools named by the request, serving its hosted tools, or attached to its route
    (cached briefly)."""
    from tool_registry.services import registry_tools_for

    served = [name for _, name in served_hosted_tools(req, route)] if route is not None else []
    names = tuple(sorted({t.name for t in req.tools if t.bare} | set(served)))
    return await _cached_lookup(
        _tool_cache,
        (principal.tenant_id, req.model, names),
        registry_tools_for,
        tenant_id=principal.tenant_id,
        route_name=req.model,
        names=list(names),
    )


async def _cached_lookup(cache: TTLCache, key: tuple, lookup: Any, **kwargs: Any) -> Any:
    """`lookup(**kwargs)` in a thread, remembered under `key` for GATEWAY_CACHE_SECONDS."""
    cached = cache.get(key)
    if cached is not None:
        return cached[0]
    return cache.put(key, await db.run(lookup, **kwargs))


def merge_registry_tools(req: CreateRequest, specs: list[ToolSpec]) -> None:
    """Bare `{type, name}` tools become registry tools; route-attached tools are appended."""
    by_name = {s.name: s for s in specs}
    merged: list[Tool] = []
    for tool in req.tools:
        spec = by_name.pop(tool.name, None) if tool.bare else None
        merged.append(tool if spec is None else _registry_tool(spec))
    merged += [_registry_tool(s) for s in by_name.values() if s.name not in {t.name for t in merged}]
    req.tools = merged


def _registry_tool(spec: ToolSpec) -> Tool:
    return make_tool(
        name=spec.name,
        description=spec.description or None,
        parameters=spec.parameters,
        strict=spec.strict,
        param=f"registry tool {spec.name}",
        source="registry",
    )


@dataclass(slots=True)
class PriorContext:
    """A WebSocket connection's most recent response, kept in memory: a continuation from it
    needs no chain read, and works for `store: false` responses too."""

    response_id: str
    items: list[dict[str, Any]]  # its whole context: input (with what it continued) and output
    stored: bool


async def prepare_run(
    principal: Principal,
    req: CreateRequest,
    *,
    route: Route,
    specs: list[ToolSpec],
    mcp: tuple[list, dict, dict] | None = None,
    prior: PriorContext | None = None,
    grant: Grant | None = None,
) -> ResponseRun:
    """Validate access and load the chain: one thread hop, and only for a chain or item references."""
    merge_registry_tools(req, specs)
    route = await with_context_window(route)
    response_id = new_id("resp")
    now = time.time()
    params = request_params(req)
    created_at = datetime.fromtimestamp(now, UTC)
    references = any(i["type"] == "item_reference" for i in req.input_items)
    stored_input, stored_previous = req.input_items, req.previous_response_id
    if prior is not None and req.previous_response_id == prior.response_id and not references:
        context = prior.items + req.input_items
        if not prior.stored:
            # Continuing an unstored response: a stored one keeps its whole context as input,
            # so its chain never points at a response the database does not have.
            stored_input, stored_previous = context, None
    elif req.previous_response_id or references or req.conversation:
        begin = await db.run(
            services.response_begin,
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            response_id=response_id,
            created_at=created_at,
            model=req.model,
            previous_response_id=req.previous_response_id,
            input_items=req.input_items,
            params=params,
            status="in_progress",
            store=False,
            conversation_id=req.conversation,
        )
        context = begin.context
    else:
        context = list(req.input_items)
    create_row = None
    if req.store:
        create_row = services.response_row(
            response_id=response_id,
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            previous_response_id=stored_previous,
            model=req.model,
            params=params,
            created_at=created_at,
        )
    job = ResponseJob(
        response_id=response_id,
        created_at=int(now),
        tenant_id=principal.tenant_id,
        request=req,
        params=params,
        route=route,
        context=context,
        input_items=req.input_items,
    )
    persistence = DatabasePersistence(
        tenant_id=principal.tenant_id,
        input_items=stored_input,
        store=req.store,
        create_row=create_row,
        insert_at_open=req.stream,
        conversation_id=req.conversation,
        grant=grant,
    )
    toolset = None
    if mcp is not None and mcp[0]:
        from tool_registry.services import adhoc_egress_policy, egress_policy

        toolset = mcp_toolset(
            response_id, mcp, await db.run(egress_policy), await db.run(adhoc_egress_policy, principal.tenant_id)
        )
    return ResponseRun(
        job,
        persistence,
        await tool_runner(response_id, specs),
        max_iterations=settings.GATEWAY_MAX_TOOL_ITERATIONS,
        mcp=toolset,
    )


async def tool_runner(response_id: str, specs: list[ToolSpec]) -> Any:
    from tool_registry.runner import NoTools, RegistryToolRunner
    from tool_registry.services import egress_policy

    if not specs:
        return NoTools()
    return RegistryToolRunner(response_id=response_id, specs=specs, policy=await db.run(egress_policy))


@dataclass(slots=True)
class WorkerStarted:
    """A response handed to a worker: what the create call answers with."""

    response: dict[str, Any]
    response_id: str
    rate_limit_headers: dict[str, str] = dataclasses.field(default_factory=dict)


async def start_on_worker(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    grant: Grant | None = None,
) -> WorkerStarted:
    """Store the run as a job, write its opening events to the log, enqueue it."""
    from .background import enqueue
    from .eventlog import event_log

    response_id = new_id("resp")
    now = time.time()
    params = request_params(req)
    from .protocol.mcp import split_mcp_credentials

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
        from .sealing import sealer

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
        status="queued" if req.background else "in_progress",
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
        await db.run(services.response_job_drop_credentials, response_id=response_id, only_if_ended=True)
        raise outage from exc
    return WorkerStarted(
        response=copy.deepcopy(builder.response),
        response_id=response_id,
        rate_limit_headers=grant.headers if grant is not None else {},
    )


def open_sealed_reasoning(items: list[dict[str, Any]], tenant_id: int) -> None:
    """Reasoning items a client carries back (store: false) get their text again from
    `encrypted_content`, which this gateway sealed for this tenant; anything else there is a 400."""
    from .sealing import SealBroken, sealer

    for i, item in enumerate(items):
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
            item["content"] = [{"type": "reasoning_text", "text": payload["text"]}]


def served_hosted_tools(req: CreateRequest, route: Route) -> list[tuple[HostedTool, str]]:
    """The request's hosted tools the route serves, each with the registry tool serving it."""
    from .protocol.client_tools import HOSTED_ALIASES

    policy = dict(route.hosted_tools)
    out = []
    for hosted in req.hosted_tools:
        name = policy.get(HOSTED_ALIASES.get(hosted.type, hosted.type))
        if name is not None:
            out.append((hosted, name))
    return out


def serve_hosted_tools(req: CreateRequest, route: Route, specs: list[ToolSpec]) -> list[str]:
    """Hosted tools (web_search, ...) become the route's registry tools that serve them; the
    rest go on to the upstream when every target is a native Responses server, and are
    dropped otherwise, and said so in the log. Returns the dropped types, which the view also
    names in `x-gateway-dropped-tools`: the model answers without them."""
    from .protocol.client_tools import HOSTED_ALIASES

    by_name = {s.name: s for s in specs}
    served: set[int] = set()
    for hosted, name in served_hosted_tools(req, route):
        spec = by_name.get(name)
        if spec is None or any(t.name == name and t.kind != "function" for t in req.tools):
            continue  # the registry has no such tool for this tenant (or it already serves another type)
        tool = _registry_tool(spec)
        tool.kind, tool.report = HOSTED_ALIASES.get(hosted.type, hosted.type), hosted.spec
        req.tools = [t for t in req.tools if t.name != name] + [tool]
        served.add(id(hosted))
    unserved = [h for h in req.hosted_tools if id(h) not in served]
    if unserved and route.targets and all(t.provider.kind == "responses" for t in route.targets):
        # A native Responses upstream runs hosted tools itself: sent on as the client sent them,
        # their items relayed back (protocol/native.py).
        req.upstream_hosted_tools = [dict(h.spec) for h in unserved]
        return []
    dropped = list(dict.fromkeys(h.type for h in unserved))
    if dropped:
        log.info("hosted tools dropped for model %s: %s", req.model, ", ".join(dropped))
    return dropped


async def start_response(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    prior: PriorContext | None = None,
) -> ResponseRun | WorkerStarted:
    """Run here (a ResponseRun to drive) or on a worker (background, or a route/tool that asks for it).

    `prior`: a WebSocket connection's most recent response, which `req` may continue."""
    route = await route_for(principal, req.model)
    open_sealed_reasoning(req.input_items, principal.tenant_id)
    specs = await registry_specs(principal, req, route)
    req.dropped_tools = serve_hosted_tools(req, route, specs)
    plan = mcp_plan(req, await registry_mcp(principal, req))
    await check_adhoc_urls(req, principal.tenant_id)
    on_worker = req.background or route.run_on_worker or any(s.run_on_worker for s in specs)
    if on_worker and not req.store:
        raise InvalidRequest("This model runs on background workers, which requires 'store': true.", param="store")
    # Before any upstream call; a worker run holds its lease until the worker ends it.
    grant = await admit_request(principal, req, route, on_worker=on_worker)
    try:
        if on_worker:
            merge_registry_tools(req, specs)
            return await start_on_worker(principal, req, body, grant)
        return await prepare_run(principal, req, route=route, specs=specs, mcp=plan, prior=prior, grant=grant)
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
    from .protocol.tokens import estimate_request

    def estimate() -> int:  # the new input only: a chain's context is settled at the end
        tools = [t.as_dict() for t in req.tools]
        return estimate_request(req.input_items, req.instructions, tools) + (req.max_output_tokens or 0)

    lease = settings.GATEWAY_QUEUED_MAX_SECONDS + settings.CELERY_TASK_TIME_LIMIT if on_worker else None
    return await admit(principal, price=route.price, estimate=estimate, lease_seconds=lease)


# -- MCP -------------------------------------------------------------------------

_mcp_cache: TTLCache[tuple[int, str, tuple[str, ...]], list] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


async def registry_mcp(principal: Principal, req: CreateRequest) -> list:
    """Registered MCP servers the request names by label or its route attaches (cached briefly)."""
    from tool_registry.services import mcp_servers_for

    labels = tuple(sorted(m.server_label for m in req.mcp_tools if m.server_url is None))
    return await _cached_lookup(
        _mcp_cache,
        (principal.tenant_id, req.model, labels),
        mcp_servers_for,
        tenant_id=principal.tenant_id,
        route_name=req.model,
        labels=list(labels),
    )


def mcp_plan(req: CreateRequest, registry: list) -> tuple[list, dict, dict]:
    """The servers of one response: (specs, fresh cached listings, request approval policies).

    A declaration with `server_url` is ad hoc; without, it names a registered server (which the
    request may narrow with `allowed_tools` and make stricter with `require_approval`)."""
    import dataclasses

    from tool_registry.mcp import McpServerSpec
    from responses_api.protocol.mcp import McpTool, ToolFilter

    by_label = {spec.label: (spec, listing) for spec, listing in registry}
    specs: list[McpServerSpec] = []
    cached: dict[str, list] = {}
    approvals: dict = {}
    for decl in req.mcp_tools:
        if decl.server_url is None:
            entry = by_label.pop(decl.server_label, None)
            if entry is None:
                raise InvalidRequest(
                    f"No registered MCP server is labelled {decl.server_label!r} for this key; give "
                    "'server_url' for an ad-hoc server.",
                    param=f"{decl.param}.server_label",
                )
            spec, listing = entry
            if decl.allowed is not None:
                names = decl.allowed.tool_names
                if spec.allowed is not None and spec.allowed.tool_names is not None:
                    names = spec.allowed.tool_names if names is None else names & spec.allowed.tool_names
                spec = dataclasses.replace(spec, allowed=ToolFilter(names, decl.allowed.read_only))
            if decl.approval_given:
                approvals[decl.server_label] = decl.approval
        else:
            if not settings.GATEWAY_MCP_ADHOC:
                raise InvalidRequest(
                    "Ad-hoc MCP servers are switched off on this gateway; use a registered server's "
                    "label without 'server_url'.",
                    param=f"{decl.param}.server_url",
                )
            if decl.server_label in by_label:
                raise InvalidRequest(
                    f"{decl.server_label!r} is a registered MCP server's label; omit 'server_url' to use "
                    "it, or choose another label.",
                    param=f"{decl.param}.server_label",
                )
            spec, listing = (
                McpServerSpec(
                    label=decl.server_label,
                    url=decl.server_url,
                    headers=dict(decl.headers),
                    allowed=decl.allowed,
                    approval=decl.approval,
                    timeout=settings.GATEWAY_MCP_TIMEOUT,
                    description=decl.server_description,
                ),
                None,
            )
        specs.append(spec)
        if listing is not None and listing["fresh"]:
            cached[spec.label] = listing["tools"]
    for spec, listing in by_label.values():  # attached by the route
        specs.append(spec)
        if listing["fresh"]:
            cached[spec.label] = listing["tools"]
        # Reported in the Response's `tools` like the route's registry function tools.
        req.mcp_tools.append(
            McpTool(
                server_label=spec.label,
                server_url=None,
                allowed=spec.allowed,
                approval=spec.approval,
                server_description=spec.description,
            )
        )
    return specs, cached, approvals


async def check_adhoc_urls(req: CreateRequest, tenant_id: int) -> None:
    """Ad-hoc server URLs pass the ad-hoc egress policy now, so a refusal is a 400 naming the
    field. (Each connection checks again and pins the address it checked.) A URL a client sends
    never gets the operator's allowlist for registered tools: public addresses only, unless
    GATEWAY_MCP_ADHOC_EGRESS_ALLOW or the tenant's own allowance names it."""
    from tool_registry.egress import EgressDenied, parse_url, resolve_checked
    from tool_registry.services import adhoc_egress_policy

    adhoc = [d for d in req.mcp_tools if d.server_url is not None]
    if not adhoc:
        return
    policy = await db.run(adhoc_egress_policy, tenant_id)
    for decl in adhoc:
        try:
            _, host, port, _ = parse_url(decl.server_url)
            await resolve_checked(host, port, policy)
        except EgressDenied as exc:
            raise InvalidRequest(f"Refused 'server_url': {exc}", param=f"{decl.param}.server_url") from None
        except ValueError as exc:
            raise InvalidRequest(f"Invalid 'server_url': {exc}", param=f"{decl.param}.server_url") from None


def mcp_toolset(response_id: str, plan: tuple[list, dict, dict], policy: Any, adhoc_policy: Any) -> Any:
    from tool_registry.runner import McpToolset

    specs, cached, approvals = plan
    if not specs:
        return None
    return McpToolset(
        response_id=response_id,
        servers=specs,
        policy=policy,
        adhoc_policy=adhoc_policy,
        cached=cached,
        request_approval=approvals,
    )


# -- /v1/responses/compact -----------------------------------------------------------


async def compact_conversation(principal: Principal, body: Any) -> dict[str, Any]:
    """Summarise a conversation with its routed model; the `response.compaction` object."""
    from .protocol.compaction import COMPACTION_INSTRUCTIONS, compacted_output, summary_request_item
    from .protocol.request import parse_create_request
    from .sealing import sealer

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
    open_sealed_reasoning(req.input_items, principal.tenant_id)
    req.input_items.append(summary_request_item())
    grant = await admit_request(principal, req, route)
    try:
        run = await prepare_run(principal, req, route=route, specs=[], grant=grant)
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
    # Usage and history record the compaction like any response; the conversation itself is
    # not stored again (the client may have sent it with store: false).
    run.persistence.keep_items = False  # type: ignore[attr-defined]
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
    sealed = sealer().seal({"summary": summary}, tenant_id=principal.tenant_id, purpose="compaction")
    return {
        "id": result["id"],
        "object": "response.compaction",
        "created_at": result["created_at"],
        "output": compacted_output(run.job.context[:-1], sealed),
        "usage": result["usage"],
    }


async def with_context_window(route: Route) -> Route:
    """The route, with the context window its first target's upstream reports when the
    operator set none (cached; see upstreams/tokenize.py)."""
    if route.context_window or not route.targets:
        return route
    from .upstreams.tokenize import context_window

    learned = await context_window(route.targets[0])
    return dataclasses.replace(route, context_window=learned) if learned else route


# -- /v1/responses/input_tokens --------------------------------------------------------


async def count_input_tokens(principal: Principal, body: Any) -> tuple[int, bool]:
    """The input tokens a create request with this body would send its routed model, and
    whether the count is exact (the upstream tokenized it) or the gateway's estimate."""
    from .protocol.chat import build_chat_request
    from .protocol.compaction import expand_compactions
    from .protocol.request import parse_create_request
    from .protocol.tokens import estimate_request
    from .sealing import sealer
    from .upstreams.chat_completions import chat_options
    from .upstreams.tokenize import count_tokens

    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    req = parse_create_request({k: v for k, v in body.items() if k not in ("stream", "background", "store")})
    route = await route_for(principal, req.model)
    open_sealed_reasoning(req.input_items, principal.tenant_id)
    context = list(req.input_items)
    if req.previous_response_id or req.conversation or any(i["type"] == "item_reference" for i in context):
        begin = await db.run(
            services.response_begin,
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            response_id=new_id("resp"),
            created_at=datetime.now(UTC),
            model=req.model,
            previous_response_id=req.previous_response_id,
            input_items=req.input_items,
            params=request_params(req),
            status="in_progress",
            store=False,
            conversation_id=req.conversation,
        )
        context = begin.context
    unseal = sealer().unseal
    items = expand_compactions(
        context, lambda sealed: unseal(sealed, tenant_id=principal.tenant_id, purpose="compaction")["summary"]
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
