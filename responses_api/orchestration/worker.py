"""Worker-run responses: claim, run with heartbeat and cancellation, reap the stale (handoff.enqueue hands them here).

The same engine as the web path runs here; its events go to the event log
(store/eventlog.py) instead of a socket. A Celery task calls `run_claimed` in
production; in embedded mode (no REDIS_URL) an asyncio task in the web
process does, so the one-command start keeps the same features.

Crash policy: a run whose worker died (its process's beat silent for 4 x
GATEWAY_HEARTBEAT_SECONDS, or no longer holding it) is ended `failed` with code `worker_lost`; it is
never re-run, because events (and maybe tool calls) of the first run have
already been seen. A redelivered task finds the response no longer queued
and does nothing but this reaping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from django.conf import settings

from ..engine.run import ResponseRun
from ..models import Response
from ..process import process_id
from ..protocol.errors import GatewayError, ServerError
from ..protocol.events import EventBuilder, OutputFold, output_from_events
from ..protocol.wirejson import dumpb
from ..store import db, selectors, services
from ..store.eventlog import TERMINAL_TYPES, Watch, event_log
from ..store.limit_counters import drain as limits_drain
from ..store.outages import database_unreachable, unreachable
from .assembly import run_for_job
from .limits import Grant
from .windows import queued_limits, window_run_seconds

log = logging.getLogger("gateway.background")
T = TypeVar("T")

# -- the run ---------------------------------------------------------------------


class LogWriter:
    """A run's events into its event log, in order, in batches; an outage of the log delays them
    and never decides the run.

    `append` only queues an event; one flushing task per run writes whatever has queued since
    its last write in one command (store/eventlog.append_batch: the XADDs, the running view a
    poll reads when it is due, an expiry on the first batch and the last, the question of who
    looks, below). Events the engine yields together
    (one upstream chunk's) go in one round trip, and while a write is in flight the next batch
    gathers, so a fast run pays a round trip per batch, not per event, and a slow one loses
    nothing by waiting. During an outage of the log the batch is retried with backoff, growing,
    in order (a retry skips what an earlier try wrote); the run goes on meanwhile (its end is
    stored in the database either way, and readers fall back to it: `follow_log`).

    Why batching keeps "nothing a client has seen is lost by a crash": a client sees a
    worker's event only through the log (a resumed or live stream reads it; a poll reads the
    running view, which is written after the events it reflects, in the same command).
    An event still queued here has been seen by nobody, so a crash that loses the queue loses
    only unseen events; the reaper then ends the response from what the log holds
    (`_fail_with_event`), which is everything any reader saw. The terminal event is queued only
    after the engine committed the response to the database (`DatabasePersistence.finish`), so
    a reader who sees the end can retrieve it; `close` waits for the queue to drain.

    The running view goes with the first batch, then at most once per `VIEW_EVERY` seconds: it is
    the whole Response so far, encoded again each time it is written (a long answer's view costs
    more with every token), and a poll is content with output a second old. A view that events
    overtook is written on its own once it is due (or with the next batch then), so a run that
    goes quiet (a tool call, a slow model) still shows all it has said.

    How long a batch waits for the events after it depends on who looks (store/eventlog.Watch,
    asked in each write's own command): a reader following the log live (its mark:
    store/eventlog.READERS_PREFIX), and batches go at once; a poll (its mark, set by each poll that
    finds the view), and a batch waits up to `HOLD_POLLED` seconds from its first event, the pace
    the view is written at anyway; nobody, and it waits up to `HOLD_UNSEEN` seconds (or until
    `HOLD_MAX_EVENTS` wait): a write every ten seconds instead of one per upstream chunk, which
    at a token a second was most of a run's CPU (bench/README.md, "Fourteenth session"). A reader
    or a poll that comes to a run nobody looked at is announced, and the process's one
    subscription tells the run (`_UnseenRuns`), so it writes what it held at once, not after the
    hold. The first batch, the end, `close` and everything after a client's cancel
    (`cancelled`: the web process may end the response from its log) never wait; and events
    held here are events nobody has seen (the crash rule above holds)."""

    VIEW_EVERY = 1.0
    HOLD_POLLED = 1.0
    HOLD_UNSEEN = 10.0
    HOLD_MAX_EVENTS = 256  # a held batch's memory is bounded at any pace (an outage's is not: nothing is taken)

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
        self._fed = 0  # events folded into the view so far
        self._view_fed = 0  # of which the view last written shows
        self._view_written_at: float | None = None  # loop time of the last view the log took
        self._watch = Watch.FOLLOWED  # who looks (asked with each write; as if followed until the first)
        self._told = 0  # how often `watched_by` said someone came (a write's older answer never lowers it)
        self._cancelled = False  # a client's cancel: nothing waits from then on
        self._gave_up = False  # a close stopped waiting for the log and cancelled the flusher
        self._ending = False  # the terminal event is queued
        self._pending_since = 0.0  # loop time of the oldest queued event

    async def append_all(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            await self.append(event)

    async def append(self, event: dict[str, Any]) -> None:
        first = not self._pending
        if first:
            self._pending_since = asyncio.get_running_loop().time()
        self._pending.append(event)
        terminal = event["type"] in TERMINAL_TYPES
        self._ending = self._ending or terminal
        if self._fold is not None:
            self._fold.feed(event)
            self._fed += 1
            if terminal:
                self._fold = None  # the terminal event drops the view: never written after it
        if first or terminal or self._goes_at_once() or len(self._pending) >= self.HOLD_MAX_EVENTS:
            self._wakeup.set()  # else the flusher is holding the batch anyway
        if self._flusher is None:
            _UnseenRuns.of_this_loop().writers[self.response_id] = self  # who comes is told from now on
            self._flusher = asyncio.ensure_future(self._flush_loop())

    def _view_now(self) -> tuple[int, bytes] | None:
        if self._view is None or self._fold is None or self._tenant_id is None:
            return None
        return self._tenant_id, dumpb({**self._view, "output": self._fold.output})

    def quiet_view(self, now: float, seconds: float) -> bool:
        """Whether its view was written and not again for `seconds`: a quiet run (a long tool
        call, a slow model) whose view the process's beat keeps (`_Running._beat_loop`), so that
        a run does not hold a timer of its own."""
        written = self._view_written_at
        return written is not None and not self._closing and now - written >= seconds

    def _view_due_in(self, now: float) -> float | None:
        """Seconds until the view should be written again (0: now); None while it shows every
        event appended (or there is no view)."""
        if self._fold is None or self._fed == self._view_fed:
            return None
        if self._view_written_at is None:
            return 0.0
        return max(0.0, self._view_written_at + self.VIEW_EVERY - now)

    async def _flush_loop(self) -> None:
        delay = 0.5
        loop = asyncio.get_running_loop()
        while True:
            due = self._view_due_in(loop.time())
            if not self._pending:
                if self._closing:
                    return
                self._wakeup.clear()
                if due is None:
                    await self._wakeup.wait()
                    continue
                if due > 0:  # a view events overtook, written on its own unless a batch takes it first
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), due)
                    continue
            elif not (self._goes_at_once() or self._closing or self._ending):
                held_for = self.HOLD_POLLED if self._watch == Watch.POLLED else self.HOLD_UNSEEN
                hold = self._pending_since + held_for - loop.time()
                if hold > 0 and len(self._pending) < self.HOLD_MAX_EVENTS:  # nobody follows live
                    self._wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), hold)
                    continue
            batch = list(self._pending)  # and the view after exactly these events (all appended so far)
            fed = self._fed
            view = self._view_now() if due == 0 else None
            told = self._told
            try:
                _, watch = await event_log().append_batch(
                    self.response_id, batch, view=view, expire=not self._expiry_set, probe_watchers=True
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
            # The write's answer, unless someone came while it was in flight (its answer is older)
            self._set_watch(watch if self._told == told else max(watch, self._watch))
            if self._pending:  # queued while the write was in flight: they gather from now
                self._pending_since = loop.time()
            self._expiry_set = self._expiry_set or bool(batch)
            if view is not None:
                self._view_fed, self._view_written_at = fed, loop.time()
            delay = 0.5
            if self._outage:
                self._outage = False
                log.warning("response %s: the event log took the events that waited", self.response_id)

    def watched_by(self, watch: Watch) -> None:
        """Someone came (a reader or a poll, as `_UnseenRuns` heard): what waits goes as the new
        hold says (at once for a reader)."""
        self._told += 1
        self._set_watch(max(watch, self._watch))

    def cancelled(self) -> None:
        """A client's cancel: what waits goes now, and what comes after it at once (the web
        process ends a cancel the run has not ended from the log: views.ResponseCancelView)."""
        self._cancelled = True
        self._wakeup.set()

    def unseen(self) -> bool:
        return self._watch == Watch.UNSEEN and not (self._closing or self._ending or self._cancelled)

    def _goes_at_once(self) -> bool:
        return self._watch == Watch.FOLLOWED or self._cancelled

    def _set_watch(self, watch: Watch) -> None:
        raised = watch > self._watch
        self._watch = watch
        if self.unseen():
            _UnseenRuns.of_this_loop().listen()
        if raised:
            self._wakeup.set()

    async def close(self, wait: float) -> bool:
        """Wait up to `wait` seconds for what still waits; False if the log never took it (its
        readers then end with the stored state)."""
        self._closing = True
        _UnseenRuns.of_this_loop().discard(self)
        self._wakeup.set()
        if self._flusher is None:
            return True
        if self._gave_up:  # an earlier close cancelled the flusher: awaiting it would raise that
            return not self._pending
        try:
            await asyncio.wait_for(asyncio.shield(self._flusher), wait)
            return True
        except TimeoutError:
            self._flusher.cancel()
            self._gave_up = True
            log.warning(
                "response %s: %d events never reached the event log; readers get the stored end",
                self.response_id,
                len(self._pending),
            )
            return False


class _UnseenRuns:
    """An event loop's open log writers (each from its first event to its close), for its runs
    whose logs nobody looks at. A reader or a poll that comes to one is announced
    (store/eventlog.WATCHED_CHANNEL, as its mark is first set), and one subscription per loop
    (started when a run is first held) hears it for all of them, so the run writes what it held
    at once and an unseen run costs nothing while it waits: asking about each a second cost a worker holding slow runs
    more than their writes did (bench/README.md, "Fifteenth session"). Marks set while the
    subscription was down are asked for, for all of them in one round trip, each time it is up
    again; until then a run learns of them from its next write's answer (within `HOLD_UNSEEN`)."""

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _UnseenRuns] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        # a run that vanished unclosed drops out
        self.writers: weakref.WeakValueDictionary[str, LogWriter] = weakref.WeakValueDictionary()
        self._listening: asyncio.Task[None] | None = None

    @classmethod
    def of_this_loop(cls) -> _UnseenRuns:
        loop = asyncio.get_running_loop()
        runs = cls._of.get(loop)
        if runs is None:
            runs = cls._of[loop] = cls()
        return runs

    def listen(self) -> None:
        if self._listening is None or self._listening.done():
            # It lasts as long as the loop, as the cancel subscription does (_Running._feed_loop).
            self._listening = asyncio.ensure_future(self._listen())

    def discard(self, writer: LogWriter) -> None:
        if self.writers.get(writer.response_id) is writer:
            del self.writers[writer.response_id]

    def _came(self, came: tuple[str, Watch]) -> None:
        response_id, watch = came
        writer = self.writers.get(response_id)
        if writer is not None and watch != Watch.UNSEEN:
            writer.watched_by(watch)  # a write in flight (its older answer) does not undo it

    async def _ask(self) -> None:
        """Who looks at the unseen ones now, in one round trip (marks no announcement reached)."""
        ids = [rid for rid, writer in list(self.writers.items()) if writer.unseen()]
        if ids:
            for came in zip(ids, await event_log().watchers(ids), strict=True):
                self._came(came)

    async def _listen(self) -> None:
        await _keep_subscribed("watch", lambda: event_log().watch_feed(), self._ask, self._came)


