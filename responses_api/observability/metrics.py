"""Prometheus metrics, served at /metrics to holders of GATEWAY_METRICS_TOKEN (404 without
one configured: not public by default).

Several processes (uvicorn workers, Celery) each count their own; with PROMETHEUS_MULTIPROC_DIR
set in their environment (an empty directory, cleared at deployment start) the scrape sums
them all, whichever process answers it. Each process writes its own files there, named by
host, pid and a random part (`process_identifier`): web and worker containers sharing one
directory have pid namespaces of their own, so a pid alone would collide. A web process killed
outright leaves its live gauges behind: the live processes' liveness beat removes them. The queue and worker figures are
read from the database at scrape time (api/health.py), so they are the same whichever process
answers.

`METRICS` is the one list of what is exposed: the single-process exposition registers it,
and the multi-process one lists every family of it too, even before any process counted."""

from __future__ import annotations

import contextlib
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
    file names on '_', so none may be in it."""
    return metrics_identifier(process_id())


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


def upstream_error(target: str, code: str | None) -> None:
    UPSTREAM_ERRORS.labels(target, code or "unknown").inc()


class _SharedDirectoryCollector:
    """The sums of every process's files in PROMETHEUS_MULTIPROC_DIR, plus an empty family for
    each of METRICS no process has counted yet (the single-process exposition lists those too)."""

    def collect(self) -> Iterator[Metric]:
        from prometheus_client import multiprocess

        seen = set()
        for family in multiprocess.MultiProcessCollector(None).collect():
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
