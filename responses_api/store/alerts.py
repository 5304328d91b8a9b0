"""Budget alerts as the store keeps them: one AlertDelivery per enabled webhook for each
threshold crossed, with each attempt's outcome (orchestration/alerts.py sends them)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from ..models import AlertDelivery, AlertWebhook, ApiKey, Tenant


def alert_deliveries_create(*, event: dict[str, Any], tenant_id: int | None, key_id: int | None) -> list[int]:
    """The event completed with whose budget it is (a tenant's, or a key's: `key_id`; names,
    not just ids), one delivery per enabled webhook; their ids (none without a webhook)."""
    webhooks = list(AlertWebhook.objects.filter(enabled=True).values_list("id", flat=True))
    if not webhooks:
        return []
    key: dict[str, Any] | None = None
    if key_id is not None:
        row = ApiKey.objects.filter(id=key_id).values_list("id", "name", "prefix", "tenant_id").first()
        if row is not None:
            key, tenant_id = {"id": row[0], "name": row[1], "prefix": row[2]}, row[3]
    tenant = Tenant.objects.filter(id=tenant_id or 0).values("id", "name").first()
    event = {**event, "tenant": tenant, "api_key": key}
    # PostgreSQL and SQLite (3.35+) return the new rows' ids from one insert.
    rows = AlertDelivery.objects.bulk_create(AlertDelivery(webhook_id=w, event=event) for w in webhooks)
    return [row.pk for row in rows]


def alert_delivery_for_sending(*, delivery_id: int) -> tuple[AlertDelivery, AlertWebhook] | None:
    """The delivery still to send, with its webhook; None once delivered (a retry after
    success, or a task that ran twice) or gone."""
    delivery = AlertDelivery.objects.select_related("webhook").filter(id=delivery_id).first()
    if delivery is None or delivery.status == AlertDelivery.Status.DELIVERED:
        return None
    return delivery, delivery.webhook


def alert_delivery_attempted(
    *, delivery_id: int, delivered: bool, final: bool, response_status: int | None, error: str
) -> None:
    if delivered:
        status = AlertDelivery.Status.DELIVERED
    else:
        status = AlertDelivery.Status.FAILED if final else AlertDelivery.Status.PENDING
    AlertDelivery.objects.filter(id=delivery_id).update(
        attempts=F("attempts") + 1,
        status=status,
        response_status=response_status,
        error=error[:2000],
        delivered_at=timezone.now() if delivered else None,
        attempted_at=timezone.now(),
    )


def alert_deliveries_claim_stale(*, idle_seconds: float, limit: int = 100) -> list[int]:
    """Pending deliveries nothing has tried for `idle_seconds` (their task was lost: a failed
    enqueue, a worker or process gone), each claimed by moving its `attempted_at` in one
    conditional update, so that of several sweeps at once only one re-enqueues it."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=idle_seconds)
    idle = Q(attempted_at__lt=cutoff) | Q(attempted_at__isnull=True, created_at__lt=cutoff)
    pending = AlertDelivery.objects.filter(idle, status=AlertDelivery.Status.PENDING)
    claimed = []
    for delivery_id in pending.order_by("id").values_list("id", flat=True)[:limit]:
        if pending.filter(id=delivery_id).update(attempted_at=now):
            claimed.append(delivery_id)
    return claimed
