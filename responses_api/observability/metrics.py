"""Prometheus metrics, served at /metrics to holders of GATEWAY_METRICS_TOKEN (404 without
one configured: not public by default).

Several processes (uvicorn workers, Celery) each count their own; with PROMETHEUS_MULTIPROC_DIR
set in their environment the scrape sums them all, whichever process answers it. Each process
writes its own files there, named by host, pid and a random part (`process_identifier`): web and
worker containers sharing one directory have pid namespaces of their own, so a pid alone would
collide. A web process killed outright leaves its live gauges behind: the live processes'
liveness beat removes them. The queue and worker figures are read from the database at scrape
time (api/health.py), so they are the same whichever process answers.

The directory is never emptied by a deployment step (that lost every count at each
`docker compose up`, and a running process went on writing into files nobody read): each
process instead holds an exclusive `flock` on a file of its own there (`proc_<id>.lock`) for its
lifetime, which the kernel releases however it ends (kill -9 included), and every process
starting sweeps the files of those that ended (`sweep_dead`): their counters and histograms are
added into one `<type>_archive.db` file per type, so the sums never go down (a sum that drops is
a counter reset to Prometheus, and `rate()` would show a spike), and their gauges (all
`livesum`: what is open now) are dropped. The directory thus holds the live processes' files
plus one archive per type, however many processes came and went. A lock over the whole
directory (`sweep.lock`: exclusive while sweeping, shared while a scrape reads) keeps a scrape
from seeing a dead process's counts both in its file and in the archive, or in neither.

`METRICS` is the one list of what is exposed: the single-process exposition registers it,
and the multi-process one lists every family of it too, even before any process counted."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from typing import Any

from django.conf import settings

from ..process import process_id

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # before prometheus_client reads it: writes go there
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

from prometheus_client import values


def process_identifier() -> str:
    """This process in the shared metrics directory: its liveness id (host name, pid and a
    random part: a container's host name is its own, and a pid reused later on one host is
    another process, whose gauges must not start from a dead one's). prometheus_client splits
    file names on '_', so none may be in it. prometheus_client asks for it before it creates a
    file, and again in a forked child: the first call in a process claims the id (its lock)."""
    liveness_id = process_id()
    # Called at every count (prometheus_client's fork check): one comparison once claimed (the
    # same string object while the pid is the same; a forked child gets a new one).
    if _claimed is None or _claimed[0] is not liveness_id:
        _claim(liveness_id)
    return metrics_identifier(liveness_id)


log = logging.getLogger("gateway.metrics")

ARCHIVE = "archive"  # the id of the files dead processes' counts are added into
_claimed: tuple[str, int] | None = None  # (liveness id, fd of its held lock file; -1: none)


def _claim(liveness_id: str) -> None:
    """Hold this process's lock file for as long as it lives, then sweep the files of the
    processes that ended. Under the directory lock: a sweep never sees this process's files
    before its lock is held."""
    global _claimed
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if _claimed is not None and _claimed[1] >= 0:
        # A forked child: the parent's lock is shared with it (one open file); closing the
        # child's copy leaves the parent holding it, and the parent's end then releases it.
        with contextlib.suppress(OSError):
            os.close(_claimed[1])
    _claimed = (liveness_id, -1)  # tried once per process, claimed or not
    identifier = metrics_identifier(liveness_id)
    if not directory:
        return
    try:
        os.makedirs(directory, exist_ok=True)
        with _directory_lock(directory, fcntl.LOCK_EX):
            fd = os.open(os.path.join(directory, f"proc_{identifier}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _claimed = (liveness_id, fd)
            _sweep_locked(directory, identifier)
    except Exception as exc:  # noqa: BLE001 - counting goes on; the files stay for a later sweep
        log.warning("metrics directory %s: could not claim or sweep: %s: %s", directory, type(exc).__name__, exc)


@contextlib.contextmanager
def _directory_lock(directory: str, mode: int) -> Iterator[None]:
    fd = os.open(os.path.join(directory, "sweep.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock


def sweep_dead(directory: str) -> list[str]:
    """The ids of the processes whose files this sweep archived (their lock is free: they ended)."""
    with _directory_lock(directory, fcntl.LOCK_EX):
        return _sweep_locked(directory, _claimed_identifier())


def _claimed_identifier() -> str:
    return metrics_identifier(_claimed[0]) if _claimed is not None and _claimed[0] is process_id() else ""


def _sweep_locked(directory: str, own: str) -> list[str]:
    from prometheus_client.mmap_dict import MmapedDict

    _recover(directory)
    names = os.listdir(directory)
    files: dict[str, list[str]] = {}  # id -> its .db files
    for name in names:
        if name.endswith(".db"):
            ident = name[: -len(".db")].rsplit("_", 1)[-1]
            if ident not in (ARCHIVE, own):
                files.setdefault(ident, []).append(name)
    locks = {
        name[len("proc_") : -len(".lock")] for name in names if name.startswith("proc_") and name.endswith(".lock")
    }
    dead: list[tuple[str, int | None]] = []
    for ident in sorted((set(files) | locks) - {own}):
        fd: int | None = None
        if ident in locks:
            fd = os.open(os.path.join(directory, f"proc_{ident}.lock"), os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held: alive
                os.close(fd)
                continue
        # No lock file at all: written by a version that kept none, or a process whose claim
        # failed; nothing can tell whether it lives, and such files were always emptied at
        # deployment: archived as well.
        dead.append((ident, fd))
    if not dead:
        return []
    # Counters, histograms and summaries add up: into the archive of their type. Gauges are
    # what a process has open now (every gauge here is a `livesum` one): dropped.
    by_type: dict[str, list[str]] = {}
    for ident, _ in dead:
        for name in files.get(ident, ()):
            typ = name.split("_", 1)[0]
            if typ in ("counter", "histogram", "summary"):
                by_type.setdefault(typ, []).append(name)
    for typ, merged in by_type.items():
        # One type at a time, crash-safe: the new archive is written aside, the files it
        # absorbs are listed in a journal, the rename over the archive commits, then they go.
        # A sweep that died half-way is finished or undone by the next one (`_recover`): a
        # count is never in both the archive and its file, nor in neither.
        archive = os.path.join(directory, f"{typ}_{ARCHIVE}.db")
        totals: dict[str, float] = {}
        for path in [archive, *(os.path.join(directory, name) for name in merged)]:
            with contextlib.suppress(FileNotFoundError):
                for key, value, _, _ in MmapedDict.read_all_values_from_file(path):
                    totals[key] = totals.get(key, 0.0) + value
        staged, journal = archive + ".new", os.path.join(directory, f"{typ}.journal")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
        out = MmapedDict(staged)
        try:
            for key, value in totals.items():
                out.write_value(key, value, 0.0)
        finally:
            out.close()
        with open(journal + ".new", "w") as listing:
            listing.write("\n".join(merged))
        os.replace(journal + ".new", journal)
        os.replace(staged, archive)  # the commit
        _absorbed(directory, journal)
    for ident, fd in dead:
        for name in files.get(ident, ()):  # the gauges (the others went with their journal)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
        if fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, f"proc_{ident}.lock"))
            os.close(fd)
    return [ident for ident, _ in dead]


def _absorbed(directory: str, journal: str) -> None:
    """The archive has the journal's files' counts: they go, then the journal."""
    with open(journal) as listing:
        for name in filter(None, listing.read().split("\n")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
    os.unlink(journal)


def _recover(directory: str) -> None:
    """A sweep that died half-way: its archive renamed (the staged file gone) is committed, and
    its journal's files go now; not renamed, it is undone (its files are swept again)."""
    names = os.listdir(directory)
    for name in names:  # journals first: a staged archive tells whether its rename happened
        if name.endswith(".journal"):
            path = os.path.join(directory, name)
            staged = os.path.join(directory, f"{name.removesuffix('.journal')}_{ARCHIVE}.db.new")
            if os.path.exists(staged):
                os.unlink(staged)
                os.unlink(path)
            else:
                _absorbed(directory, path)
    for name in names:  # what a sweep was writing when it died
        if name.endswith((".db.new", ".journal.new")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def metrics_identifier(liveness_id: str) -> str:
    return liveness_id.replace(":", "-").replace("_", "-")


def forget_processes(liveness_ids: list[str]) -> None:
    """Web processes found dead (killed: they never ran `process_exit`): their live gauges
    (open streams, open WebSockets) leave the sums; their counters stay, they were counted."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        for liveness_id in liveness_ids:
            # Every live process sweeps: another may have removed the files a moment ago.
            with contextlib.suppress(FileNotFoundError):
                multiprocess.mark_process_dead(metrics_identifier(liveness_id))


if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Before any metric is made (the value class is fixed when it is). Called again after a
    # fork, which prometheus_client notices and then starts the child's own files.
    values.ValueClass = values.MultiProcessValue(process_identifier)

from prometheus_client import (  # noqa: E402 - after PROMETHEUS_MULTIPROC_DIR is prepared (above)
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics import MetricWrapperBase  # noqa: E402 - after PROMETHEUS_MULTIPROC_DIR is prepared (above)
from prometheus_client.metrics_core import Metric  # noqa: E402 - after PROMETHEUS_MULTIPROC_DIR is prepared (above)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

REQUESTS = Counter(
    "gateway_requests", "HTTP requests to /v1, by URL pattern, model and status.", ["route", "model", "status"]
)
LATENCY = Histogram(
    "gateway_request_duration_seconds",
    "Time to the end of the answer (a stream's end).",
    ["route"],
    buckets=_LATENCY_BUCKETS,
)
FIRST_BYTE = Histogram(
    "gateway_time_to_first_byte_seconds",
    "Streams: time to the first byte of the answer.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
TOKENS = Counter("gateway_tokens", "Tokens of finished responses and passed-through calls.", ["model", "kind"])
UPSTREAM_ERRORS = Counter("gateway_upstream_errors", "Upstream failures, by target and error code.", ["target", "code"])
# Labels an operator configured (guardrail names and categories), never the client's text.
GUARDRAIL_DECISIONS = Counter(
    "gateway_guardrail_decisions",
    "Guardrail decisions other than pass, by guardrail, category, action and where they fired.",
    ["guardrail", "category", "action", "where"],
)
GUARDRAIL_FAILURES = Counter(
    "gateway_guardrail_failures",
    "Remote guardrails (moderation, judge) that could not give a verdict, by guardrail, kind and "
    "fail mode (open: passed; closed: the finding 'unavailable').",
    ["guardrail", "kind", "fail"],
)
RATE_LIMITED = Counter("gateway_rate_limited", "Requests refused by a rate limit or budget, by limit.", ["limit"])
OPEN_STREAMS = Gauge("gateway_open_streams", "Streams being answered now.", multiprocess_mode="livesum")
OPEN_WEBSOCKETS = Gauge(
    "gateway_open_websockets", "WebSocket connections to /v1/responses open now.", multiprocess_mode="livesum"
)
# Everything above: what /metrics exposes, in one process or many.
METRICS: tuple[MetricWrapperBase, ...] = (
    REQUESTS,
    LATENCY,
    FIRST_BYTE,
    TOKENS,
    UPSTREAM_ERRORS,
    RATE_LIMITED,
    GUARDRAIL_DECISIONS,
    GUARDRAIL_FAILURES,
    OPEN_STREAMS,
    OPEN_WEBSOCKETS,
)


def observe_request(
    route: str, model: str, status: int, seconds: float, first_byte: float | None, tokens: tuple[Any, Any]
) -> None:
    if not settings.GATEWAY_METRICS_TOKEN:
        # Nobody can read them (/metrics is a 404): a request's figures would cost CPU for nothing.
        return
    _child(REQUESTS, route, model, str(status)).inc()
    _child(LATENCY, route).observe(seconds)
    if first_byte is not None:
        _child(FIRST_BYTE, model).observe(first_byte)
    for kind, value in zip(("input", "output"), tokens):
        if isinstance(value, int) and value > 0:
            _child(TOKENS, model, kind).inc(value)


# A labelled child of a metric, looked up once: `labels()` validates and locks on every call.
# Its labels are URL patterns, route model names and status codes, a bounded set.
_children: dict[tuple[Any, ...], Any] = {}


def _child(metric: MetricWrapperBase, *labels: str) -> Any:
    key = (metric, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def rate_limited(limit: str) -> None:
    RATE_LIMITED.labels(limit).inc()


def guardrail_decision(guardrail: str, category: str, action: str, where: str) -> None:
    GUARDRAIL_DECISIONS.labels(guardrail, category, action, where).inc()


def guardrail_failure(guardrail: str, kind: str, fail: str) -> None:
    GUARDRAIL_FAILURES.labels(guardrail, kind, fail).inc()


def upstream_error(target: str, code: str | None) -> None:
    UPSTREAM_ERRORS.labels(target, code or "unknown").inc()


class _SharedDirectoryCollector:
    """The sums of every process's files in PROMETHEUS_MULTIPROC_DIR, plus an empty family for
    each of METRICS no process has counted yet (the single-process exposition lists those too)."""

    def collect(self) -> Iterator[Metric]:
        from prometheus_client import multiprocess

        seen = set()
        # Under the directory's shared lock: a sweep moving a dead process's counts into the
        # archive is not seen half-done (counted twice, or not at all).
        with _directory_lock(os.environ["PROMETHEUS_MULTIPROC_DIR"], fcntl.LOCK_SH):
            families = list(multiprocess.MultiProcessCollector(None).collect())
        for family in families:
            seen.add(family.name)
            yield family
        for metric in METRICS:
            for family in metric.describe():
                if family.name not in seen:
                    yield family


def exposition(*collectors: Any) -> tuple[bytes, str]:
    """What /metrics answers: every process's counts, and what `collectors` read at scrape time
    (api/health.py: the background queue, from the database)."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry.register(_SharedDirectoryCollector())
    else:
        for metric in METRICS:
            registry.register(metric)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def process_exit() -> None:
    """A process's live gauges (open streams) stop counting when it ends."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(process_identifier())