async def _keep_subscribed(
    what: str,
    subscribe: Callable[[], AsyncGenerator[T | None, None]],
    up: Callable[[], Awaitable[None]],
    heard: Callable[[T], None],
) -> None:
    """A subscription kept for the loop's life: `up` after each (re)subscription (what was
    published while none was up is only in the keys), `heard` with each message; a lost one is
    subscribed again, with backoff."""
    delay, lost = 0.5, False
    while True:
        feed = subscribe()
        try:
            async for message in feed:
                if message is None:
                    await up()
                    if lost:
                        log.warning("%s subscription up again", what)
                    delay, lost = 0.5, False
                else:
                    heard(message)
        except Exception as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # redis-py may turn a cancel that lands mid-connect into a connection error:
                # the loop is closing (asyncio.run's end), not the subscription failing.
                raise asyncio.CancelledError from exc
            if not lost:
                log.warning("%s subscription lost (%s); subscribing again", what, type(exc).__name__)
            lost = True
        finally:
            await feed.aclose()
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


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


# How often a run looks for a cancel where the event log does not push them (the in-process
# log of embedded mode, where a look is a set lookup); with Redis, cancels arrive on one
# subscription per process (`_Running._feed_loop`).
CANCEL_PROBE_SECONDS = 0.2


def background_run_seconds(response: Response | str) -> float:
    """How long a worker-run response may run (from its claim) before it is ended `failed` with
    code `time_limit_exceeded`: its completion window's limit (windows.window_run_seconds:
    GATEWAY_BACKGROUND_MAX_SECONDS for `soonest`, the window's setting for `2h` and `8h`); the
    broker's visibility timeout derives from the longest (settings.py)."""
    window = response.completion_window if isinstance(response, Response) else "soonest"
    return float(window_run_seconds(window))


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
    """The runs one event loop holds. Their heartbeat is one row per beat for all of them (the
    process's: services.worker_process_beat, which lists them; their own rows are not written),
    the views of the quiet ones are kept by one pipelined PEXPIRE per beat, and cancels reach
    them through one subscription (Redis pub/sub, `EventLog.cancel_feed`) for all: hundreds of
    runs on one loop would otherwise cost hundreds of transactions and Redis round trips a
    second, and a probe of its cancel key per run and tick cost a run a command per event.

    A cancel published while the subscription was down is not lost: its key is the record, and
    every (re)subscription sweeps this loop's runs' keys, as does each beat (one pipelined read:
    the net under a subscription that died silently). A cancel that arrives while a run is
    being claimed or set up waits in `cancelled` for it (`add`)."""

    def __init__(self) -> None:
        self.claiming: set[str] = set()  # its claim is in flight: a cancel for it is kept
        self.beating: set[str] = set()  # claimed here and not ended: the process beats for them
        self.runs: dict[str, ResponseRun] = {}
        self.writers: dict[str, LogWriter] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.stopping: dict[str, GatewayError] = {}  # asked to stop, and why
        self.cancelling: set[str] = set()  # a client asked to cancel them
        self.cancelled: set[str] = set()  # a cancel arrived before its run was added
        self.draining = False
        self._beat: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._drain: asyncio.Task[None] | None = None

    def ours(self) -> set[str]:
        return self.claiming | self.beating | set(self.runs)

    def claiming_now(self, response_id: str) -> None:
        """Before its claim: a cancel that arrives meanwhile is kept for it (a subscription that
        is not up yet sweeps the keys of the claimed ones when it is)."""
        self.claiming.add(response_id)

    def unclaimed(self, response_id: str) -> None:
        """Its claim here did not take it (another worker has it, or had it; or the database was
        away): only the claim in flight is forgotten. The same response may be running on this
        loop from an earlier delivery of its task (the broker's redelivery): its run, its beat
        and its writer stay."""
        self.claiming.discard(response_id)
        if response_id not in self.beating:
            self.cancelled.discard(response_id)

    def claimed(self, response_id: str) -> None:
        """The process beats for it from now on (its setup may wait on the database for a while)."""
        self.beating.add(response_id)
        self.claiming.discard(response_id)
        self._watch_cancels()
        if self._beat is None or self._beat.done():
            self._beat = asyncio.ensure_future(self._beat_loop())

    def add(self, response_id: str, run: ResponseRun, writer: LogWriter) -> None:
        self.runs[response_id] = run
        self.writers[response_id] = writer
        task = asyncio.current_task()
        if task is not None:
            self.tasks[response_id] = task
        self._watch_cancels()
        if response_id in self.cancelled:
            self.cancel(response_id)

    def remove(self, response_id: str) -> None:
        self.claiming.discard(response_id)
        self.beating.discard(response_id)
        self.runs.pop(response_id, None)
        self.writers.pop(response_id, None)
        self.tasks.pop(response_id, None)
        self.stopping.pop(response_id, None)
        self.cancelling.discard(response_id)
        self.cancelled.discard(response_id)

    def stop(self, response_id: str, error: GatewayError) -> None:
        """Ask a run to end `failed` with `error`; cancel its task if it has not ended
        STOP_GRACE_SECONDS later (a tool that ignores cancellation): then run_claimed ends it."""
        run = self.runs.get(response_id)
        if run is None or response_id in self.stopping:
            return
        self.stopping[response_id] = error
        run.request_stop(error)
        asyncio.get_running_loop().call_later(STOP_GRACE_SECONDS, self._cancel_unless_ended, response_id, run)

    def cancel(self, response_id: str) -> None:
        """A client's cancel: the run ends `cancelled`; one still going STOP_GRACE_SECONDS
        later (a tool that ignores cancellation) is cancelled outright and its slot freed."""
        run = self.runs.get(response_id)
        if run is None or response_id in self.cancelling:
            return
        self.cancelling.add(response_id)
        writer = self.writers.get(response_id)
        if writer is not None:
            writer.cancelled()
        run.request_cancel()
        asyncio.get_running_loop().call_later(STOP_GRACE_SECONDS, self._cancel_unless_ended, response_id, run)

    def _cancel_unless_ended(self, response_id: str, run: ResponseRun) -> None:
        task = self.tasks.get(response_id)
        if self.runs.get(response_id) is run and not run.ended and task is not None and not task.done():
            task.cancel()

    def _cancel(self, response_id: str) -> None:
        """A cancel was requested for this response: its run stops, or will when it is added."""
        if response_id in self.runs:
            self.cancel(response_id)
        elif response_id in self.claiming or response_id in self.beating:
            self.cancelled.add(response_id)

    async def _sweep(self) -> None:
        """The cancel keys of all of this loop's runs, in one round trip."""
        ids = sorted(self.ours())
        if ids:
            for response_id in await event_log().cancels_requested(ids):
                self._cancel(response_id)

    async def _beat_loop(self) -> None:
        seconds = settings.GATEWAY_HEARTBEAT_SECONDS
        loop = asyncio.get_running_loop()
        while self.beating:
            await asyncio.sleep(seconds)
            ids = list(self.beating)
            if not ids:
                break
            try:
                # This process's row, with the runs it holds (those of every loop it has: tests
                # run several, whose threads may change them meanwhile: a failed snapshot is a
                # failed beat); the runs' own rows are not written (services.worker_process_beat).
                held = sorted({rid for each in list(_running.values()) for rid in list(each.beating)})
                if db.native_async():
                    await db.fetch_one(*services.worker_beat_statement(worker=process_id(), runs=held))
                else:
                    await db.run(services.worker_process_beat, worker=process_id(), runs=held)
            except Exception as exc:  # noqa: BLE001 - the database is away: beat again next time
                log.warning("heartbeat of %d runs failed (%s)", len(ids), type(exc).__name__)
            now = loop.time()
            quiet = [rid for rid, writer in list(self.writers.items()) if writer.quiet_view(now, seconds)]
            with contextlib.suppress(Exception):  # Redis is away: the views expire, polls read the rows
                await event_log().touch_views(quiet)
            if event_log().pushes_cancels:
                with contextlib.suppress(Exception):  # the net under a subscription that died silently
                    await self._sweep()

    def _watch_cancels(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.ensure_future(self._feed_loop() if event_log().pushes_cancels else self._probe_loop())

    async def _feed_loop(self) -> None:
        """Cancels as they are published; after each (re)subscription, a sweep of the keys (a
        cancel published while no subscription was up). It lasts as long as the loop: a new
        subscription per burst of runs would cost a connection (and a sweep) each time, an idle
        one costs a health-check PING now and then."""
        await _keep_subscribed("cancel", lambda: event_log().cancel_feed(), self._sweep, self._cancel)

    async def _probe_loop(self) -> None:
        """A log that does not push cancels: all runs' keys asked for together, once per tick."""
        while self.runs or self.claiming or self.beating:
            await asyncio.sleep(CANCEL_PROBE_SECONDS)
            try:
                await self._sweep()
            except Exception:  # noqa: BLE001 - the log is away: a cancel cannot arrive meanwhile
                await asyncio.sleep(1.0)

    def drained(self) -> bool:
        """The drain's time is over: a run whose setup ends now is stopped at once."""
        return self.draining and (self._drain is None or self._drain.done())

    def start_drain(self, seconds: float) -> None:
        """No new run starts here; the running ones have `seconds` to end, then are stopped."""
        self.draining = True
        if self._drain is None:
            self._drain = asyncio.ensure_future(self._drain_runs(seconds))

    async def _drain_runs(self, seconds: float) -> None:
        started = time.monotonic()
        log.warning("worker draining: %d background runs; %g s to finish", len(self.beating), seconds)
        # The runs claimed before the signal and still being set up (beating, not yet in
        # `runs`) have the same time as the others: stopping them at once (as this did) failed
        # a run the drain had room for, whenever its setup straddled the signal.
        while self.beating and time.monotonic() - started < seconds:
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
    held.claiming_now(response_id)
    try:
        row = await _once_more_on_lost_connection(_claim, response_id)
    except Exception as exc:
        held.unclaimed(response_id)
        if not unreachable(exc):
            raise
        # The database is away: the row is still queued (or claimed by a statement whose answer
        # was lost: no process beats for that one, and the reaper ends it). The task goes back to the
        # broker, so the run starts when the database returns instead of waiting for the
        # reaper's queue_timeout.
        log.warning("response %s: not claimed, the database is unavailable (%s)", response_id, exc)
        return "database-unavailable"
    except BaseException:
        held.unclaimed(response_id)
        raise
    if row is None:
        held.unclaimed(response_id)
        await reap_one(response_id)
        return "not-claimed"
    held.claimed(response_id)
    limit = background_run_seconds(row)
    try:
        run, opening = await _once_more_on_lost_connection(run_for_job, row)
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
        except Exception:  # noqa: BLE001 - then the reaper ends it (worker_lost): no beat holds it once removed
            log.warning("response %s: could not be ended failed; the reaper will", response_id)
        finally:
            held.remove(response_id)
        return "failed"
    except BaseException:
        held.remove(response_id)
        raise
    writer = LogWriter(response_id, tenant_id=row.tenant_id, view=selectors.response_object_from_row(row, []))
    held.add(response_id, run, writer)
    timer = asyncio.get_running_loop().call_later(limit, held.stop, response_id, time_limit_error(limit))
    if held.drained():  # the drain's time ran out while this run was being set up
        held.stop(response_id, worker_shutdown_error())
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
        # Asked to stop or cancelled and not ending (_Running.stop, .cancel): ended here from its
        # log, as the reaper would. Any other cancellation (the process going away) is left to
        # the reaper.
        error = held.stopping.get(response_id)
        task = asyncio.current_task()
        if (error is None and response_id not in held.cancelling) or run.ended or task is None:
            raise
        task.uncancel()
        await writer.close(1.0)
        if error is None:  # a client's cancel (the web process may have ended it already)
            await _cancel_from_log(response_id)
            return "cancelled"
        await _fail_with_event(response_id, error)
        return "failed"
    finally:
        timer.cancel()
        held.remove(response_id)
        await writer.close(settings.GATEWAY_EVENT_LOG_RETRY_SECONDS)
        await limits_drain()


async def _claim(response_id: str) -> Response | None:
    """`services.response_job_claim`; on PostgreSQL its one statement on this loop (the thread
    hop and Django's raw-query row building were 8.8% of a 2-token run's worker CPU)."""
    if db.native_async():
        statement = services.job_claim_statement(response_id=response_id, worker=process_id())
        return services.claimed_response(await db.fetch_one(*statement))
    return await db.run(services.response_job_claim, response_id=response_id, worker=process_id())


async def _once_more_on_lost_connection(fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """`fn` (a run's claim or its load: safe to repeat), tried once more after a connection error.

    A restart of PostgreSQL or Redis leaves broken connections in this process's pools; the
    first use of each fails and drops it (the web path answers that one request 503 with
    Retry-After, and its client retries). A run's start has no client to retry it: its claim
    raised, leaving the row queued until the reaper's queue_timeout (an hour by default), or its
    load failed the run. The database pools are checked (their broken idle connections
    replaced) before the second try; Redis's clients reconnect on their own."""
    try:
        return await fn(*args, **kwargs)
    except Exception as exc:
        if not unreachable(exc):
            raise
        log.info("a run's start met a lost connection (%s: %s); trying once more", type(exc).__name__, exc)
        if database_unreachable(exc):
            await db.check_pools()
        else:
            await asyncio.sleep(0.2)
        return await fn(*args, **kwargs)


async def _fail_with_event(response_id: str, error: GatewayError) -> None:
    """End an open worker-run response as failed, keeping the output its log shows so far."""
    row = await db.run(selectors.response_get_row, tenant_id=None, response_id=response_id)
    await _end_from_log(row, builder_end=lambda builder: builder.fail(error))  # a run's own error events


async def _end_from_log(row: Response, *, builder_end: Callable[[EventBuilder], list[Any]]) -> None:
    """End `row` from what its event log shows (the reaper's, a stop's and a forced cancel's
    way): its output so far (open items `incomplete`), the terminal state `builder_end` sets and
    the events it returns, stored first; its reservation and concurrency slot given back. A row
    that reached a terminal state meanwhile is left as it is."""
    response_id = row.id
    logged = await event_log().snapshot(response_id)
    output = output_from_events(logged)
    for item in output:
        if item.get("status") == "in_progress":
            item["status"] = "incomplete"
    sequence = (logged[-1]["sequence_number"] + 1) if logged else 0
    builder = EventBuilder(selectors.response_object_from_row(row, output), sequence_number=sequence)
    events = builder_end(builder)
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
    await _append_end(response_id, events)


async def _append_end(response_id: str, events: list[dict[str, Any]]) -> None:
    """The end's events after whatever the log holds: in one round trip (its terminal event drops
    the view and ends the log: store/eventlog.ENDED_PREFIX), again after the log's last event when
    a worker still alive took their sequence numbers meanwhile (it wrote what it held after the
    snapshot); not at all when the log already ended."""
    log_ = event_log()
    for _ in range(5):
        if await log_.append_many(response_id, events) == len(events):
            return
        logged = await log_.snapshot(response_id)
        if logged and logged[-1]["type"] in TERMINAL_TYPES:
            return
        after = logged[-1]["sequence_number"] + 1 if logged else 0
        events = [{**event, "sequence_number": after + n} for n, event in enumerate(events)]
    log.warning("response %s: its end could not be written to its event log; readers get the stored end", response_id)


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
    await db.run(services.worker_processes_forget)  # the processes whose runs were all ended
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
    # The worker did not answer (dead, or stuck in a tool that ignores cancellation): end it
    # here, from its log as the reaper would, so what a reader saw of it is kept.
    await _cancel_from_log(response_id)


async def _cancel_from_log(response_id: str) -> None:
    """End an in-progress worker-run response `cancelled` with the output its log shows, its
    reservation and concurrency slot given back (its worker, if alive, then stores nothing:
    a terminal state is never left)."""
    row = await db.run(selectors.response_get_row, tenant_id=None, response_id=response_id)
    if row.status != Response.Status.IN_PROGRESS:
        return
    await _end_from_log(row, builder_end=_cancelled)


def _cancelled(builder: EventBuilder) -> list[Any]:
    builder.cancel()
    return [builder.cancelled_event()]


async def _log_cancelled(response_id: str) -> None:
    """The log's terminal event for a response cancelled outside its worker."""
    body = await db.run(selectors.response_retrieve, tenant_id=None, response_id=response_id)
    sequence = await event_log().last_sequence_number(response_id) + 1
    await event_log().append(response_id, {"type": "response.failed", "sequence_number": sequence, "response": body})
