"""Diagnostics only (bench/profile_gateway.py --settings diag_settings_async_mw).

The project settings without WhiteNoise's middleware, which is sync-only: with
it in MIDDLEWARE, Django runs the whole middleware chain in sync mode, so every
request enters a thread (a new single-thread executor per request, created and
joined by asgiref) and hops back to the event loop for the async view. This
module measures what an all-async middleware chain would save; it is not a fix.
"""

from project.settings import *

MIDDLEWARE = [m for m in MIDDLEWARE if "whitenoise" not in m.lower()]
