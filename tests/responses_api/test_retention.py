"""Retention: old responses and their items are deleted, live chains keep their context."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.history.factories import make_response
from tests.support.harness import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_expired_responses_go_with_their_items_and_live_chains_stay(settings) -> None:  # type: ignore[no-untyped-def]
    from responses_api.models import Item, Response, Tenant
    from responses_api.store.services import retention_expire

    _, tenant = make_key(tenant="short-memory")
    _, keeper = make_key(tenant="keeps-everything")
    Tenant.objects.filter(id=tenant).update(retention_days=30)
    settings.GATEWAY_RETENTION_DAYS = 0
    now = timezone.now()
    old, recent = now - timedelta(days=40), now - timedelta(days=1)
    # A whole old chain: expires entirely, newest first.
    a1 = make_response(tenant, created_at=old)
    a2 = make_response(tenant, created_at=old + timedelta(minutes=1), previous=a1)
    a3 = make_response(tenant, created_at=old + timedelta(minutes=2), previous=a2)
    # An old start continued recently: the whole chain stays (its context is still in use).
    b1 = make_response(tenant, created_at=old)
    b2 = make_response(tenant, created_at=recent, previous=b1)
    # Open and other tenants' responses are never touched.
    running = make_response(tenant, created_at=old, status="in_progress")
    other = make_response(keeper, created_at=old)
    items_before = Item.objects.filter(tenant_id=tenant).count()

    counts = retention_expire(now=now)

    left = set(Response.objects.values_list("id", flat=True))
    assert not left & {a1.id, a2.id, a3.id}
    assert {b1.id, b2.id, running.id, other.id} <= left
    assert counts == {"responses": 3, "items": 6}  # 3 responses x (1 input + 1 output)
    assert Item.objects.filter(tenant_id=tenant).count() == items_before - 6
    # The kept chain still reads whole.
    from responses_api.store.selectors import chain_items_list

    assert len(chain_items_list(response_id=b2.id)) == 4
    assert retention_expire(now=now) == {"responses": 0, "items": 0}  # idempotent


def test_the_global_default_applies_to_tenants_without_their_own(settings) -> None:  # type: ignore[no-untyped-def]
    from responses_api.models import Response, Tenant
    from responses_api.store.services import retention_expire

    _, tenant = make_key(tenant="default-policy")
    _, forever = make_key(tenant="explicit-forever")
    settings.GATEWAY_RETENTION_DAYS = 7
    Tenant.objects.filter(id=forever).update(retention_days=0)  # 0 on a tenant: keep forever
    old = timezone.now() - timedelta(days=8)
    gone = make_response(tenant, created_at=old)
    kept = make_response(forever, created_at=old)
    retention_expire()
    assert not Response.objects.filter(id=gone.id).exists()
    assert Response.objects.filter(id=kept.id).exists()
