"""Liveness of web processes: a killed web process's work is reaped in seconds, not an hour.

Each web process (uvicorn's, from its lifespan startup) beats every
GATEWAY_PROCESS_HEARTBEAT_SECONDS: a row in WebProcess, and the renewal of the rate-limit leases
(concurrency slots, budget reservations) of the requests it serves, which it takes for
GATEWAY_LEASE_SECONDS only. Its streamed responses carry its id (Response.served_by). At each beat
a process also fails the open responses of processes silent for 3 beats (code `interrupted`) and
forgets them; so does every other live process: reaping needs no particular process, nor beat.
A process killed outright (kill -9, OOM) thus has its rows failed within 4 beats (20 s by
default), and its slots and reservations back within GATEWAY_LEASE_SECONDS (30 s).

Every GATEWAY_REAPER_INTERVAL_SECONDS each web process also runs the worker runs' reaper
(worker.reap_stale: runs whose worker stopped heartbeating, queued runs no worker
took), which Celery beat schedules on a worker too: with the only worker or beat dead, the rows
clients poll still end; and it enqueues again the vector store files whose ingestion was lost
(vector_stores.requeue_stale_ingestions). Reaping is idempotent (a row is finished once), so several processes
sweeping at once only repeat a cheap query.

In the embedded mode (no Redis, no Celery beat) the process also runs retention
(services.retention_run) every GATEWAY_RETENTION_INTERVAL_SECONDS, and re-enqueues the alert
deliveries left pending (alerts.requeue_stale_deliveries) every GATEWAY_ALERT_SWEEP_SECONDS, as beat
does otherwise.

An id is host:pid:random (responses_api/process.py): containers sharing a database may reuse
pids, and a restarted process is a new one. The embedded mode's process reaps what its previous run left open at its first beat.
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings

from ..observability.metrics import forget_processes
from ..process import process_id
from ..store import db, services
from .alerts import requeue_stale_deliveries
from .limits import renew_leases_from_now_on, renew_live_leases
from .vector_stores import requeue_stale_ingestions
from .worker import reap_stale

log = logging.getLogger("gateway.liveness")


async def beat_once() -> None:
    interval = settings.GATEWAY_PROCESS_HEARTBEAT_SECONDS
    failed, dead = await db.run(services.web_process_beat, process_id=process_id(), stale_after=3 * interval)
    if failed:
        log.warning("failed %d open responses of web processes that stopped", failed)
    if dead:
        forget_processes(dead)
    await renew_live_leases()


async def expire_if_due() -> None:
    """Retention in the embedded mode, where no Celery beat runs it: due when its last run (any
    process's, recorded in the database) is older than GATEWAY_RETENTION_INTERVAL_SECONDS."""
    interval = settings.GATEWAY_RETENTION_INTERVAL_SECONDS
    if await db.run(services.retention_due, interval_seconds=interval):
        counts = await db.run(services.retention_run)
        if any(counts.values()):
            log.info("retention deleted %d responses and %d items", counts["responses"], counts["items"])


async def beat_forever() -> None:
    renew_leases_from_now_on()
    reaped_at = swept_at = 0.0
    while True:
        await asyncio.sleep(settings.GATEWAY_PROCESS_HEARTBEAT_SECONDS)
        try:
            await beat_once()
            now = asyncio.get_running_loop().time()
            if now - reaped_at >= settings.GATEWAY_REAPER_INTERVAL_SECONDS:
                # Worker runs whose worker died, and queued ones no worker took: Celery beat's
                # reaper does this on a worker too, but that worker and beat may be the ones
                # that died, and every web process is alive while clients wait on those rows.
                reaped_at = now
                reaped = await reap_stale()
                if reaped:
                    log.warning("failed %d responses whose worker stopped or never started them", reaped)
                requeued = await requeue_stale_ingestions()
                if requeued:
                    log.warning("enqueued again %d vector store files whose ingestion was lost", requeued)
            if settings.EMBEDDED_WORKER:
                await expire_if_due()
                if now - swept_at >= settings.GATEWAY_ALERT_SWEEP_SECONDS:
                    # Alert deliveries an earlier process (or a failed enqueue) left pending:
                    # beat's `requeue-alert-deliveries` does this where Celery runs.
                    swept_at = now
                    await requeue_stale_deliveries()
        except Exception as exc:  # noqa: BLE001 - the next beat tries again
            log.warning("liveness beat failed: %s: %s", type(exc).__name__, str(exc)[:200])
