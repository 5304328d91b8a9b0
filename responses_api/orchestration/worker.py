"""Worker-run responses: claim, run with heartbeat and cancellation, reap the stale (handoff.enqueue hands them here).

The same engine as the web path runs here; its events go to the event log
(store/eventlog.py) instead of a socket. A Celery task calls `run_claimed` in
production; in embedded mode (no REDIS_URL) an asyncio task in the web
process does, so the one-command start keeps the same features.

Crash policy: a run whose worker died (heartbeat silent for 4 x
GATEWAY_HEARTBEAT_SECONDS) is ended `failed` with code `worker_lost`; it is
never re-run, because events (and maybe tool calls) of the first run have
already been seen. A redelivered task finds the response no longer queued
and does nothing but this reaping.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

from ..engine.run import ResponseRun
from ..models import Response
from ..protocol.errors import GatewayError, ServerError
from ..protocol.events import EventBuilder, output_from_events
from ..store import db, selectors, services
from ..store.eventlog import TERMINAL_TYPES, event_log
from ..store.limit_counters import drain as limits_drain
from .assembly import run_for_job
from .limits import Grant

log = logging.getLogger("gateway.background")

# -- the run ---------------------------------------------------------------------


async def _append_all(response_id: str, events: list[dict[str, Any]]) -> None:
    for event in events:
        await event_log().append(response_id, event)


class LogWriter:
    """A run's events into its event log, in order; an outage of the log delays them and never
    decides the run. Events the log does not take wait here and are written, in order, by a
    retrying task once it is back; the run goes on meanwhile (its end is stored in the database
    either way, and readers fall back to it: `follow_log`)."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self._pending: deque[dict[str, Any]] = deque()
        self._retrying: asyncio.Task[None] | None = None

    async def append_all(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            await self.append(event)

    async def append(self, event: dict[str, Any]) -> None:
        self._pending.append(event)
        if self._retrying is not None:  # behind an outage: keep the order, the task writes it
            return
        if not await self._flush():
            self._retrying = asyncio.ensure_future(self._retry())

    async def _flush(self) -> bool:
        while self._pending:
            try:
                await event_log().append(self.response_id, self._pending[0])
            except Exception as exc:  # noqa: BLE001 - whatever the log's failure, the run goes on
                log.warning(
                    "response %s: the event log refused an event (%s: %s); %d waiting, retrying",
                    self.response_id,
                    type(exc).__name__,
                    str(exc)[:200],
                    len(self._pending),
                )
                return False
            self._pending.popleft()
        return True

    async def _retry(self) -> None:
        delay = 0.5
        while not await self._flush():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        log.warning("response %s: the event log took the events that waited", self.response_id)
        self._retrying = None

    async def close(self, wait: float) -> bool:
        """Wait up to `wait` seconds for what still waits; False if the log never took it (its
        readers then end with the stored state)."""
        if self._retrying is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self._retrying), wait)
            return True
        except TimeoutError:
            self._retrying.cancel()
            log.warning(
                "response %s: %d events never reached the event log; readers get the stored end",
                self.response_id,
                len(self._pending),
            )
            return False


async def follow_log(response_id: str, after: int = -1) -> AsyncIterator[dict[str, Any]]:
    """A worker-run response's events after `after`, live, to the terminal one; an event log
    that is down, lost or silent never leaves a reader waiting on a response that has ended:
    then the stored end closes the stream (its `error` and terminal event, numbered on)."""
    last = after
    while True:
        try:
            async for event in event_log().read(response_id, last, idle_seconds=settings.GATEWAY_EVENT_LOG_IDLE_CHECK):
                last = event["sequence_number"]
                yield event
                if event["type"] in TERMINAL_TYPES:
                    return
        except Exception as exc:  # noqa: BLE001 - the log is unreachable: the row decides
            log.warning("response %s: reading its event log failed (%s)", response_id, type(exc).__name__)
            unreachable = True
        else:
            unreachable = False  # it was silent for a while
        status = await db.run(selectors.response_status, response_id=response_id)
        if status in Response.ENDED:
            for event in await db.run(_stored_end, response_id, last + 1):
                yield event
            return
        if unreachable:
            await asyncio.sleep(1.0)


