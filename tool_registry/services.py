"""Registry reads and writes: which tools a request gets, the egress policy, call records."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from responses_api.models import Tenant
from responses_api.protocol.mcp_tools import ApprovalPolicy, ToolFilter
from responses_api.ttlcache import TTLCache

from .egress import EgressPolicy
from .executors import ToolSpec
from .mcp_client import McpServerSpec, McpUnavailable, list_tools
from .models import EgressAllow, EgressAllowManager, McpServer, Tool, ToolCallRecord


def egress_policy() -> EgressPolicy:
    """Settings' GATEWAY_EGRESS_ALLOW plus the admin's allowlist (cached briefly)."""
    return EgressAllow.objects.policy()


_adhoc_policies: TTLCache[int, EgressPolicy] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


def adhoc_egress_policy(tenant_id: int) -> EgressPolicy:
    """The policy for MCP server URLs an API client sends: public addresses only, plus the
    explicit ad-hoc allowances (GATEWAY_MCP_ADHOC_EGRESS_ALLOW and the tenant's own), never the
    operator's allowlist for registered tools (cached briefly)."""
    cached = _adhoc_policies.get(tenant_id)
    if cached is not None:
        return cached[0]
    tenant_entries = Tenant.objects.filter(pk=tenant_id).values_list("mcp_adhoc_egress_allow", flat=True).first()
    entries = [*settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW, *(tenant_entries or [])]
    policy = EgressPolicy.from_strings(
        entries, allowlist="GATEWAY_MCP_ADHOC_EGRESS_ALLOW or the tenant's ad-hoc MCP egress allowlist (admin)"
    )
    return _adhoc_policies.put(tenant_id, policy)


def clear_cache() -> None:
    EgressAllowManager.forget_policy()
    _adhoc_policies.clear()


def spec_of(tool: Tool) -> ToolSpec:
    return ToolSpec(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        strict=tool.strict,
        executor=tool.executor,
        timeout=tool.timeout,
        url=tool.url,
        headers_env=dict(tool.headers_env or {}),
        signing_secret_env=tool.signing_secret_env,
        python_callable=tool.python_callable,
        run_on_worker=tool.run_on_worker,
        defer_loading=tool.defer_loading,
    )


def registry_tools_for(*, tenant_id: int, route_name: str, names: list[str]) -> list[ToolSpec]:
    """Enabled tools this tenant may use that the request names or its route attaches (one query)."""
    wanted = Q(name__in=names) | Q(routes__name=route_name)
    visible = Q(tenants__isnull=True) | Q(tenants__id=tenant_id)
    tools = Tool.objects.filter(wanted, visible, enabled=True).distinct().order_by("name")
    return [spec_of(t) for t in tools]


def tool_call_claim(*, response_id: str, call_id: str, tool_name: str, arguments: str) -> ToolCallRecord | None:
    """Claim a call before running it. None: claimed now, run it. A record: it ran (or started) before."""
    try:
        with transaction.atomic():
            ToolCallRecord.objects.create(
                response_id=response_id, call_id=call_id, tool_name=tool_name, arguments=arguments
            )
        return None
    except IntegrityError:
        return ToolCallRecord.objects.get(response_id=response_id, call_id=call_id)


def tool_call_finish(*, response_id: str, call_id: str, output: str, succeeded: bool) -> None:
    ToolCallRecord.objects.filter(response_id=response_id, call_id=call_id).update(
        output=output, succeeded=succeeded, finished_at=timezone.now()
    )


def mcp_spec_of(server: McpServer) -> McpServerSpec:
    headers = {name: os.environ[env] for name, env in (server.headers_env or {}).items() if env in os.environ}
    if server.approval == McpServer.Approval.PER_TOOL:
        approval = ApprovalPolicy("filter", always=ToolFilter(frozenset(server.approval_tools)))
    else:
        approval = ApprovalPolicy(server.approval)
    allowed = ToolFilter(frozenset(server.allowed_tools)) if server.allowed_tools else None
    return McpServerSpec(
        label=server.label,
        url=server.url,
        headers=headers,
        allowed=allowed,
        approval=approval,
        timeout=server.timeout,
        registry_id=server.pk,
        description=server.description or None,
        cache_seconds=float(server.cache_seconds),
        defer_loading=server.defer_loading,
    )


def mcp_servers_for(
    *, tenant_id: int, route_name: str, labels: list[str]
) -> list[tuple[McpServerSpec, dict[str, Any]]]:
    """Enabled MCP servers this tenant may use that the request names or its route attaches,
    each with its cached listing: {"tools": [...], "fresh": bool} (one query)."""
    wanted = Q(label__in=labels) | Q(routes__name=route_name)
    visible = Q(tenants__isnull=True) | Q(tenants__id=tenant_id)
    now = timezone.now()
    out = []
    for server in McpServer.objects.filter(wanted, visible, enabled=True).distinct().order_by("label"):
        fresh = server.tools_fetched_at is not None and (
            (now - server.tools_fetched_at).total_seconds() < server.cache_seconds
        )
        out.append((mcp_spec_of(server), {"tools": list(server.tools_cache or []), "fresh": fresh}))
    return out


def mcp_listing_refresh(server: McpServer) -> list[dict[str, Any]]:
    """List a registered server now (blocking, for the admin) and remember the outcome.
    Raises McpUnavailable, whose message is also stored as the server's last error."""
    try:
        tools = asyncio.run(list_tools(mcp_spec_of(server), egress_policy()))
    except McpUnavailable as exc:
        mcp_listing_store(server_id=server.pk, tools=None, error=exc.message)
        raise
    mcp_listing_store(server_id=server.pk, tools=tools)
    return tools


def mcp_listing_store(*, server_id: int, tools: list[dict[str, Any]] | None, error: str = "") -> None:
    """Remember a listing (or why it failed) for the TTL; the admin shows both."""
    fields: dict[str, Any] = {"last_error": error}
    if tools is not None:
        fields.update(tools_cache=tools, tools_fetched_at=timezone.now())
    McpServer.objects.filter(pk=server_id).update(**fields)
