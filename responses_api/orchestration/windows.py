"""Background completion windows (`background_options.completion_window`): which Celery queue a
background run waits on, how long it may wait there and how long it may run. Pure functions of
the window and the settings (README.md, "Background completion windows").

`soonest` is the ordinary background run: the default queue, GATEWAY_QUEUED_MAX_SECONDS to be
taken, GATEWAY_BACKGROUND_MAX_SECONDS to run. `2h` and `8h` are lower-priority classes on their own
queues (workers take them after the default queue: settings.CELERY_TASK_QUEUES and the broker's
`queue_order_strategy`), which may wait and run up to their window each.
"""

from __future__ import annotations

from django.conf import settings

from ..protocol.request import COMPLETION_WINDOWS


def window_queue(window: str) -> str | None:
    """The Celery queue of a window's runs; None: the default queue (`soonest`, or a window
    this gateway does not know, which the parser never lets through)."""
    queue: str | None = settings.GATEWAY_BACKGROUND_QUEUES.get(window)
    return queue


def window_run_seconds(window: str) -> int:
    """How long a run of this window may run once a worker took it: its window's setting
    (GATEWAY_BACKGROUND_WINDOW_2H_SECONDS, ..._8H_SECONDS), or GATEWAY_BACKGROUND_MAX_SECONDS for
    `soonest`. The worker enforces it (worker.background_run_seconds)."""
    seconds: int = {
        "2h": settings.GATEWAY_BACKGROUND_WINDOW_2H_SECONDS,
        "8h": settings.GATEWAY_BACKGROUND_WINDOW_8H_SECONDS,
    }.get(window, int(settings.GATEWAY_BACKGROUND_MAX_SECONDS))
    return seconds


def window_queued_seconds(window: str) -> float:
    """How long a run of this window may wait for a worker before the reaper ends it
    (`queue_timeout`): GATEWAY_QUEUED_MAX_SECONDS, and for `2h`/`8h` at least their window (they
    wait behind `soonest` runs by design)."""
    if window == "soonest":
        return float(settings.GATEWAY_QUEUED_MAX_SECONDS)
    return float(max(settings.GATEWAY_QUEUED_MAX_SECONDS, window_run_seconds(window)))


def background_lease_seconds(window: str) -> float:
    """How long a background run holds its tenant's concurrency slot if nothing ends it sooner:
    the longest its window lets it wait for a worker, then the longest a worker's task lasts
    (its run, the drain and the stop's grace). Shorter, and a `2h`/`8h` run that waited long
    stopped counting against the tenant's limit while it still ran."""
    return window_queued_seconds(window) + float(settings.CELERY_TASK_TIME_LIMIT)


def queued_limits() -> dict[str, float]:
    """`window_queued_seconds` of every window, for the reaper's query."""
    return {window: window_queued_seconds(window) for window in COMPLETION_WINDOWS}
