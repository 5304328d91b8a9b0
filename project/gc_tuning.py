"""The garbage collector of a long-lived gateway process (a web process, a worker)."""

import gc

from django.conf import settings


def tune_garbage_collection() -> None:
    """Long-lived objects out of the collector's way, and rarer young collections.

    With hundreds of open streams, full collections of the default thresholds stalled every
    stream at once (bench/streams.py); freezing what start-up allocated and raising the gen-0
    threshold keeps pauses short. A worker holds hundreds of runs on one loop and allocates per
    upstream chunk as a web process does, so its full collections would stall all of them at
    once the same way (its CPU per response did not change measurably: bench/README.md,
    "Sixteenth session")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*settings.GATEWAY_GC_THRESHOLDS)
