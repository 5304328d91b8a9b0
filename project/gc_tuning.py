"""The garbage collector of a long-lived gateway process (a web process, a worker)."""

import gc

from django.conf import settings


def tune_garbage_collection() -> None:
    """Long-lived objects out of the collector's way, and rarer young collections.

    With hundreds of open streams, full collections of the default thresholds stalled every
    stream at once (bench/streams.py); freezing what start-up allocated and raising the gen-0
    threshold keeps pauses short. A worker holding hundreds of runs on its loop allocates per
    upstream chunk as a web process does, and with the default thresholds spent a share of
    its CPU walking Django's, Celery's and its threads' objects again and again
    (bench/README.md, "Sixteenth session")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*settings.GATEWAY_GC_THRESHOLDS)