def _stored_end(response_id: str, sequence_number: int) -> list[dict[str, Any]]:
    """The terminal events of a stored response, as its run would have sent them."""
    response = selectors.response_retrieve(tenant_id=None, response_id=response_id)
    status = response["status"]
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")
    events: list[dict[str, Any]] = []
    error = response.get("error")
    if status == "failed" and error:  # as EventBuilder.fail: OpenAI's flat fields and the nested error
        code, message = error.get("code"), error.get("message")
        nested = {"type": "server_error", "code": code, "message": message, "param": None}
        events.append(
            {
                "type": "error",
                "sequence_number": sequence_number,
                "code": code,
                "message": message,
                "param": None,
                "error": nested,
            }
        )
    events.append({"type": kind, "sequence_number": sequence_number + len(events), "response": response})
    return events


# -- the runs of this process: one heartbeat, one cancel watch, the time limit, the drain ------


def background_run_seconds(response: Response | str) -> float:
    """How long a worker-run response may run (from its claim) before it is ended `failed` with
    code `time_limit_exceeded`. One place, so that a per-response limit (a completion window) is
    one change here; the broker's visibility timeout derives from the longest (settings.py)."""
    return float(settings.GATEWAY_BACKGROUND_MAX_SECONDS)


def time_limit_error(seconds: float) -> ServerError:
    return ServerError(
        f"This background response ran longer than its limit of {seconds:g} s and was stopped.",
        code="time_limit_exceeded",
    )


def worker_shutdown_error() -> ServerError:
    return ServerError(
        "The worker running this response shut down before it ended; create it again.",
        code="server_shutting_down",
    )


# After a run is asked to stop (its time limit, the drain), how long it may take to store its
# end before it is cancelled outright and ended from its log (a tool that ignores cancellation).
STOP_GRACE_SECONDS = 10.0


class _Running:
    """The runs one event loop holds. Their heartbeat is one UPDATE per beat for all of them
    and their cancel watch one pipelined read per tick: hundreds of runs on one loop would
    otherwise cost hundreds of transactions and Redis round trips a second."""

    def __init__(self) -> None:
        self.beating: set[str] = set()  # claimed here and not ended: their rows beat
        self.runs: dict[str, ResponseRun] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.stopping: dict[str, GatewayError] = {}  # asked to stop, and why
        self.draining = False
        self._beat: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._drain: asyncio.Task[None] | None = None

    def claimed(self, response_id: str) -> None:
        """Its row beats from now on (its setup may wait on the database for a while)."""
        self.beating.add(response_id)
        if self._beat is None or self._beat.done():
            self._beat = asyncio.ensure_future(self._beat_loop())

    def add(self, response_id: str, run: ResponseRun) -> None:
        self.runs[response_id] = run
        task = asyncio.current_task()
        if task is not None:
            self.tasks[response_id] = task
        if self._watch is None or self._watch.done():
            self._watch = asyncio.ensure_future(self._watch_loop())

    def remove(self, response_id: str) -> None:
        self.beating.discard(response_id)
        self.runs.pop(response_id, None)
        self.tasks.pop(response_id, None)
        self.stopping.pop(response_id, None)

    def stop(self, response_id: str, error: GatewayError) -> None:
        """Ask a run to end `failed` with `error`; cancel its task if it has not ended
        STOP_GRACE_SECONDS later (a tool that ignores cancellation): then run_claimed ends it."""
        run = self.runs.get(response_id)
        if run is None or response_id in self.stopping:
            return
        self.stopping[response_id] = error
        run.request_stop(error)
        asyncio.get_running_loop().call_later(STOP_GRACE_SECONDS, self._cancel_unless_ended, response_id, run)

    def _cancel_unless_ended(self, response_id: str, run: ResponseRun) -> None:
        task = self.tasks.get(response_id)
        if self.runs.get(response_id) is run and not run.ended and task is not None and not task.done():
            task.cancel()

    async def _beat_loop(self) -> None:
        while self.beating:
            await asyncio.sleep(settings.GATEWAY_HEARTBEAT_SECONDS)
            ids = list(self.beating)
            if not ids:
                break
            try:
                if db.native_async():
                    await db.fetch_one(*services.jobs_heartbeat_statement(response_ids=ids))
                else:
                    await db.run(services.response_jobs_heartbeat, response_ids=ids)
            except Exception as exc:  # noqa: BLE001 - the database is away: beat again next time
                log.warning("heartbeat of %d runs failed (%s)", len(ids), type(exc).__name__)

    async def _watch_loop(self) -> None:
        while self.runs:
            await asyncio.sleep(0.2)
            ids = list(self.runs)
            try:
                cancelled = await event_log().cancels_requested(ids)
            except Exception:  # noqa: BLE001 - Redis is down: a cancel cannot arrive meanwhile
                await asyncio.sleep(1.0)
                continue
            for response_id in cancelled:
                run = self.runs.get(response_id)
                if run is not None:
                    run.request_cancel()

    def start_drain(self, seconds: float) -> None:
        """No new run starts here; the running ones have `seconds` to end, then are stopped."""
        self.draining = True
        if self._drain is None:
            self._drain = asyncio.ensure_future(self._drain_runs(seconds))

    async def _drain_runs(self, seconds: float) -> None:
        started = time.monotonic()
        log.warning("worker draining: %d background runs; %g s to finish", len(self.runs), seconds)
        while self.runs and time.monotonic() - started < seconds:
            await asyncio.sleep(0.2)
        left = list(self.runs)
        for response_id in left:
            self.stop(response_id, worker_shutdown_error())
        log.warning("worker drained in %.1f s (%d runs stopped)", time.monotonic() - started, len(left))


