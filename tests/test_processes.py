"""The child-process helpers every supervisor here uses (responses_api/ops/processes.py), on
real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from responses_api.ops.processes import ProcessExited, stop_process, wait_until

pytestmark = pytest.mark.embedded


def _python(code: str, **kwargs) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], **kwargs)


def test_wait_until_returns_when_ready_and_retries_what_it_was_told_to() -> None:
    proc = _python("import time; time.sleep(30)")
    calls = []

    def ready() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError  # an OSError: not listening yet
        return True

    try:
        assert wait_until(proc, ready, timeout=5, interval=0.01, what="sleeper") is True
        assert len(calls) == 3
        with pytest.raises(ValueError):  # not in retry_on: a bug in the probe is not a timeout
            wait_until(proc, lambda: int("x") > 0, timeout=5, what="sleeper")
        with pytest.raises(TimeoutError, match="sleeper was not ready within 0.2 s"):
            wait_until(proc, lambda: False, timeout=0.2, interval=0.05, what="sleeper")
        assert wait_until(proc, lambda: False, timeout=5, what="sleeper", stop=lambda: True) is False
    finally:
        stop_process(proc)
    assert proc.returncode is not None


def test_wait_until_notices_the_process_ending() -> None:
    proc = _python("raise SystemExit(3)")
    with pytest.raises(ProcessExited) as caught:
        wait_until(proc, lambda: False, timeout=10, what="quitter")
    assert caught.value.returncode == 3 and "quitter exited with code 3" in str(caught.value)


def test_stop_process_kills_what_ignores_sigterm_and_reaps_it() -> None:
    proc = _python(
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    started = time.monotonic()
    stop_process(proc, timeout=0.5)
    assert proc.returncode == -9 and time.monotonic() - started < 30  # killed, not waited out (60 s)
    stop_process(proc)  # idempotent


def test_stop_process_with_group_ends_the_children_too() -> None:
    proc = _python(
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid, flush=True); time.sleep(60)",
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    stop_process(proc, group=True, timeout=5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        # Gone, or a zombie until init reaps it (its parent is gone too).
        try:
            with open(f"/proc/{child}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child outlived its process group's stop")
