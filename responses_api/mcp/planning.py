"""Which MCP servers a response uses: the registered ones it names or its route attaches
(`registry_mcp`, cached briefly), ad-hoc ones (`server_url`: checked against the ad-hoc egress
policy before any work, `check_adhoc_urls`), planned into the servers, cached listings and
approval policies of one run (`mcp_plan`), then the run's toolset (`toolset_for`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings

from tool_registry.egress import EgressDenied, parse_url, resolve_checked
from tool_registry.mcp_client import McpServerSpec
from tool_registry.runner import McpToolset
from tool_registry.services import adhoc_egress_policy, egress_policy, mcp_servers_for

from ..domain import Principal
from ..protocol.errors import InvalidRequest
from ..protocol.mcp_tools import ApprovalPolicy, McpTool, ToolFilter
from ..protocol.request import CreateRequest
from ..store import db
from ..ttlcache import TTLCache

# One response's MCP servers: (server specs, fresh cached listings by label, the request's
# approval policies by label); see mcp_plan.
McpPlan = tuple[list[McpServerSpec], dict[str, list[dict[str, Any]]], dict[str, ApprovalPolicy]]
# The registered servers a response may use, each with its cached listing (mcp_servers_for).
McpRegistry = list[tuple[McpServerSpec, dict[str, Any]]]


def registry_mcp_labels(req: CreateRequest) -> list[str]:
    """The registered MCP servers a request names (declarations without `server_url`)."""
    return sorted(m.server_label for m in req.mcp_tools if m.server_url is None)


_mcp_cache: TTLCache[tuple[int, str, tuple[str, ...]], McpRegistry] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


async def registry_mcp(principal: Principal, req: CreateRequest) -> McpRegistry:
    """Registered MCP servers the request names by label or its route attaches (cached briefly)."""
    labels = registry_mcp_labels(req)
    return await db.run_cached(
        _mcp_cache,
        (principal.tenant_id, req.model, tuple(labels)),
        mcp_servers_for,
        tenant_id=principal.tenant_id,
        route_name=req.model,
        labels=labels,
    )


def registry_mcp_now(tenant_id: int, req: CreateRequest) -> McpRegistry:
    """`registry_mcp` from a database thread (a worker's job load), through the same cache."""
    labels = registry_mcp_labels(req)
    return _mcp_cache.get_or_put(
        (tenant_id, req.model, tuple(labels)),
        lambda: mcp_servers_for(tenant_id=tenant_id, route_name=req.model, labels=labels),
    )


def mcp_plan(req: CreateRequest, registry: McpRegistry) -> tuple[CreateRequest, McpPlan]:
    """The servers of one response: (specs, fresh cached listings, request approval policies),
    with the request that also declares the servers its route attaches (reported in the
    Response's `tools`).

    A declaration with `server_url` is ad hoc; without, it names a registered server (which the
    request may narrow with `allowed_tools` and make stricter with `require_approval`)."""
    by_label = {spec.label: (spec, listing) for spec, listing in registry}
    specs: list[McpServerSpec] = []
    cached: dict[str, list[dict[str, Any]]] = {}
    approvals: dict[str, ApprovalPolicy] = {}
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
            if decl.deferred:  # a request may defer a registered server's tools, not undo its deferral
                spec = dataclasses.replace(spec, defer_loading=True)
            spec = dataclasses.replace(spec, param=decl.param)
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
                    defer_loading=decl.deferred,
                    param=decl.param,
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
                deferred=spec.defer_loading,
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


async def toolset_for(response_id: str, plan: McpPlan, tenant_id: int) -> McpToolset | None:
    """The run's MCP toolset (None: no server), with the egress policies its calls pass: the
    operator's for registered servers, the ad-hoc one (and the tenant's allowance) for the rest."""
    specs, cached, approvals = plan
    if not specs:
        return None
    return McpToolset(
        response_id=response_id,
        servers=specs,
        policy=await db.run(egress_policy),
        adhoc_policy=await db.run(adhoc_egress_policy, tenant_id),
        tenant_id=tenant_id,
        cached=cached,
        request_approval=approvals,
    )


def clear_cache() -> None:
    _mcp_cache.clear()
