"""Liveness (`/healthz`) and readiness (`/readyz`: database and, when configured, Redis)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

from ..observability.metrics import exposition
from ..orchestration import lifecycle
from ..store import db
from ..store.redis_clients import ping
from .exception_handlers import json_response


async def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_redis() -> None:
    ping(settings.REDIS_URL)  # the process's own client: a probe opens no connection of its own


async def readyz(request: HttpRequest) -> HttpResponse:
    if lifecycle.draining():  # SIGTERM: a load balancer stops sending here while streams end
        return json_response({"status": "draining", "checks": {}}, status=503)
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
    body, content_type = await db.run(exposition)
    return HttpResponse(body, content_type=content_type)
