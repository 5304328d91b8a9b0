"""Celery tasks (thin: take ids, call orchestration/worker.py); orchestration/handoff.py enqueues them.

Each worker process keeps one event loop in a thread (created lazily, after
any fork), so that a task reuses warm DB threads, the upstream HTTP client and
the Redis client instead of building them per task. The worker runs Celery's
threads pool (settings.CELERY_WORKER_POOL): each of its GATEWAY_WORKER_CONCURRENCY
threads waits on that one loop while its run goes on there, so one process holds
hundreds of runs (docs/architecture.md, "Background runs").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from celery import shared_task
from celery.exceptions import Reject, SoftTimeLimitExceeded
from celery.signals import worker_shutting_down
from django.conf import settings

from .orchestration.alerts import deliver_once, requeue_stale_deliveries, retry_delay
from .orchestration.vector_stores import ingest
from .orchestration.worker import draining, reap_stale, run_claimed, start_drain
from .store.services import retention_run

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()

T = TypeVar("T")


def _worker_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            _loop = _new_loop()
            # The runs' database work (db.run) goes through this executor: as many threads as
            # the pool has connections (asyncio's default is cpu_count + 4, 6 on two cores, a
            # queue for hundreds of runs starting at once), never more (they would wait on it).
            pool = (settings.DATABASES["default"].get("OPTIONS", {}).get("pool") or {}).get("max_size", 0)
            if isinstance(pool, int) and pool > 0:
                _loop.set_default_executor(ThreadPoolExecutor(max_workers=pool, thread_name_prefix="gateway-db"))
            threading.Thread(target=_loop.run_forever, name="gateway-worker-loop", daemon=True).start()
        return _loop


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop, as uvicorn gives the web processes: a run is mostly I/O round trips (the
    upstream's chunks, the event log's writes, the database's answers), each cheaper on it;
    asyncio's own loop where uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_on_worker_loop(coro: Coroutine[Any, Any, T]) -> T:
    future: Future[T] = asyncio.run_coroutine_threadsafe(coro, _worker_loop())
    try:
        return future.result()
    except SoftTimeLimitExceeded:
        future.cancel()  # stop the coroutine too, not just this thread's wait
        raise


@shared_task(name="responses_api.run_response", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_response(response_id: str) -> str:
    if draining(_loop):
        raise Reject("this worker is shutting down", requeue=True)  # another worker claims it
    outcome = run_on_worker_loop(run_claimed(response_id))
    if outcome == "draining":  # the drain began between the check above and the claim
        raise Reject("this worker is shutting down", requeue=True)
    if outcome == "database-unavailable":  # still queued: claimed once the database is back
        time.sleep(1.0)  # this pool thread's own pause: a redelivery is not a busy loop
        raise Reject("the database is unavailable", requeue=True)
    return outcome


@worker_shutting_down.connect
def _drain_runs(**_: object) -> None:
    """SIGTERM (Celery's warm shutdown, which then waits for the pool's threads): no run is
    claimed from now on, and the running ones have GATEWAY_WORKER_DRAIN_SECONDS to end."""
    start_drain(_worker_loop())


@shared_task(name="responses_api.reap_stale_responses", ignore_result=True)
def reap_stale_responses() -> int:
    return run_on_worker_loop(reap_stale())


@shared_task(name="responses_api.expire_responses", ignore_result=True)
def expire_responses() -> dict[str, Any]:
    return retention_run()


@shared_task(name="responses_api.deliver_alert", bind=True, acks_late=True, ignore_result=True)
def deliver_alert(self, delivery_id: int) -> None:  # type: ignore[no-untyped-def]  # Celery's bound task
    """One alert (a budget's or a limit's) to one webhook; retried with backoff (GATEWAY_ALERT_RETRIES times)."""
    retries = settings.GATEWAY_ALERT_RETRIES
    if not deliver_once(delivery_id, final=self.request.retries >= retries):
        raise self.retry(countdown=retry_delay(self.request.retries), max_retries=retries)


@shared_task(name="responses_api.requeue_alert_deliveries", ignore_result=True)
def requeue_alert_deliveries() -> int:
    """Beat's sweep: alert deliveries a lost task left pending, enqueued again."""
    return int(run_on_worker_loop(requeue_stale_deliveries()))


@shared_task(
    name="responses_api.ingest_vector_store_file", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def ingest_vector_store_file(row_id: int) -> str:
    """One file attached to a vector store: extracted, chunked, embedded (orchestration/vector_stores.py)."""
    return run_on_worker_loop(ingest(row_id))
