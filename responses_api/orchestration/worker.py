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
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

from ..engine.run import ResponseRun
from ..models import Response
from ..protocol.errors import GatewayError, ServerError
from ..protocol.events import EventBuilder, OutputFold, output_from_events
from ..protocol.wirejson import dumpb
from ..store import db, selectors, services
from ..store.eventlog import TERMINAL_TYPES, event_log
from ..store.limit_counters import drain as limits_drain
from .assembly import run_for_job
from .limits import Grant
from .windows import queued_limits

log = logging.getLogger("gateway.background")

# -- the run ---------------------------------------------------------------------


class LogWriter:
    """A run's events into its event log, in order, in batches; an outage of the log delays them
    and never decides the run.

    `append` only queues an event; one flushing task per run writes whatever has queued since
    its last write in one pipeline (store/eventlog.append_many: the XADDs, the running view a
    poll reads, an expiry on the first batch and the last). Events the engine yields together
    (one upstream chunk's) go in one round trip, and while a write is in flight the next batch
    gathers, so a fast run pays a round trip per batch, not per event, and a slow one loses
    nothing by waiting. During an outage of the log the batch is retried with backoff, growing,
    in order (a retry skips what an earlier try wrote); the run goes on meanwhile (its end is
    stored in the database either way, and readers fall back to it: `follow_log`).

    Why batching keeps "nothing a client has seen is lost by a crash": a client sees a
    worker's event only through the log (a resumed or live stream reads it; a poll reads the
    running view, which is written after the events it reflects, in the same ordered pipeline).
    An event still queued here has been seen by nobody, so a crash that loses the queue loses
    only unseen events; the reaper then ends the response from what the log holds
    (`_fail_with_event`), which is everything any reader saw. The terminal event is queued only
    after the engine committed the response to the database (`DatabasePersistence.finish`), so
    a reader who sees the end can retrieve it; `close` waits for the queue to drain."""

    def __init__(self, response_id: str, *, tenant_id: int | None = None, view: dict[str, Any] | None = None) -> None:
        """`view`: the running Response object without output (selectors.response_object_from_row
        of the claimed row); with it and `tenant_id`, each batch also writes the running view."""
        self.response_id = response_id
        self._pending: list[dict[str, Any]] = []
        self._wakeup = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._expiry_set = False  # the log's expiry is set by the first batch written and the last
        self._outage = False
        self._tenant_id = tenant_id
        self._view = view
        self._fold = OutputFold() if view is not None else None
        # A cancel asked for, as the last batch's probe saw it (one command fewer per probe
        # for the run's cancel watch: `_cancel_watch` asks Redis only when no batch did lately).
        self.cancel_seen = False
        self.cancel_checked_at = -1e9

    async def append_all(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            await self.append(event)

    async def append(self, event: dict[str, Any]) -> None:
        self._pending.append(event)
        if self._fold is not None:
            self._fold.feed(event)
        self._wakeup.set()
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_loop())

    def _view_now(self) -> tuple[int, bytes] | None:
        if self._view is None or self._fold is None or self._tenant_id is None:
            return None
        return self._tenant_id, dumpb({**self._view, "output": self._fold.output})

    async def _flush_loop(self) -> None:
        delay = 0.5
        keepalive = settings.GATEWAY_HEARTBEAT_SECONDS
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), keepalive)
                except TimeoutError:  # a quiet run (a long tool call, a slow model): keep its view
                    if self._view is not None and self._expiry_set:
                        with contextlib.suppress(Exception):
                            await event_log().touch_view(self.response_id)
                continue
            batch = list(self._pending)  # and the view after exactly these events (all appended so far)
            view = self._view_now()
            loop = asyncio.get_running_loop()
            probe = loop.time() - self.cancel_checked_at >= CANCEL_PROBE_SECONDS
            try:
                _, cancel = await event_log().append_batch(
                    self.response_id, batch, view=view, expire=not self._expiry_set, probe_cancel=probe
                )
            except Exception as exc:  # noqa: BLE001 - whatever the log's failure, the run goes on
                log.warning(
                    "response %s: the event log refused a batch (%s: %s); %d waiting, retrying",
                    self.response_id,
                    type(exc).__name__,
                    str(exc)[:200],
                    len(self._pending),
                )
                self._outage = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            del self._pending[: len(batch)]
            self._expiry_set = True
            if probe:
                self.cancel_checked_at = loop.time()
                self.cancel_seen = self.cancel_seen or cancel
            delay = 0.5
            if self._outage:
                self._outage = False
                log.warning("response %s: the event log took the events that waited", self.response_id)

    async def close(self, wait: float) -> bool:
        """Wait up to `wait` seconds for what still waits; False if the log never took it (its
        readers then end with the stored state)."""
        self._closing = True
        self._wakeup.set()
        if self._flusher is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self._flusher), wait)
            return True
        except TimeoutError:
            self._flusher.cancel()
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


async def _heartbeat_loop(response_id: str) -> None:
    while True:
        await asyncio.sleep(settings.GATEWAY_HEARTBEAT_SECONDS)
        await db.run(services.response_job_heartbeat, response_id=response_id)


CANCEL_PROBE_SECONDS = 0.2  # how often a run looks for a cancel: its latency, and its Redis cost


async def _cancel_watch(response_id: str, run: ResponseRun, writer: LogWriter | None = None) -> None:
    """Stop the run once a cancel is requested; asks Redis itself only when the run's event
    batches did not (a quiet run): a run streaming tokens learns of it from its writes."""
    loop = asyncio.get_running_loop()
    while True:
        if writer is not None and writer.cancel_seen:
            break
        if writer is None or loop.time() - writer.cancel_checked_at >= CANCEL_PROBE_SECONDS * 2:
            try:
                if await event_log().cancel_requested(response_id):
                    break
                if writer is not None:
                    writer.cancel_checked_at = loop.time()
            except Exception:  # noqa: BLE001 - Redis is down: a cancel cannot arrive meanwhile
                await asyncio.sleep(1.0)
        await asyncio.sleep(CANCEL_PROBE_SECONDS)
    run.request_cancel()


async def run_claimed(response_id: str) -> str:
    """Claim and run one worker-run response to its end. Returns what happened."""
    row = await db.run(services.response_job_claim, response_id=response_id)
    if row is None:
        await reap_one(response_id)
        return "not-claimed"
    try:
        run, opening = await run_for_job(row)
    except GatewayError as exc:
        await _fail_with_event(response_id, exc)
        return "failed"
    heart = asyncio.create_task(_heartbeat_loop(response_id))
    writer = LogWriter(response_id, tenant_id=row.tenant_id, view=selectors.response_object_from_row(row, []))
    watcher = asyncio.create_task(_cancel_watch(response_id, run, writer))
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
    finally:
        await writer.close(settings.GATEWAY_EVENT_LOG_RETRY_SECONDS)
        for task in (watcher, heart):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
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
    await event_log().append_many(response_id, events)  # one round trip; its terminal event drops the view


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
    # 2h and 8h runs wait behind soonest ones by design: each window has its own limit.
    for response_id in await db.run(selectors.response_jobs_stuck_queued, queued_seconds=queued_limits()):
        await _fail_with_event(
            response_id,
            ServerError(
                "No worker started this response within the time its completion window allows; it was not run.",
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
