"""Diagnostics only: the project settings with Python's cyclic garbage collector switched off
(gc.disable()), to measure how much of the inter-event delay is GC pauses. Not a fix:
reference cycles would then never be freed."""

import gc

from project.settings import *

gc.disable()
