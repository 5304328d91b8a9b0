"""Which tools a run gets: registry tools (named by the request or attached to its route),
hosted tools the route serves with registry tools, and MCP servers (registered or ad hoc),
planned into what the engine's tool runner and MCP toolset execute.

Shared by the web path (gateway.py) and the worker (worker.py, through assembly.py); the MCP
servers are planned by responses_api/mcp/planning.py.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.conf import settings

from tool_registry.executors import ToolSpec
from tool_registry.runner import NoTools, RegistryToolRunner
from tool_registry.services import egress_policy, registry_tools_for

from ..domain import Principal, Route
from ..mcp import planning as mcp_planning
from ..mcp.planning import McpPlan, McpRegistry, mcp_plan
from ..protocol.client_tools import HOSTED_ALIASES
from ..protocol.errors import InvalidRequest
from ..protocol.request import CreateRequest
from ..protocol.surface import ignored_fields, refused_on_route
from ..protocol.tools import HostedTool, Tool, make_tool
from ..protocol.vector_stores import search_options
from ..store import db
from ..ttlcache import TTLCache
from ..upstreams import applied_fields
from ..upstreams.dialects import dialect_of

log = logging.getLogger("gateway.tools")


_tool_cache: TTLCache[tuple[int, str, tuple[str, ...]], list[ToolSpec]] = TTLCache(
    lambda: settings.GATEWAY_CACHE_SECONDS
)


def clear_cache() -> None:
    _tool_cache.clear()
    mcp_planning.clear_cache()


def registry_tool_names(req: CreateRequest, route: Route) -> list[str]:
    """The registry tools a request names: bare `{type, name}` tools, and those serving its
    hosted tools on this route (the route's own attached tools come with any lookup)."""
    served = [name for _, name in served_hosted_tools(req, route)]
    return sorted({t.name for t in req.tools if t.bare} | set(served))


async def registry_specs(principal: Principal, req: CreateRequest, route: Route) -> list[ToolSpec]:
    """Registry tools named by the request, serving its hosted tools, or attached to its route
    (cached briefly)."""
    names = registry_tool_names(req, route)
    return await db.run_cached(
        _tool_cache,
        (principal.tenant_id, req.model, tuple(names)),
        registry_tools_for,
        tenant_id=principal.tenant_id,
        route_name=req.model,
        names=names,
    )


def registry_specs_now(tenant_id: int, req: CreateRequest, route: Route) -> list[ToolSpec]:
    """`registry_specs` from a database thread (a worker's job load), through the same cache:
    a run sees an admin's edit within GATEWAY_CACHE_SECONDS, as a foreground create does."""
    names = registry_tool_names(req, route)
    return _tool_cache.get_or_put(
        (tenant_id, req.model, tuple(names)),
        lambda: registry_tools_for(tenant_id=tenant_id, route_name=req.model, names=names),
    )


def merge_registry_tools(req: CreateRequest, specs: list[ToolSpec]) -> CreateRequest:
    """Bare `{type, name}` tools become registry tools; route-attached tools are appended."""
    if not specs:
        return req
    by_name = {s.name: s for s in specs}
    merged: list[Tool] = []
    for tool in req.tools:
        spec = by_name.pop(tool.name, None) if tool.bare else None
        if spec is None:
            merged.append(tool)
        else:  # the client may defer a registry tool it names, not undo the registry's deferral
            named = _registry_tool(spec)
            named.deferred = named.deferred or tool.deferred
            merged.append(named)
    merged += [_registry_tool(s) for s in by_name.values() if s.name not in {t.name for t in merged}]
    return dataclasses.replace(req, tools=merged)


def _registry_tool(spec: ToolSpec) -> Tool:
    tool = make_tool(
        name=spec.name,
        description=spec.description or None,
        parameters=spec.parameters,
        strict=spec.strict,
        param=f"registry tool {spec.name}",
        source="registry",
    )
    tool.deferred = spec.defer_loading
    return tool


async def tool_runner(response_id: str, specs: list[ToolSpec]) -> Any:
    if not specs:
        return NoTools()
    return RegistryToolRunner(response_id=response_id, specs=specs, policy=await db.run(egress_policy))


def served_hosted_tools(req: CreateRequest, route: Route) -> list[tuple[HostedTool, str]]:
    """The request's hosted tools the route serves, each with the registry tool serving it."""
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
    for hosted in req.hosted_tools:
        if hosted.type == "file_search" and id(hosted) not in served:  # the gateway's own vector stores
            tool = file_search_tool(hosted, taken={t.name for t in tools})
            tools.append(tool)
            served.add(id(hosted))
    unserved = [h for h in req.hosted_tools if id(h) not in served]
    if unserved and route.targets and all(dialect_of(t).wire.runs_hosted_tools for t in route.targets):
        # A native Responses upstream runs hosted tools itself: sent on as the client sent them,
        # their items relayed back (protocol/native.py).
        return dataclasses.replace(req, tools=tools, upstream_hosted_tools=[dict(h.spec) for h in unserved])
    dropped = list(dict.fromkeys(h.type for h in unserved))
    if dropped:
        log.info("hosted tools dropped for model %s: %s", req.model, ", ".join(dropped))
    return dataclasses.replace(req, tools=tools, dropped_tools=dropped)


FILE_SEARCH_SOURCE = "gateway"  # a file_search tool the gateway runs over its own vector stores


def file_search_tool(hosted: HostedTool, *, taken: set[str]) -> Tool:
    """A `file_search` tool as the function the model calls: its query. The tool's own fields
    (vector_store_ids, filters, max_num_results, ranking_options) are checked here, a 400 naming
    the field, and applied by the gateway when the model searches (vector_stores.FileSearchRunner)."""
    spec = hosted.spec
    ids = spec.get("vector_store_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InvalidRequest(
            f"'{hosted.param}.vector_store_ids' must be a non-empty array of vector store ids.",
            param=f"{hosted.param}.vector_store_ids",
        )
    search_options(spec, prefix=f"{hosted.param}.")
    name = next(n for n in ("file_search", "gateway_file_search", "file_search_2") if n not in taken)
    tool = make_tool(
        name=name,
        description="Search the user's uploaded files for passages relevant to a query. Cite a passage "
        "by its file's filename.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for, in a few words."}},
            "required": ["query"],
            "additionalProperties": False,
        },
        strict=True,
        param=hosted.param,
        source=FILE_SEARCH_SOURCE,
    )
    tool.kind, tool.report = "file_search", spec
    return tool


@dataclasses.dataclass(frozen=True, slots=True)
class ToolPlan:
    """The tools of one run. `request` is the request as the run sees it (registry tools
    merged, hosted tools served or dropped, the route's MCP servers declared); the parsed
    request it came from is left as the client sent it."""

    request: CreateRequest
    specs: list[ToolSpec]  # the registry tools the tool runner executes
    mcp: McpPlan


def plan_tools(req: CreateRequest, route: Route, specs: list[ToolSpec], mcp_registry: McpRegistry) -> ToolPlan:
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
        ignored = ignored_fields(req.unapplied_candidates, [applied_fields(t, req) for t in route.targets])
        if ignored:
            req = dataclasses.replace(req, ignored_fields=ignored)
    req, mcp = mcp_plan(req, mcp_registry)
    return ToolPlan(merge_registry_tools(req, specs), specs, mcp)
