"""Limit alerts: a key's or tenant's per-minute and concurrency limits send the same signed
webhook as budgets (tests/responses_api/test_budget_alerts.py, whose fixtures these reuse)
when their use reaches a threshold (80% and 100% by default; a refusal reaches every one up
to 100%), each threshold of each limit once per GATEWAY_LIMIT_ALERT_WINDOW_SECONDS across
processes, and a log line. Real Redis on the PostgreSQL suite, the in-process counters on the
embedded one; a scripted receiver on loopback. And an alert whose delivery rows cannot be
created is not lost: its flag is cleared, and the next request reaching it reports it again."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from tests.responses_api.test_budget_alerts import (  # noqa: F401 - fixtures used by name
    _fresh_counters,
    add_webhook,
    alert_worker,
    create,
    key_row,
    set_fields,
    wait_for,
)
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.webhook import Route, WebhookServer

pytestmark = pytest.mark.embedded


def _until_refused(gateway: Gateway, at_most: int = 20) -> int:
    """Requests until the first 429 (the bucket refills as they go: which one fills it to a
    threshold is the machine's pace; that the refusal comes, and after how many, is not)."""
    for sent in range(1, at_most + 1):
        status = create(gateway)
        if status == 429:
            return sent
        assert status == 200, status
    raise AssertionError(f"no 429 in {at_most} requests")


def test_a_keys_requests_per_minute_alert_at_80_and_100_once_per_window(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,  # noqa: F811
    caplog,
) -> None:
    from responses_api.models import AlertDelivery, ApiKey

    webhook.routes["/alerts"] = Route(status=204, body="")
    add_webhook(webhook)
    scripted.set_default(MODEL, Reply(text="ok"))
    key = key_row(gateway.key)
    set_fields(ApiKey, key.id, requests_per_minute=5)  # alert_thresholds: the default [80, 100]
    with caplog.at_level(logging.WARNING, logger="gateway.alerts"):
        assert _until_refused(gateway) == 6
        calls = wait_for("both alerts", lambda: len(webhook.calls_to("/alerts")) >= 2 and webhook.calls_to("/alerts"))
        # The limit goes on refusing: within the window, nothing more.
        assert create(gateway) == 429 and create(gateway) == 429
        time.sleep(0.5)
    calls = webhook.calls_to("/alerts")
    assert len(calls) == 2, [c.json for c in calls]
    assert {c.headers["x-gateway-event"] for c in calls} == {"limit.threshold_crossed"}
    first, second = sorted((c.json for c in calls), key=lambda e: e["threshold_percent"])
    assert first["threshold_percent"] == 80 and not first["refused"] and 4 <= first["used"] <= 5
    assert second["threshold_percent"] == 100 and second["refused"]
    for event in (first, second):
        assert (event["scope"], event["limit"], event["value"]) == ("key", "requests_per_minute", 5)
        assert event["api_key"] == {"id": key.id, "name": "test", "prefix": key.prefix}
        assert event["tenant"] == {"id": gateway.tenant_id, "name": "acme"}
        assert event["window_seconds"] == 3600
    wait_for(
        "both delivered",
        lambda: list(AlertDelivery.objects.values_list("status", flat=True)) == ["delivered", "delivered"],
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "gateway.alerts"]
    assert any("reached 80% of its requests per minute limit (5)" in m for m in logged), logged
    assert any("reached 100% of its requests per minute limit (5)" in m and "refused" in m for m in logged), logged


def test_a_limit_alerts_again_once_its_window_is_over(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,  # noqa: F811
    settings,
) -> None:
    from responses_api.models import ApiKey

    settings.GATEWAY_LIMIT_ALERT_WINDOW_SECONDS = 1
    webhook.routes["/alerts"] = Route(status=204, body="")
    add_webhook(webhook)
    scripted.set_default(MODEL, Reply(text="ok"))
    key = key_row(gateway.key)
    set_fields(ApiKey, key.id, requests_per_minute=3, alert_thresholds=[100])
    _until_refused(gateway)
    wait_for("the first alert", lambda: webhook.calls_to("/alerts"))
    time.sleep(1.5)  # the window (1 s) is over; the bucket (3 a minute) is still empty
    assert create(gateway) == 429
    calls = wait_for(
        "the next window's alert", lambda: len(webhook.calls_to("/alerts")) >= 2 and webhook.calls_to("/alerts")
    )
    assert [c.json["threshold_percent"] for c in calls] == [100, 100]


def test_a_tenants_concurrency_alerts_at_each_threshold_once(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,  # noqa: F811
) -> None:
    from responses_api.models import Tenant

    webhook.routes["/alerts"] = Route(status=204, body="")
    add_webhook(webhook)
    set_fields(Tenant, gateway.tenant_id, max_concurrent_requests=2, alert_thresholds=[50, 100])
    scripted.set_default(MODEL, Reply(text="slow " * 40, chunk_chars=5, interval=0.1))  # about 4 s
    opened = threading.Barrier(3)
    statuses: list[int] = []

    def hold_a_stream() -> None:
        with (
            gateway.http(timeout=60) as client,
            client.stream("POST", "/v1/responses", json={"model": MODEL, "input": "x", "stream": True}) as answer,
        ):
            statuses.append(answer.status_code)
            lines = answer.iter_lines()
            for line in lines:
                if "output_text.delta" in line:
                    break
            opened.wait(30)
            for _ in lines:
                pass

    threads = [threading.Thread(target=hold_a_stream, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    opened.wait(30)  # both slots held
    assert create(gateway) == 429  # refused: its thresholds were reported already
    for thread in threads:
        thread.join(60)
    assert statuses == [200, 200]
    calls = wait_for("both alerts", lambda: len(webhook.calls_to("/alerts")) >= 2 and webhook.calls_to("/alerts"))
    time.sleep(0.5)
    calls = webhook.calls_to("/alerts")
    events = sorted((c.json for c in calls), key=lambda e: e["threshold_percent"])
    assert [(e["threshold_percent"], e["used"], e["refused"]) for e in events] == [(50, 1, False), (100, 2, False)]
    for event in events:
        assert (event["scope"], event["limit"], event["value"]) == ("tenant", "concurrent_requests", 2)
        assert event["api_key"] is None and event["tenant"]["name"] == "acme"


def test_an_alert_that_could_not_be_recorded_is_reported_by_the_next_request(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    webhook: WebhookServer,
    alert_worker,  # noqa: F811
    monkeypatch,
    caplog,
) -> None:
    """The flag was set (in Redis) before the delivery rows existed: with the database down at
    that moment the alert was lost for the rest of the period. Now its flag is cleared."""
    from responses_api.models import AlertDelivery, ApiKey
    from responses_api.orchestration import alerts

    real_create = alerts.alert_deliveries_create  # type: ignore[attr-defined]  # the module's own name, patched where it is looked up
    failures: list[int] = []

    def down_once(**kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("database unavailable")
        return real_create(**kwargs)

    monkeypatch.setattr(alerts, "alert_deliveries_create", down_once)
    webhook.routes["/alerts"] = Route(status=204, body="")
    add_webhook(webhook)
    scripted.set_default(MODEL, Reply(text="ok", usage={"prompt_tokens": 30, "completion_tokens": 10}))
    key = key_row(gateway.key)
    set_fields(ApiKey, key.id, budget_period="day", budget_tokens=1000, alert_thresholds=[10])
    caplog.set_level(logging.ERROR, logger="gateway.alerts")
    assert create(gateway) == 200  # 40 tokens: no threshold
    assert create(gateway) == 200  # 80
    assert create(gateway) == 200  # 120: 10% crossed, and its record fails
    wait_for(
        "its flag cleared",
        lambda: any("reported again when the next request" in r.getMessage() for r in caplog.records),
    )
    assert create(gateway) == 200  # 160: reported again, recorded and sent
    (call,) = wait_for("the alert", lambda: webhook.calls_to("/alerts"))
    assert call.json["threshold_percent"] == 10 and call.json["spent"]["tokens"] == 160
    assert AlertDelivery.objects.count() == 1