_running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Running] = weakref.WeakKeyDictionary()


def running() -> _Running:
    """This event loop's runs."""
    loop = asyncio.get_running_loop()
    held = _running.get(loop)
    if held is None:
        held = _running[loop] = _Running()
    return held


def start_drain(loop: asyncio.AbstractEventLoop) -> None:
    """Thread-safe (a signal handler's): drain the runs of `loop` for GATEWAY_WORKER_DRAIN_SECONDS."""

    def begin() -> None:
        running().start_drain(settings.GATEWAY_WORKER_DRAIN_SECONDS)

    loop.call_soon_threadsafe(begin)


def draining(loop: asyncio.AbstractEventLoop | None) -> bool:
    held = _running.get(loop) if loop is not None else None
    return held is not None and held.draining


async def run_claimed(response_id: str) -> str:
    """Claim and run one worker-run response to its end. Returns what happened."""
    held = running()
    if held.draining:
        return "draining"  # the caller hands the task back to the broker (tasks.run_response)
    row = await db.run(services.response_job_claim, response_id=response_id)
    if row is None:
        await reap_one(response_id)
        return "not-claimed"
    held.claimed(response_id)
    limit = background_run_seconds(row)
    try:
        run, opening = await run_for_job(row)
    except GatewayError as exc:
        try:
            await _fail_with_event(response_id, exc)
        finally:
            held.remove(response_id)
        return "failed"
    except Exception as exc:  # whatever failed (Redis, the database): the row ends now, not at the reaper's sweep
        log.exception("response %s: its run could not start", response_id)
        try:
            await _fail_with_event(response_id, ServerError(f"The run could not start ({type(exc).__name__})."))
        except Exception:  # noqa: BLE001 - then the reaper ends it (worker_lost) once it stops beating
            log.warning("response %s: could not be ended failed; the reaper will", response_id)
        finally:
            held.remove(response_id)
        return "failed"
    except BaseException:
        held.remove(response_id)
        raise
    held.add(response_id, run)
    timer = asyncio.get_running_loop().call_later(limit, held.stop, response_id, time_limit_error(limit))
    if held.draining:  # it began while this run was being set up
        held.stop(response_id, worker_shutdown_error())
    writer = LogWriter(response_id)
    try:
        if opening == "in_progress":
            await writer.append_all(run.builder.begin())
        try:
            await run.connect()
        except GatewayError:
            await writer.append_all(run.failure_events)
            return "failed"
        async for event in run.events(opening="none"):
            await writer.append(event)
        status: str = run.response["status"]
        return status
    except asyncio.CancelledError:
        # Asked to stop and not ending (_Running.stop): ended here from its log, as the reaper
        # would. Any other cancellation (the process going away) is left to the reaper.
        error = held.stopping.get(response_id)
        task = asyncio.current_task()
        if error is None or run.ended or task is None:
            raise
        task.uncancel()
        await writer.close(1.0)
        await _fail_with_event(response_id, error)
        return "failed"
    finally:
        timer.cancel()
        held.remove(response_id)
        await writer.close(settings.GATEWAY_EVENT_LOG_RETRY_SECONDS)
        await limits_drain()


