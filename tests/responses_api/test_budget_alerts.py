"""Budget alerts: a budget's thresholds (80% and 100% by default, per tenant and per key) send
a signed webhook to a real HTTP server on loopback, from the worker (a Celery worker on the
PostgreSQL suite, the embedded worker on the embedded one), once per threshold and period,
each delivery recorded, a failed one retried; and a log line."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.harness import MODEL, CeleryWorker, Gateway, make_key
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.webhook import Route, WebhookServer

if TYPE_CHECKING:
    from responses_api.models import ApiKey, Tenant

pytestmark = pytest.mark.embedded

SECRET = "alert-signing-secret"


@pytest.fixture(autouse=True)
def _fresh_counters(fresh_limits) -> None:
    """Every test here starts and ends with empty counters (conftest's `fresh_limits`)."""


@pytest.fixture
def alert_worker(gateway: Gateway, settings) -> Iterator[CeleryWorker | None]:
    """The worker that sends deliveries, retrying quickly: a Celery worker with Redis, none
    (the web process's embedded worker) when embedded."""
    settings.GATEWAY_ALERT_RETRY_SECONDS = 0.2
    if settings.EMBEDDED_WORKER:
        yield None
        return
    proc = CeleryWorker(extra_env={"GATEWAY_ALERT_RETRY_SECONDS": "0.2", "GATEWAY_ALERT_RETRIES": "3"})
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def set_fields(model_cls: type[ApiKey] | type[Tenant], pk: int, **fields: object) -> None:
    from responses_api.api import auth

    model_cls.objects.filter(pk=pk).update(**fields)
    auth.clear_cache()


def key_row(raw: str):
    from responses_api.models import ApiKey

    return ApiKey.objects.get(prefix=raw.split("_")[0].removeprefix("sk-gw-"))


def create(gateway: Gateway, key: str | None = None) -> int:
    with gateway.http(key) as client:
        return client.post("/v1/responses", json={"model": MODEL, "input": "hi"}).status_code


def add_webhook(webhook: WebhookServer, path: str = "/alerts", secret: str = SECRET):
    from responses_api.models import AlertWebhook
    from responses_api.orchestration.routing import encrypt_secret

    return AlertWebhook.objects.create(
        name="ops", url=webhook.url + path, secret_encrypted=encrypt_secret(secret) if secret else ""
    )


def wait_for(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def test_a_keys_budget_thresholds_send_a_signed_webhook_once_each(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,
    caplog,
) -> None:
    from responses_api.models import AlertDelivery, ApiKey

    webhook.routes["/alerts"] = Route(status=204, body="")
    add_webhook(webhook)
    usage = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage))
    key = key_row(gateway.key)
    set_fields(ApiKey, key.id, budget_period="day", budget_tokens=100)
    with caplog.at_level(logging.WARNING, logger="gateway.alerts"):
        assert create(gateway) == 200  # 40%: nothing
        assert create(gateway) == 200  # 80%: the 80% alert
        wait_for("the 80% alert", lambda: webhook.calls_to("/alerts"))
        assert create(gateway) == 200  # 120%: the 100% alert (the last request may cross)
        assert create(gateway) == 429  # spent: refused, and nothing settled, so no alert
        calls = wait_for(
            "the 100% alert", lambda: len(webhook.calls_to("/alerts")) >= 2 and webhook.calls_to("/alerts")
        )
    time.sleep(0.5)  # nothing more comes
    calls = webhook.calls_to("/alerts")
    assert len(calls) == 2, [c.json for c in calls]
    for call in calls:
        expected = "sha256=" + hmac.new(SECRET.encode(), call.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(call.headers["x-gateway-signature"], expected)
        assert call.headers["x-gateway-event"] == "budget.threshold_crossed"
    first, second = (c.json for c in calls)
    assert first["threshold_percent"] == 80 and second["threshold_percent"] == 100
    assert first["scope"] == "key" and first["period"] == "day"
    assert first["api_key"] == {"id": key.id, "name": "test", "prefix": key.prefix}
    assert first["tenant"] == {"id": gateway.tenant_id, "name": "acme"}
    assert first["budget"] == {"tokens": 100, "usd": None}
    assert first["spent"]["tokens"] == 80 and second["spent"]["tokens"] == 120
    deliveries = wait_for(
        "the deliveries recorded",
        lambda: (
            (rows := list(AlertDelivery.objects.order_by("id").values_list("status", "attempts", "response_status")))
            and all(r[0] == "delivered" for r in rows)
            and rows
        ),
    )
    assert deliveries == [("delivered", 1, 204), ("delivered", 1, 204)]
    logged = [r.getMessage() for r in caplog.records if r.name == "gateway.alerts"]
    assert any("reached 80% of its daily budget" in m for m in logged), logged
    assert any("reached 100% of its daily budget" in m for m in logged), logged


def test_a_tenants_cost_thresholds_fire_once_across_its_keys_and_a_failed_delivery_is_retried(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,
) -> None:
    from decimal import Decimal

    from responses_api.models import AlertDelivery, ModelRoute, Tenant
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(
        input_usd_per_million=Decimal("1000"), output_usd_per_million=Decimal("4000")
    )
    routing.clear_cache()

    def back_after_this(call):
        webhook.routes["/alerts"] = Route(status=200)  # this attempt fails; the receiver is back for the next
        return {"error": "down"}

    webhook.routes["/alerts"] = Route(status=503, handler=back_after_this)
    add_webhook(webhook)
    # 10 * 1000 + 5 * 4000 = 30,000 micro-USD = $0.03 a call; the budget $0.10, alerts at 50%.
    scripted.set_default(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    )
    set_fields(Tenant, gateway.tenant_id, budget_period="month", budget_usd=Decimal("0.10"), alert_thresholds=[50])
    other, _ = make_key(name="other")
    assert create(gateway) == 200  # $0.03
    assert create(gateway, other) == 200  # $0.06: 50% crossed, by the other key
    first = wait_for("the first attempt", lambda: webhook.calls_to("/alerts"))
    assert create(gateway) == 200  # $0.09: no threshold left this month
    (delivery,) = wait_for(
        "the retried delivery",
        lambda: (rows := list(AlertDelivery.objects.all())) and rows[0].status == "delivered" and rows,
    )
    assert delivery.attempts == 2 and delivery.response_status == 200 and delivery.error == ""
    calls = webhook.calls_to("/alerts")
    assert len({c.headers["x-gateway-delivery"] for c in calls}) == 1  # one alert, tried again
    event = first[0].json
    assert (event["scope"], event["threshold_percent"], event["api_key"]) == ("tenant", 50, None)
    assert event["budget"] == {"tokens": None, "usd": 0.1} and event["spent"]["usd"] == pytest.approx(0.06)
    assert event["tenant"]["name"] == "acme"


def test_without_a_webhook_a_crossing_is_logged_and_nothing_recorded(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    caplog,
) -> None:
    from responses_api.models import AlertDelivery, Tenant

    scripted.set_default(MODEL, Reply(text="ok", usage={"prompt_tokens": 5, "completion_tokens": 5}))
    set_fields(Tenant, gateway.tenant_id, budget_period="day", budget_tokens=10)
    with caplog.at_level(logging.WARNING, logger="gateway.alerts"):
        assert create(gateway) == 200
        wait_for(
            "the log line",
            lambda: any("reached 100% of its daily budget" in r.getMessage() for r in caplog.records),
        )
    assert AlertDelivery.objects.count() == 0


def test_the_config_file_sets_alert_webhooks_and_thresholds(transactional_db) -> None:
    from responses_api.models import AlertWebhook, ApiKey, Tenant
    from responses_api.ops.config_sync import ConfigError, sync_config
    from responses_api.sealing import decrypt_secret

    make_key(tenant="acme", name="ci")
    config = {
        "tenants": [
            {
                "name": "acme",
                "budget": {"period": "day", "usd": 5, "alert_thresholds": [50, 90, 100]},
                "keys": [{"name": "ci", "budget": {"tokens": 1000}}],
            }
        ],
        "alert_webhooks": [{"name": "ops", "url": "https://hooks.example/gw", "secret": "s3cret"}],
    }
    sync_config(config)
    tenant = Tenant.objects.get(name="acme")
    assert (tenant.budget_period, tenant.alert_thresholds) == ("day", [50, 90, 100])
    key = ApiKey.objects.get(name="ci")
    assert (key.budget_tokens, key.budget_period, key.alert_thresholds) == (1000, "month", [80, 100])
    hook = AlertWebhook.objects.get(name="ops")
    assert hook.url == "https://hooks.example/gw" and decrypt_secret(hook.secret_encrypted) == "s3cret"
    assert hook.config_managed == ["url", "secret"]
    with pytest.raises(ConfigError, match=r"keys\[0\].budget.alert_thresholds"):
        sync_config({"tenants": [{"name": "acme", "keys": [{"name": "ci", "budget": {"alert_thresholds": "80"}}]}]})
    with pytest.raises(ConfigError, match=r"alert_webhooks\[0\]"):
        sync_config({"alert_webhooks": [{"name": "x", "url": "ftp://nope"}]})


def test_the_admin_lists_webhooks_and_deliveries(admin_client, settings, transactional_db) -> None:
    from responses_api.models import AlertDelivery, AlertWebhook

    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    reply = admin_client.post(
        "/admin/responses_api/alertwebhook/add/",
        {"name": "ops", "url": "https://hooks.example/gw", "enabled": "on", "new_secret": "typed-secret"},
    )
    assert reply.status_code == 302, reply.content.decode()[:2000]
    hook = AlertWebhook.objects.get(name="ops")
    assert hook.secret_encrypted and "typed-secret" not in hook.secret_encrypted
    page = admin_client.get(f"/admin/responses_api/alertwebhook/{hook.id}/change/").content.decode()
    assert "typed-secret" not in page
    AlertDelivery.objects.create(
        webhook=hook,
        event={"scope": "key", "api_key": {"name": "ci"}, "threshold_percent": 80, "period": "day"},
        status="delivered",
        attempts=1,
        response_status=200,
    )
    listing = admin_client.get("/admin/responses_api/alertdelivery/").content.decode()
    assert "key ci: 80% of the day budget" in listing
    assert ">ops<" in listing  # the webhook's column


def test_a_budget_raised_mid_period_alerts_at_its_new_thresholds(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,
) -> None:
    from responses_api.models import ApiKey

    webhook.routes["/alerts"] = Route(status=204, body="")
    add_webhook(webhook)
    usage = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage))
    key = key_row(gateway.key)
    set_fields(ApiKey, key.id, budget_period="day", budget_tokens=100, alert_thresholds=[100])
    assert create(gateway) == 200  # 40
    assert create(gateway) == 200  # 80
    assert create(gateway) == 200  # 120: 100% of 100
    wait_for("the first 100% alert", lambda: webhook.calls_to("/alerts"))
    # The operator raises the budget: its own 100% is a new alert in the same period.
    set_fields(ApiKey, key.id, budget_tokens=200)
    assert create(gateway) == 200  # 160
    assert create(gateway) == 200  # 200: 100% of 200
    calls = wait_for(
        "the raised budget's 100% alert",
        lambda: len(webhook.calls_to("/alerts")) >= 2 and webhook.calls_to("/alerts"),
    )
    assert [c.json["budget"]["tokens"] for c in calls] == [100, 200]
    assert [c.json["spent"]["tokens"] for c in calls] == [120, 200]


