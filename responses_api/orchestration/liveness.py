"""Liveness of web processes: a killed web process's work is reaped in seconds, not an hour.

Each web process (uvicorn's, from its lifespan startup) beats every
GATEWAY_PROCESS_HEARTBEAT_SECONDS: a row in WebProcess, and the renewal of the rate-limit leases
(concurrency slots, budget reservations) of the requests it serves, which it takes for
GATEWAY_LEASE_SECONDS only. Its streamed responses carry its id (Response.served_by). At each beat
a process also fails the open responses of processes silent for 3 beats (code `interrupted`) and
forgets them; so does every other live process: reaping needs no particular process, nor beat.
A process killed outright (kill -9, OOM) thus has its rows failed within 4 beats (20 s by
default), and its slots and reservations back within GATEWAY_LEASE_SECONDS (30 s).

An id is host:pid:random: containers sharing a database may reuse pids, and a restarted process
is a new one. The embedded mode's process reaps what its previous run left open at its first beat.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

from django.conf import settings

from ..store import db, services
from .limits import renew_leases_from_now_on, renew_live_leases

log = logging.getLogger("gateway.liveness")

_id: tuple[int, str] | None = None


def process_id() -> str:
    global _id
    pid = os.getpid()
    if _id is None or _id[0] != pid:  # a forked child is a process of its own
        _id = (pid, f"{socket.gethostname()[:80]}:{pid}:{secrets.token_hex(4)}")
    return _id[1]


async def beat_once() -> None:
    interval = settings.GATEWAY_PROCESS_HEARTBEAT_SECONDS
    failed = await db.run(services.web_process_beat, process_id=process_id(), stale_after=3 * interval)
    if failed:
        log.warning("failed %d open responses of web processes that stopped", failed)
    await renew_live_leases()


async def beat_forever() -> None:
    renew_leases_from_now_on()
    while True:
        await asyncio.sleep(settings.GATEWAY_PROCESS_HEARTBEAT_SECONDS)
        try:
            await beat_once()
        except Exception as exc:  # noqa: BLE001 - the next beat tries again
            log.warning("liveness beat failed: %s: %s", type(exc).__name__, str(exc)[:200])
