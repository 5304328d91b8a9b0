"""Budget and limit alerts: when a settle (limits.py) reports that a budget's spend crossed one
of its thresholds (80% and 100% by default) for the first time in its period, or an admission
that a per-minute or concurrency limit's use reached one (or that the limit refused the
request: every threshold up to 100%), a log line, and a signed JSON POST to every enabled
alert webhook, recorded as an AlertDelivery and sent from the worker with retries (Celery, or
an in-process task when embedded). Nothing here runs on a request's path: the settle that
detects a budget crossing runs after the answer; the admission that detects a limit's does so
in the check it makes anyway (the same Redis script call), and hands it to a background task.

Each crossing is reported once, across processes, by a flag set in the same atomic step that
detected it: a budget's once per threshold and period, a limit's once per threshold and
GATEWAY_LIMIT_ALERT_WINDOW_SECONDS (an hour by default: a key kept at its per-minute limit
all day would otherwise alert every minute, and what an operator needs is that it happened,
when, and that it still does an hour later). A flag whose delivery rows could not be created
(the database down) is cleared again, so the next request reaching the threshold reports it.

The signature: `X-Gateway-Signature: sha256=<hex HMAC-SHA256 of the raw body under the
webhook's secret>` (absent without a secret)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from datetime import UTC, datetime
from typing import Any

import httpx
from celery import current_app
from django.conf import settings

from ..sealing import decrypt_secret
from ..store import db
from ..store.alerts import (
    alert_deliveries_claim_stale,
    alert_deliveries_create,
    alert_delivery_attempted,
    alert_delivery_for_sending,
)
from ..store.limit_counters import Crossing, LimitCrossing, limit_flag, limit_store

log = logging.getLogger("gateway.alerts")

# The Celery task that sends one delivery (tasks.deliver_alert), sent by name: the tasks
# module is the worker's entry point, above this layer.
DELIVER_ALERT_TASK = "responses_api.deliver_alert"

_background: set[asyncio.Task[None]] = set()  # the loop holds tasks only weakly


def budget_crossed(*, scope: str, period: str, token_limit: int, micro_usd_limit: int, crossing: Crossing) -> None:
    """A threshold crossed (called from the settle, in an event loop): log it now, record and
    send it in the background."""
    kind, _, ident = scope.partition(":")
    period_id = crossing.key.rsplit(":", 1)[-1]
    spent_usd = crossing.micro_usd / 1_000_000
    log.warning(
        "budget alert: %s %s reached %d%% of its %s budget (%s): %d tokens, $%.4f spent",
        "API key" if kind == "key" else "tenant",
        ident,
        crossing.percent,
        "daily" if period == "day" else "monthly",
        period_id,
        crossing.tokens,
        spent_usd,
    )
    event = {
        "type": "budget.threshold_crossed",
        "threshold_percent": crossing.percent,
        "scope": kind,
        "period": period,
        "period_id": period_id,
        "budget": {
            "tokens": token_limit if token_limit >= 0 else None,
            "usd": micro_usd_limit / 1_000_000 if micro_usd_limit >= 0 else None,
        },
        "spent": {"tokens": crossing.tokens, "usd": spent_usd},
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    # The settle's flag (a field of the period's count): cleared if the alert cannot be recorded.
    flag = (crossing.key, f"alert:{crossing.percent}:{token_limit}:{micro_usd_limit}")
    _spawn(event, kind, ident, flag)


_LIMIT_NAMES = {
    "requests per minute": "requests_per_minute",
    "tokens per minute": "tokens_per_minute",
    "concurrent requests": "concurrent_requests",
}


def limit_crossed(*, scope: str, what: str, limit: int, crossing: LimitCrossing) -> None:
    """A per-minute or concurrency limit's threshold reached (called from the admission, in an
    event loop, rarely: once per threshold and window): log it now, record and send it in the
    background."""
    kind, _, ident = scope.partition(":")
    window = settings.GATEWAY_LIMIT_ALERT_WINDOW_SECONDS
    log.warning(
        "limit alert: %s %s reached %d%% of its %s limit (%d): %d%s; next alert for it in %.0f s at the earliest",
        "API key" if kind == "key" else "tenant",
        ident,
        crossing.percent,
        what,
        limit,
        crossing.used,
        ", and a request was refused" if crossing.refused else "",
        window,
    )
    event = {
        "type": "limit.threshold_crossed",
        "threshold_percent": crossing.percent,
        "scope": kind,
        "limit": _LIMIT_NAMES.get(what, what),
        "value": limit,
        "used": crossing.used,
        "refused": crossing.refused,
        "window_seconds": window,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    key = {"requests per minute": "rpm", "tokens per minute": "tpm", "concurrent requests": "conc"}[what]
    _spawn(event, kind, ident, ("", limit_flag(f"{key}:{scope}", crossing.percent, limit)))


def _spawn(event: dict[str, Any], kind: str, ident: str, flag: tuple[str, str]) -> None:
    task = asyncio.get_running_loop().create_task(
        _record_and_send(
            event,
            tenant_id=int(ident) if kind == "tenant" else None,
            key_id=int(ident) if kind == "key" else None,
            flag=flag,
        )
    )
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _record_and_send(
    event: dict[str, Any], *, tenant_id: int | None, key_id: int | None, flag: tuple[str, str] | None = None
) -> None:
    # The threshold is already flagged reported (in Redis, set where it was detected, so that
    # one request only reports it): an alert not recorded here clears its flag again, so that
    # the next request reaching it reports it, and its content goes to the log at ERROR.
    try:
        ids = await db.run(alert_deliveries_create, event=event, tenant_id=tenant_id, key_id=key_id)
    except Exception as exc:  # noqa: BLE001 - logged with everything the webhook would have had
        cleared = False
        if flag is not None:
            try:
                await limit_store().unflag(*flag)
                cleared = True
            except Exception as unflag_exc:  # noqa: BLE001 - the log below is then its only record
                log.warning("alert flag not cleared: %s: %s", type(unflag_exc).__name__, unflag_exc)
        log.error(
            "alert NOT recorded (its webhooks will not be called%s): %s: %s; the alert: %s",
            "; it is reported again when the next request reaches its threshold" if cleared else "",
            type(exc).__name__,
            exc,
            json.dumps({"tenant_id": tenant_id, "key_id": key_id, **event}, default=str),
        )
        return
    for delivery_id in ids:
        try:
            await enqueue_delivery(delivery_id)
        except Exception as exc:  # noqa: BLE001 - the row stays pending: the sweep sends it later
            log.error(
                "alert delivery %d recorded but not enqueued (re-enqueued by the periodic sweep "
                "after %.0f s): %s: %s; the alert: %s",
                delivery_id,
                stale_after_seconds(),
                type(exc).__name__,
                exc,
                json.dumps({"tenant_id": tenant_id, "key_id": key_id, **event}, default=str),
            )


def stale_after_seconds() -> float:
    """How long a pending delivery may go untried before the sweep re-enqueues it: longer than
    any wait between two attempts of one delivery (so a delivery retrying is never sent twice),
    and at least GATEWAY_ALERT_REQUEUE_SECONDS."""
    longest_wait = retry_delay(settings.GATEWAY_ALERT_RETRIES) + 2 * settings.GATEWAY_ALERT_TIMEOUT_SECONDS + 30
    return max(float(settings.GATEWAY_ALERT_REQUEUE_SECONDS), float(longest_wait))


async def requeue_stale_deliveries() -> int:
    """Deliveries left pending by a lost task (an enqueue that failed, a worker or an embedded
    process that stopped mid-retry), enqueued again: Celery beat's task and the embedded
    process's beat run this periodically. Their number."""
    ids = await db.run(alert_deliveries_claim_stale, idle_seconds=stale_after_seconds())
    for delivery_id in ids:
        await enqueue_delivery(delivery_id)
    if ids:
        log.warning("alert webhooks: re-enqueued %d delivery(ies) left pending", len(ids))
    return len(ids)


