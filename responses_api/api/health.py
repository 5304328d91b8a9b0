"""Liveness (`/healthz`), readiness (`/readyz`: database and, when configured, Redis), and the
Prometheus scrape (`/metrics`: the counts of observability/metrics.py and the background queue,
read from the database)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.log import log_response
from prometheus_client.core import GaugeMetricFamily

from ..observability.metrics import exposition
from ..orchestration import lifecycle
from ..protocol.request import COMPLETION_WINDOWS
from ..store import db, selectors
from ..store.redis_clients import ping
from .exception_handlers import json_response


async def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"status": "ok"})


def _check_database() -> None:
    selectors.database_ping()


def _check_redis() -> None:
    ping(settings.REDIS_URL)  # the process's own client: a probe opens no connection of its own


async def readyz(request: HttpRequest) -> HttpResponse:
    if lifecycle.draining():  # SIGTERM: a load balancer stops sending here while streams end
        response = json_response({"status": "draining", "checks": {}}, status=503)
        # Expected, and asked every few seconds by each probe while the drain lasts: INFO, not
        # the ERROR django.request gives every 5xx (log_response marks it logged).
        log_response("Draining: %s", request.path, response=response, request=request, level="info")
        return response
    checks: dict[str, str] = {}
    healthy = True
    for name, check, enabled in (
        ("database", _check_database, True),
        ("redis", _check_redis, bool(settings.REDIS_URL)),
    ):
        if not enabled:
            checks[name] = "not configured"
            continue
        try:
            await db.run(check)
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - readiness reports any failure, whatever its kind
            checks[name] = f"error: {type(exc).__name__}"
            healthy = False
    return json_response(
        {"status": "ok" if healthy else "unavailable", "checks": checks}, status=200 if healthy else 503
    )


class BackgroundQueue:
    """Background work, read from the database at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.time()
        queued, running = selectors.background_queue()
        # By completion window: a 2h or 8h run waits behind the soonest ones by design (for up
        # to its window), so one series for all of them would page an operator for nothing.
        count = GaugeMetricFamily(
            "gateway_background_queued", "Background responses waiting for a worker.", labels=["window"]
        )
        oldest = GaugeMetricFamily(
            "gateway_background_oldest_queued_seconds", "Age of the oldest queued one.", labels=["window"]
        )
        for window in COMPLETION_WINDOWS:
            waiting = queued.get(window)
            count.add_metric([window], waiting["n"] if waiting else 0)
            oldest.add_metric([window], now - waiting["oldest"].timestamp() if waiting else 0)
        yield count
        yield oldest
        yield GaugeMetricFamily(
            "gateway_background_running", "Background responses a worker runs now.", value=running["n"]
        )
        yield GaugeMetricFamily(
            "gateway_worker_heartbeat_age_seconds",
            "Seconds since the freshest heartbeat of a running background response.",
            value=now - running["beat"].timestamp() if running["beat"] else 0,
        )


async def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition for holders of GATEWAY_METRICS_TOKEN; a 404 when none is set."""
    token = settings.GATEWAY_METRICS_TOKEN
    if not token:
        return json_response(
            {"error": {"message": "Not found.", "type": "invalid_request_error", "param": None, "code": "not_found"}},
            status=404,
        )
    if not hmac.compare_digest(request.headers.get("authorization", "").encode(), f"Bearer {token}".encode()):
        return json_response(
            {
                "error": {
                    "message": "Send the metrics token as 'Authorization: Bearer <token>'.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
            status=401,
        )
    body, content_type = await db.run(exposition, BackgroundQueue())
    return HttpResponse(body, content_type=content_type)
