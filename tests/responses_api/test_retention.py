"""Retention: old responses and their items are deleted, live chains keep their context."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.history.factories import make_response
from tests.support.harness import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_expired_responses_go_with_their_items_and_live_chains_stay(settings) -> None:
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
    assert counts == {"responses": 3, "items": 6, "files": 0}  # 3 responses x (1 input + 1 output)
    assert Item.objects.filter(tenant_id=tenant).count() == items_before - 6
    # The kept chain still reads whole.
    from responses_api.store.selectors import chain_items_list

    assert len(chain_items_list(response_id=b2.id)) == 4
    assert retention_expire(now=now) == {"responses": 0, "items": 0, "files": 0}  # idempotent


def test_the_global_default_applies_to_tenants_without_their_own(settings) -> None:
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


@pytest.mark.django_db(transaction=True)  # the beat's own threads read what the test wrote
def test_the_embedded_process_runs_retention_and_the_admin_shows_when(settings, admin_client) -> None:
    """No Celery beat in the embedded mode: the process's own beat runs retention when due."""
    import asyncio

    from asgiref.sync import async_to_sync

    from responses_api.models import MaintenanceRun, Response
    from responses_api.orchestration import liveness
    from responses_api.store import db

    _, tenant = make_key(tenant="embedded-retention")
    settings.EMBEDDED_WORKER = True
    settings.GATEWAY_RETENTION_DAYS = 7
    settings.GATEWAY_PROCESS_HEARTBEAT_SECONDS = 0.01
    settings.GATEWAY_RETENTION_INTERVAL_SECONDS = 3600
    settings.STORAGES = {  # the admin's pages without collectstatic's manifest (tests/admin/conftest.py)
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    page = admin_client.get(f"/admin/responses_api/tenant/{tenant}/change/").content.decode()
    assert "Retention last ran" in page and "expire_responses" in page  # never ran: says how it runs
    old = make_response(tenant, created_at=timezone.now() - timedelta(days=8))

    async def beat_until_expired() -> None:
        task = asyncio.ensure_future(liveness.beat_forever())
        try:
            for _ in range(3000):  # generous: the machine may be loaded
                if not await db.run(Response.objects.filter(id=old.id).exists):
                    return
                await asyncio.sleep(0.01)
        finally:
            task.cancel()

    async_to_sync(beat_until_expired)()
    assert not Response.objects.filter(id=old.id).exists()
    run = MaintenanceRun.objects.get(name="retention")
    assert run.result == {"responses": 1, "items": 2, "files": 0}
    page = admin_client.get(f"/admin/responses_api/tenant/{tenant}/change/").content.decode()
    assert f"{run.ran_at:%Y-%m-%d %H:%M:%S} UTC" in page and "deleted 1 response(s)" in page

    # Not due again within the interval: a response that expires meanwhile waits for the next run.
    later = make_response(tenant, created_at=timezone.now() - timedelta(days=8))
    async_to_sync(liveness.expire_if_due)()
    assert Response.objects.filter(id=later.id).exists()


def test_expire_responses_runs_retention_now(settings) -> None:
    from io import StringIO

    from django.core.management import call_command

    from responses_api.models import MaintenanceRun, Response

    _, tenant = make_key(tenant="command-retention")
    settings.GATEWAY_RETENTION_DAYS = 7
    old = make_response(tenant, created_at=timezone.now() - timedelta(days=8))
    out = StringIO()
    call_command("expire_responses", stdout=out)
    assert out.getvalue().strip() == "Retention: deleted 1 response(s) and 2 item(s)."
    assert not Response.objects.filter(id=old.id).exists()
    assert MaintenanceRun.objects.get(name="retention").result == {"responses": 1, "items": 2, "files": 0}
