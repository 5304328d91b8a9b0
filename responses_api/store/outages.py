"""Outages of what the gateway stands on (PostgreSQL, Redis as event log and broker) are a
503 with Retry-After, never a 500: the request was fine and will work again soon.

The bound on how long a request waits before it is answered so: a new database connection
gets `DB_CONNECT_TIMEOUT`, a pooled one `DB_POOL_TIMEOUT`; Redis commands retry briefly with
`socket_connect_timeout` (eventlog.py), the broker with Celery's publish retry policy.
"""

from __future__ import annotations

import logging

from django.db import utils

from ..protocol.errors import GatewayError
from .db import check_pools_soon

log = logging.getLogger("gateway.outages")

RETRY_AFTER_SECONDS = 2


class ServiceUnavailable(GatewayError):
    status = 503
    error_type = "server_error"
    default_code = "service_unavailable"


def _database_errors() -> tuple[type[BaseException], ...]:
    import psycopg

    return (utils.OperationalError, utils.InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


def _redis_errors() -> tuple[type[BaseException], ...]:
    import kombu.exceptions
    import redis.exceptions

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, kombu.exceptions.OperationalError)


_errors: dict[str, tuple[type[BaseException], ...]] = {}


def database_unreachable(exc: BaseException) -> bool:
    """Whether `exc` means the database cannot be reached (as `unavailable` tells, without its log line)."""
    return isinstance(exc, _database_errors())


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` means the database or Redis cannot be reached (a connection lost or refused)."""
    return isinstance(exc, _database_errors() + _redis_errors())


def unavailable(exc: BaseException) -> ServiceUnavailable | None:
    """The 503 for an exception that means the database or Redis is unreachable; else None."""
    if not _errors:
        _errors["the database"] = _database_errors()
        _errors["the event log or queue (Redis)"] = _redis_errors()
    for what, kinds in _errors.items():
        if isinstance(exc, kinds):
            log.warning("%s is unavailable: %s: %s", what, type(exc).__name__, str(exc)[:300])
            if what == "the database":  # a restart broke every pooled connection, not just this one
                check_pools_soon()
            return ServiceUnavailable(
                f"The gateway cannot reach {what} right now; retry in a few seconds.",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
    return None
