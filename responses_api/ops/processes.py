"""Child processes: wait until one answers, stop it in order, make it die with its parent.

The one implementation behind the bundled model (local_model.py), the development supervisor
(`manage.py gateway_up`), the tests' servers and workers (tests/support) and the benchmarks
(bench/common.py). Standard library only: the benchmarks import it without Django.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ProcessExited", "die_with_parent", "stop_process", "wait_until"]


class ProcessExited(RuntimeError):
    """The process ended while it was awaited."""

    def __init__(self, what: str, returncode: int) -> None:
        super().__init__(f"{what} exited with code {returncode} before it was ready")
        self.returncode = returncode


def wait_until(
    proc: subprocess.Popen[Any],
    ready: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    stop: Callable[[], bool] | None = None,
    retry_on: tuple[type[BaseException], ...] = (OSError,),
) -> bool:
    """Call `ready()` every `interval` s until it is true. Returns True then, or False when
    `stop()` became true first (a supervisor told to stop while it waited).

    Raises ProcessExited when the process ends first, TimeoutError after `timeout` s. A
    `retry_on` exception from `ready()` counts as not ready yet (a port not listening: urllib's
    errors are OSErrors; pass httpx.TransportError for httpx); any other propagates."""
    deadline = time.monotonic() + timeout
    while stop is None or not stop():
        code = proc.poll()
        if code is not None:
            raise ProcessExited(what, code)
        try:
            if ready():
                return True
        except retry_on:
            pass  # not listening yet: the deadline decides
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} was not ready within {timeout:g} s")
        time.sleep(interval)
    return False


def stop_process(
    proc: subprocess.Popen[Any],
    *,
    sig: int = signal.SIGTERM,
    timeout: float = 10.0,
    group: bool = False,
    kill_group: bool | None = None,
) -> None:
    """Stop a child and reap it. Idempotent.

    Sends `sig`, to its whole process group when `group` (a child started with
    `start_new_session=True` leads one), waits `timeout` s, then SIGKILLs it (its group when
    `kill_group`, which defaults to `group`: Celery wants its warm-shutdown SIGTERM on the main
    process alone, and SIGKILL on the pool it forked)."""
    kill_group = group if kill_group is None else kill_group
    if proc.poll() is None:
        _signal(proc, sig, group)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, kill_group)
    proc.wait()  # always reap, so no zombie is left


def _signal(proc: subprocess.Popen[Any], sig: int, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)


def die_with_parent() -> None:
    """A `preexec_fn` (between fork and exec): on Linux the child gets SIGTERM when its parent
    dies, even by SIGKILL, so no orphan keeps a port. Elsewhere it does nothing. Only for
    parents without threads of their own (the usual preexec_fn caveat)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
