"""Registry reads and writes: which tools a request gets, the egress policy, call records."""
from __future__ import annotations

import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from .egress import EgressPolicy
from .executors import ToolSpec
from .models import EgressAllow, Tool, ToolCallRecord

_policy_cache: tuple[float, EgressPolicy] | None = None


def egress_policy() -> EgressPolicy:
    """Settings' GATEWAY_EGRESS_ALLOW plus the admin's allowlist (cached briefly)."""
    global _policy_cache
    now = time.monotonic()
    if _policy_cache is None or _policy_cache[0] <= now:
        entries = [*settings.GATEWAY_EGRESS_ALLOW, *EgressAllow.objects.values_list("entry", flat=True)]
        _policy_cache = (now + settings.GATEWAY_CACHE_SECONDS, EgressPolicy.from_strings(entries))
    return _policy_cache[1]


def clear_cache() -> None:
    global _policy_cache
    _policy_cache = None


def spec_of(tool: Tool) -> ToolSpec:
    return ToolSpec(
        name=tool.name, description=tool.description, parameters=tool.parameters, strict=tool.strict,
        executor=tool.executor, timeout=tool.timeout, url=tool.url, headers_env=dict(tool.headers_env or {}),
        signing_secret_env=tool.signing_secret_env, python_callable=tool.python_callable,
        run_on_worker=tool.run_on_worker,
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