async def enqueue_delivery(delivery_id: int) -> None:
    if settings.EMBEDDED_WORKER:
        task = asyncio.get_running_loop().create_task(_deliver_in_process(delivery_id))
        _background.add(task)
        task.add_done_callback(_background.discard)
        return
    await asyncio.to_thread(current_app.send_task, DELIVER_ALERT_TASK, args=(delivery_id,))


def retry_delay(attempt: int) -> float:
    """Seconds before retry `attempt` (0 first): GATEWAY_ALERT_RETRY_SECONDS, doubling, at most 10 minutes."""
    return min(float(settings.GATEWAY_ALERT_RETRY_SECONDS) * 2.0**attempt, 600.0)


async def _deliver_in_process(delivery_id: int) -> None:
    """The embedded worker's sending: as the Celery task, retries with the same backoff."""
    retries = settings.GATEWAY_ALERT_RETRIES
    for attempt in range(retries + 1):
        if await asyncio.to_thread(deliver_once, delivery_id, final=attempt == retries):
            return
        if attempt < retries:
            await asyncio.sleep(retry_delay(attempt))


def deliver_once(delivery_id: int, *, final: bool) -> bool:
    """One attempt (sync: a worker's thread): True when delivered (or nothing is left to
    send), False to try again later. Each attempt is recorded on the delivery."""
    found = alert_delivery_for_sending(delivery_id=delivery_id)
    if found is None:
        return True
    delivery, webhook = found
    status: int | None = None
    # Any failure is an attempt (recorded, retried, failed at the last): a secret no listed key
    # opens (SealBroken) or a URL httpx refuses (InvalidURL, not an HTTPError) left the
    # delivery pending with no attempt, for ever.
    try:
        body = json.dumps({"id": f"alert_{delivery.pk}", **delivery.event}, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "open-responses-gateway-alerts",
            "X-Gateway-Event": str(delivery.event.get("type", "")),
            "X-Gateway-Delivery": str(delivery.pk),
        }
        secret = decrypt_secret(webhook.secret_encrypted) if webhook.secret_encrypted else ""
        if secret:
            headers["X-Gateway-Signature"] = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        reply = httpx.post(webhook.url, content=body, headers=headers, timeout=settings.GATEWAY_ALERT_TIMEOUT_SECONDS)
        status = reply.status_code
        delivered = 200 <= status < 300
        error = "" if delivered else f"HTTP {status}: {reply.text[:500]}"
    except Exception as exc:  # noqa: BLE001 - recorded on the delivery, and logged below
        delivered, error = False, f"{type(exc).__name__}: {exc}"
    alert_delivery_attempted(
        delivery_id=delivery_id, delivered=delivered, final=final, response_status=status, error=error
    )
    if not delivered:
        log.warning(
            "alert webhook %s: delivery %d failed (%s)%s",
            webhook.name,
            delivery_id,
            error,
            "" if final else "; retrying",
        )
    return delivered
