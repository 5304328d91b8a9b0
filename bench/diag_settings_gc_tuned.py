"""Diagnostics only: the project settings with a less eager cyclic GC (gen0 threshold 50,000
instead of 700, so full collections over a heap of hundreds of open streams happen far less
often), to measure the GC share of inter-event delay with a setting a deployment could use."""

import gc

from project.settings import *

gc.set_threshold(50_000, 20, 100)
