"""Diagnostics only: the project settings plus a log line (stderr) for every garbage collection
that takes longer than 5 ms, with its generation and duration. Used with
`bench/streams.py --settings diag_settings_gclog` to see whether GC pauses
show up as inter-event delay."""

import gc
import sys
import time

from project.settings import *

_gc_start = [0.0]


def _gc_log(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_start[0] = time.perf_counter()
        return
    took = (time.perf_counter() - _gc_start[0]) * 1000
    if took > 5:
        sys.stderr.write(
            f"{time.time():.2f} GC gen{info.get('generation')} {took:.1f} ms collected {info.get('collected')} tracked {len(gc.get_objects()) if info.get('generation') == 2 else -1}\n"
        )


gc.callbacks.append(_gc_log)