async def _fail_with_event(response_id: str, error: GatewayError) -> None:
    """End an open worker-run response as failed, keeping the output its log shows so far."""
    row = await db.run(selectors.response_get_row, tenant_id=None, response_id=response_id)
    logged = await event_log().snapshot(response_id)
    output = output_from_events(logged)
    for item in output:
        if item.get("status") == "in_progress":
            item["status"] = "incomplete"
    sequence = (logged[-1]["sequence_number"] + 1) if logged else 0
    builder = EventBuilder(selectors.response_object_from_row(row, output), sequence_number=sequence)
    events = builder.fail(error)  # the same error and response.failed events a run would send
    stored = await db.run(
        services.response_finish,
        tenant_id=row.tenant_id,
        response=builder.response,
        input_items=(row.job or {}).get("input_items", []),
    )
    if not stored:
        return  # it reached a terminal state meanwhile
    grant = Grant.from_job((row.job or {}).get("limits"))
    if grant is not None:  # the run never reached its end: its reservation and lease go back
        await grant.end(None)
        await limits_drain()
    await _append_all(response_id, events)


# -- reaping -----------------------------------------------------------------------


async def reap_one(response_id: str) -> bool:
    if not await db.run(selectors.response_job_is_stale, response_id=response_id):
        return False
    await _fail_with_event(
        response_id, ServerError("The worker running this response stopped; it was not completed.", code="worker_lost")
    )
    return True


async def reap_stale() -> int:
    reaped = await db.run(services.response_fail_abandoned_foreground)
    for response_id in await db.run(selectors.response_jobs_stale):
        reaped += await reap_one(response_id)
    for response_id in await db.run(selectors.response_jobs_stuck_queued):
        await _fail_with_event(
            response_id,
            ServerError(
                f"No worker started this response within {settings.GATEWAY_QUEUED_MAX_SECONDS:g} s; it was not run.",
                code="queue_timeout",
            ),
        )
        reaped += 1
    return reaped


# -- cancelling --------------------------------------------------------------------


async def cancel_background(response_id: str, wait: float = 3.0) -> None:
    """Idempotent: a queued run is cancelled at once; a running one is asked to stop and waited for."""
    if await db.run(services.response_cancel_queued, response_id=response_id):
        await _log_cancelled(response_id)
        return
    status = await db.run(selectors.response_status, response_id=response_id)
    if status != Response.Status.IN_PROGRESS:
        return  # already terminal: a cancel changes nothing
    await event_log().request_cancel(response_id)
    deadline = asyncio.get_running_loop().time() + wait
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        if await db.run(selectors.response_status, response_id=response_id) != Response.Status.IN_PROGRESS:
            return
    # The worker did not answer (dead, or stuck outside the engine): end it here.
    if await db.run(services.response_force_cancel, response_id=response_id):
        await _log_cancelled(response_id)


async def _log_cancelled(response_id: str) -> None:
    """The log's terminal event for a response cancelled outside its worker."""
    body = await db.run(selectors.response_retrieve, tenant_id=None, response_id=response_id)
    sequence = await event_log().last_sequence_number(response_id) + 1
    await event_log().append(response_id, {"type": "response.failed", "sequence_number": sequence, "response": body})
