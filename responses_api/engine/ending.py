"""A run's end when the store refused it: the response still ends (failed or cancelled, without
its items), stored now if the store answers, or by a task that retries until the database is
back (about 90 s; after that the reaper ends the row), so that no row stays open."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .interfaces import Persistence

log = logging.getLogger("gateway.engine")

# Pending retries: the loop holds tasks only weakly.
_retries: set[asyncio.Task[None]] = set()


async def store_failure(persistence: Persistence, response: dict[str, Any], *, upstream: str, started: float) -> None:
    """Store the end now; a database that is down too is logged (the reaper ends the row later)."""
    try:
        await persistence.finish_failed(
            response, upstream=upstream, latency_ms=int((time.monotonic() - started) * 1000)
        )
    except Exception:  # the database itself is down: the reaper ends the row later
        log.exception("response %s: its failure could not be stored either", response["id"])


def store_failure_when_back(
    persistence: Persistence, response: dict[str, Any], *, upstream: str, started: float
) -> None:
    """Store the end from a task of its own, once the database answers again."""
    task = asyncio.ensure_future(_when_back(persistence, response, upstream=upstream, started=started))
    _retries.add(task)
    task.add_done_callback(_retries.discard)


async def _when_back(
    persistence: Persistence, response: dict[str, Any], *, upstream: str, started: float, attempts: int = 20
) -> None:
    delay = 0.5
    for _ in range(attempts):  # about 90 s in all
        await asyncio.sleep(delay)
        try:
            await persistence.finish_failed(
                response, upstream=upstream, latency_ms=int((time.monotonic() - started) * 1000)
            )
            log.warning("response %s: its end is stored now", response["id"])
            return
        except Exception:  # noqa: BLE001 - the store is still down, whatever it raises: try again later
            delay = min(delay * 2, 5.0)
    log.warning("response %s: its failure could not be stored; the reaper will end it", response["id"])