@pytest.mark.parametrize("broken", ["secret", "url"])
def test_a_delivery_that_cannot_even_be_sent_is_an_attempt_and_fails_at_the_last(
    broken: str,
    transactional_db,
) -> None:
    """A signing secret no listed key opens (SealBroken) or a URL httpx refuses (InvalidURL, no
    HTTPError) escaped deliver_once: the delivery stayed `pending` with 0 attempts for ever."""
    from cryptography.fernet import Fernet

    from responses_api.models import AlertDelivery, AlertWebhook
    from responses_api.orchestration.alerts import deliver_once

    hook = AlertWebhook.objects.create(
        name="ops",
        url="http://[::1/alerts" if broken == "url" else "http://127.0.0.1:9/alerts",
        secret_encrypted=Fernet(Fernet.generate_key()).encrypt(b"dropped-key").decode() if broken == "secret" else "",
    )
    delivery = AlertDelivery.objects.create(webhook=hook, event={"type": "budget.threshold_crossed"})
    assert deliver_once(delivery.pk, final=False) is False
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert ("SealBroken" if broken == "secret" else "InvalidURL") in delivery.error
    assert deliver_once(delivery.pk, final=True) is False
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", 2)


def test_a_delivery_left_pending_is_enqueued_again_by_the_periodic_sweep(
    gateway: Gateway,
    webhook: WebhookServer,
    alert_worker,
    settings,
) -> None:
    """A delivery whose task was lost (a failed enqueue, a worker or process gone) stayed
    pending: beat's task (Celery) and the embedded process's beat re-enqueue it once idle."""
    import asyncio
    from datetime import timedelta

    from django.utils import timezone

    from responses_api.models import AlertDelivery
    from responses_api.orchestration import alerts

    assert settings.CELERY_BEAT_SCHEDULE["requeue-alert-deliveries"]["task"] == "responses_api.requeue_alert_deliveries"
    webhook.routes["/alerts"] = Route(status=204, body="")
    hook = add_webhook(webhook)
    long_ago = timezone.now() - timedelta(hours=1)
    lost = AlertDelivery.objects.create(webhook=hook, event={"type": "budget.threshold_crossed"}, created_at=long_ago)
    recent = AlertDelivery.objects.create(webhook=hook, event={"type": "budget.threshold_crossed"})
    if settings.EMBEDDED_WORKER:  # the web process's beat runs the sweep (and sends, in-process)
        from asgiref.sync import async_to_sync

        from responses_api.orchestration import liveness
        from responses_api.store import db

        settings.GATEWAY_PROCESS_HEARTBEAT_SECONDS = 0.05
        settings.GATEWAY_ALERT_SWEEP_SECONDS = 0.05

        async def beat_until_delivered() -> None:
            task = asyncio.ensure_future(liveness.beat_forever())
            try:
                for _ in range(600):  # generous: the machine may be loaded
                    if await db.run(AlertDelivery.objects.filter(pk=lost.pk, status="delivered").exists):
                        return
                    await asyncio.sleep(0.05)
            finally:
                task.cancel()

        async_to_sync(beat_until_delivered)()
    else:  # what beat's task runs, here in the test process: it enqueues to the Celery worker
        assert asyncio.run(alerts.requeue_stale_deliveries()) == 1
    wait_for(
        "the lost delivery sent",
        lambda: AlertDelivery.objects.filter(pk=lost.pk, status="delivered").exists(),
    )
    assert [c.headers["x-gateway-delivery"] for c in webhook.calls_to("/alerts")] == [str(lost.pk)]
    recent.refresh_from_db()
    assert (recent.status, recent.attempts) == ("pending", 0)  # its own task may still be on its way


def test_an_alert_that_cannot_be_recorded_is_logged_with_its_content_at_error(
    transactional_db,
    monkeypatch,
    caplog,
) -> None:
    """Its threshold is already marked reported for the period: the log is its only record."""
    import asyncio

    from responses_api.orchestration import alerts

    def database_down(**_: object) -> list[int]:
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(alerts, "alert_deliveries_create", database_down)
    event = {"type": "budget.threshold_crossed", "threshold_percent": 80, "spent": {"tokens": 812}}
    with caplog.at_level(logging.ERROR, logger="gateway.alerts"):
        asyncio.run(alerts._record_and_send(event, tenant_id=None, key_id=7))
    (record,) = [r for r in caplog.records if r.name == "gateway.alerts"]
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert "database unavailable" in message and '"threshold_percent": 80' in message and '"key_id": 7' in message
