"""Guardrails' rows: the definitions whose scope takes a request, and the audit of decisions
(orchestration/guardrails.py caches the first and writes the second)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from ..models import Guardrail, GuardrailEvent


@dataclass(frozen=True, slots=True)
class GuardrailRow:
    id: int
    name: str
    kind: str
    action: str
    config: dict[str, Any]
    version: str  # updated_at: a changed definition is compiled again


def scope_guardrails(*, tenant_id: int, key_id: int | None, model: str, applies_to: str) -> tuple[GuardrailRow, ...]:
    """The enabled guardrails of `applies_to` whose scope takes this tenant, key and model (the
    union of every scope that does)."""
    rows = (
        Guardrail.objects.filter(enabled=True, applies_to=applies_to)
        .filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
        .filter(Q(api_key__isnull=True) | Q(api_key_id=key_id))
        .filter(Q(route__isnull=True) | Q(route__name=model))
        .order_by("id")
        .values_list("id", "name", "kind", "action", "config", "updated_at")
    )
    return tuple(GuardrailRow(i, n, k, a, c or {}, u.isoformat()) for i, n, k, a, c, u in rows)


@dataclass(frozen=True, slots=True)
class GuardrailAudit:
    tenant_id: int | None
    key_id: int | None
    response_id: str
    guardrail_id: int
    guardrail: str
    category: str
    action: str
    where: str


def record_events(events: Iterable[GuardrailAudit]) -> None:
    """The audit rows; a guardrail or key deleted meanwhile is kept by name (null reference)."""
    rows = list(events)
    existing = set(Guardrail.objects.filter(id__in={e.guardrail_id for e in rows}).values_list("id", flat=True))
    GuardrailEvent.objects.bulk_create(
        GuardrailEvent(
            tenant_id=e.tenant_id or None,
            api_key_id=e.key_id or None,
            response_id=e.response_id,
            guardrail_id=e.guardrail_id if e.guardrail_id in existing else None,
            guardrail_name=e.guardrail,
            category=e.category,
            action=e.action,
            where=e.where,
        )
        for e in rows
    )


def events_by_response(response_ids: Iterable[str]) -> dict[str, list[GuardrailEvent]]:
    """The decisions recorded for these responses (one query), oldest first: the admin's thread
    view shows each response's under it."""
    found: dict[str, list[GuardrailEvent]] = {}
    ids = [rid for rid in response_ids if rid]
    for event in GuardrailEvent.objects.filter(response_id__in=ids).order_by("created_at", "id"):
        found.setdefault(event.response_id, []).append(event)
    return found
