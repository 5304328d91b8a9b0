"""The garbage collector of the gateway's long-lived processes (project/gc_tuning.py): a web
process and a Celery worker both freeze what start-up allocated and run with
GATEWAY_GC_THRESHOLDS. Each is checked in a fresh interpreter, so that the test process's own
collector is left as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parent.parent

REPORT = "import gc, json; print(json.dumps([list(gc.get_threshold()), gc.get_freeze_count()]))"


def _collector_after(code: str) -> tuple[list[int], int]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="project.settings", GATEWAY_GC_THRESHOLDS="41000,17,90")
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{REPORT}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    thresholds, frozen = json.loads(done.stdout.strip().splitlines()[-1])
    return thresholds, frozen


def test_a_web_process_runs_with_the_configured_thresholds_and_its_start_up_frozen() -> None:
    thresholds, frozen = _collector_after("import project.asgi")
    assert thresholds == [41000, 17, 90]
    assert frozen > 10_000  # Django and the gateway's modules


def test_a_worker_tunes_its_collector_once_it_is_ready() -> None:
    # The signal Celery sends in the worker process once its consumer is up (the threads pool's
    # runs share that process); a prefork child does the same at worker_process_init.
    thresholds, frozen = _collector_after(
        "import gc, django; django.setup()\n"
        "from project.celery import app\n"
        "assert gc.get_threshold() != (41000, 17, 90) and gc.get_freeze_count() == 0\n"
        "from celery.signals import worker_ready\n"
        "worker_ready.send(sender=None)"
    )
    assert thresholds == [41000, 17, 90]
    assert frozen > 10_000
