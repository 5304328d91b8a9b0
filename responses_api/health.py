"""Liveness (`/healthz`) and readiness (`/readyz`: database and, when configured, Redis)."""
from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

from . import db
from .exception_handlers import json_response


async def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_redis() -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


async def readyz(request: HttpRequest) -> HttpResponse:
    checks: dict[str, str] = {}
    healthy = True
    for name, check, enabled in (("database", _check_database, True), ("redis", _check_redis, bool(settings.REDIS_URL))):
        if not enabled:
            checks[name] = "not configured"
            continue
        try:
            await db.run(check)
            checks[name] = "ok"
        except Exception as exc:  # readiness reports any failure, whatever its kind
            checks[name] = f"error: {type(exc).__name__}"
            healthy = False
    return json_response({"status": "ok" if healthy else "unavailable", "checks": checks}, status=200 if healthy else 503)
