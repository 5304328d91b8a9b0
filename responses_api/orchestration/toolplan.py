"""Which tools a run gets: registry tools (named by the request or attached to its route),
hosted tools the route serves with registry tools, and MCP servers (registered or ad hoc),
planned into what the engine's tool runner and MCP toolset execute.

Shared by the web path (gateway.py) and the worker (background.py); the MCP protocol itself
is in protocol/mcp.py and the client in tool_registry/mcp.py.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from django.conf import settings

from ..api.auth import Principal
from ..protocol.errors import InvalidRequest
from ..protocol.request import CreateRequest
from ..protocol.surface import refused_on_route, unapplied_fields
from ..protocol.tools import HostedTool, Tool, make_tool
from ..store import db
from ..store.ttlcache import TTLCache
from .routing import Route

if TYPE_CHECKING:
    from tool_registry.executors import ToolSpec

log = logging.getLogger("gateway.tools")

# One response's MCP servers: (server specs, fresh cached listings by label, the request's
# approval policies by label); see mcp_plan.
McpPlan = tuple[list, dict[str, list], dict[str, Any]]

_tool_cache: TTLCache[tuple[int, str, tuple[str, ...]], list[ToolSpec]] = TTLCache(
    lambda: settings.GATEWAY_CACHE_SECONDS
)


def clear_cache() -> None:
    _tool_cache.clear()
    _mcp_cache.clear()


def registry_tool_names(req: CreateRequest, route: Route) -> list[str]:
    """The registry tools a request names: bare `{type, name}` tools, and those serving its
    hosted tools on this route (the route's own attached tools come with any lookup)."""
    served = [name for _, name in served_hosted_tools(req, route)]
    return sorted({t.name for t in req.tools if t.bare} | set(served))


def registry_mcp_labels(req: CreateRequest) -> list[str]:
    """The registered MCP servers a request names (declarations without `server_url`)."""
    return sorted(m.server_label for m in req.mcp_tools if m.server_url is None)


async def registry_specs(principal: Principal, req: CreateRequest, route: Route) -> list[ToolSpec]:
    """Registry tools named by the request, serving its hosted tools, or attached to its route
    (cached briefly)."""
    from tool_registry.services import registry_tools_for

    names = registry_tool_names(req, route)
    return await _cached_lookup(
        _tool_cache,
        (principal.tenant_id, req.model, tuple(names)),
        registry_tools_for,
        tenant_id=principal.tenant_id,
        route_name=req.model,
        names=names,
    )


async def _cached_lookup(cache: TTLCache, key: tuple, lookup: Any, **kwargs: Any) -> Any:
    """`lookup(**kwargs)` in a thread, remembered under `key` for GATEWAY_CACHE_SECONDS."""
    cached = cache.get(key)
    if cached is not None:
        return cached[0]
    return cache.put(key, await db.run(lookup, **kwargs))


def merge_registry_tools(req: CreateRequest, specs: list[ToolSpec]) -> CreateRequest:
    """Bare `{type, name}` tools become registry tools; route-attached tools are appended."""
    if not specs:
        return req
    by_name = {s.name: s for s in specs}
    merged: list[Tool] = []
    for tool in req.tools:
        spec = by_name.pop(tool.name, None) if tool.bare else None
        merged.append(tool if spec is None else _registry_tool(spec))
    merged += [_registry_tool(s) for s in by_name.values() if s.name not in {t.name for t in merged}]
    return dataclasses.replace(req, tools=merged)


def _registry_tool(spec: ToolSpec) -> Tool:
    return make_tool(
        name=spec.name,
        description=spec.description or None,
        parameters=spec.parameters,
        strict=spec.strict,
        param=f"registry tool {spec.name}",
        source="registry",
    )


async def tool_runner(response_id: str, specs: list[ToolSpec]) -> Any:
    from tool_registry.runner import NoTools, RegistryToolRunner
    from tool_registry.services import egress_policy

    if not specs:
        return NoTools()
    return RegistryToolRunner(response_id=response_id, specs=specs, policy=await db.run(egress_policy))


def served_hosted_tools(req: CreateRequest, route: Route) -> list[tuple[HostedTool, str]]:
    """The request's hosted tools the route serves, each with the registry tool serving it."""
    from ..protocol.client_tools import HOSTED_ALIASES

    policy = dict(route.hosted_tools)
    out = []
    for hosted in req.hosted_tools:
        name = policy.get(HOSTED_ALIASES.get(hosted.type, hosted.type))
        if name is not None:
            out.append((hosted, name))
    return out


def serve_hosted_tools(req: CreateRequest, route: Route, specs: list[ToolSpec]) -> CreateRequest:
    """Hosted tools (web_search, ...) become the route's registry tools that serve them; the
    rest go on to the upstream when every target is a native Responses server, and are
    dropped otherwise, and said so in the log. The dropped types are the result's
    `dropped_tools`, which the view names in `x-gateway-dropped-tools`: the model answers
    without them."""
    from ..protocol.client_tools import HOSTED_ALIASES

    if not req.hosted_tools:
        return req
    by_name = {s.name: s for s in specs}
    tools = list(req.tools)
    served: set[int] = set()
    for hosted, name in served_hosted_tools(req, route):
        spec = by_name.get(name)
        if spec is None or any(t.name == name and t.kind != "function" for t in tools):
            continue  # the registry has no such tool for this tenant (or it already serves another type)
        tool = _registry_tool(spec)
        tool.kind, tool.report = HOSTED_ALIASES.get(hosted.type, hosted.type), hosted.spec
        tools = [t for t in tools if t.name != name] + [tool]
        served.add(id(hosted))
    unserved = [h for h in req.hosted_tools if id(h) not in served]
    if unserved and route.targets and all(t.provider.kind == "responses" for t in route.targets):
        # A native Responses upstream runs hosted tools itself: sent on as the client sent them,
        # their items relayed back (protocol/native.py).
        return dataclasses.replace(req, tools=tools, upstream_hosted_tools=[dict(h.spec) for h in unserved])
    dropped = list(dict.fromkeys(h.type for h in unserved))
    if dropped:
        log.info("hosted tools dropped for model %s: %s", req.model, ", ".join(dropped))
    return dataclasses.replace(req, tools=tools, dropped_tools=dropped)


# -- MCP -------------------------------------------------------------------------

_mcp_cache: TTLCache[tuple[int, str, tuple[str, ...]], list] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


async def registry_mcp(principal: Principal, req: CreateRequest) -> list:
    """Registered MCP servers the request names by label or its route attaches (cached briefly)."""
    from tool_registry.services import mcp_servers_for

    labels = registry_mcp_labels(req)
    return await _cached_lookup(
        _mcp_cache,
        (principal.tenant_id, req.model, tuple(labels)),
        mcp_servers_for,
        tenant_id=principal.tenant_id,
        route_name=req.model,
        labels=labels,
    )


def mcp_plan(req: CreateRequest, registry: list) -> tuple[CreateRequest, McpPlan]:
    """The servers of one response: (specs, fresh cached listings, request approval policies),
    with the request that also declares the servers its route attaches (reported in the
    Response's `tools`).

    A declaration with `server_url` is ad hoc; without, it names a registered server (which the
    request may narrow with `allowed_tools` and make stricter with `require_approval`)."""
    from responses_api.protocol.mcp import McpTool, ToolFilter
    from tool_registry.mcp import McpServerSpec

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
    attached: list[McpTool] = []
    for spec, listing in by_label.values():  # attached by the route
        specs.append(spec)
        if listing["fresh"]:
            cached[spec.label] = listing["tools"]
        # Reported in the Response's `tools` like the route's registry function tools.
        attached.append(
            McpTool(
                server_label=spec.label,
                server_url=None,
                allowed=spec.allowed,
                approval=spec.approval,
                server_description=spec.description,
            )
        )
    if attached:
        req = dataclasses.replace(req, mcp_tools=[*req.mcp_tools, *attached])
    return req, (specs, cached, approvals)


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
            _, host, port, _ = parse_url(decl.server_url or "")
            await resolve_checked(host, port, policy)
        except EgressDenied as exc:
            raise InvalidRequest(f"Refused 'server_url': {exc}", param=f"{decl.param}.server_url") from None
        except ValueError as exc:
            raise InvalidRequest(f"Invalid 'server_url': {exc}", param=f"{decl.param}.server_url") from None


def mcp_toolset(response_id: str, plan: McpPlan, policy: Any, adhoc_policy: Any) -> Any:
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


@dataclasses.dataclass(frozen=True, slots=True)
class ToolPlan:
    """The tools of one run. `request` is the request as the run sees it (registry tools
    merged, hosted tools served or dropped, the route's MCP servers declared); the parsed
    request it came from is left as the client sent it."""

    request: CreateRequest
    specs: list[ToolSpec]  # the registry tools the tool runner executes
    mcp: McpPlan


def plan_tools(req: CreateRequest, route: Route, specs: list[ToolSpec], mcp_registry: list) -> ToolPlan:
    """The one tool planning of the web path and the worker: `specs` are the registry tools the
    request names, serves hosted tools with, or its route attaches (registry_specs), and
    `mcp_registry` the registered MCP servers it names or its route attaches (registry_mcp)."""
    req = serve_hosted_tools(req, route, specs)
    if req.unapplied_candidates:
        kinds = {t.provider.kind for t in route.targets}
        refused = refused_on_route(req.unapplied_candidates, kinds)
        if refused is not None:
            name, why = refused
            raise InvalidRequest(f"Unsupported parameter for the model '{req.model}': '{name}': {why}.", param=name)
        ignored = unapplied_fields(req.unapplied_candidates, kinds)
        if ignored:
            req = dataclasses.replace(req, ignored_fields=ignored)
    req, mcp = mcp_plan(req, mcp_registry)
    return ToolPlan(merge_registry_tools(req, specs), specs, mcp)
