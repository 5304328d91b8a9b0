"""ASGI entry point (`project.asgi:application`), served by uvicorn.

`responses_api.api.asgi.ApiApplication` serves the /v1 API and hands every other
request to Django's handler.

GATEWAY_CONFIG is not synced here: once per deployment, by `manage.py sync_gateway_config`
(compose's `migrate` service) or `manage.py gateway_up` (scripts/run), never racing between
web processes nor resetting the admin's edits at every start.
"""

import logging
import os
import resource

from django.conf import settings
from django.core.asgi import get_asgi_application

from project.gc_tuning import tune_garbage_collection

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

_django = get_asgi_application()  # sets Django up first

from responses_api.api.asgi import ApiApplication  # noqa: E402 - after Django is set up (above)

# The /v1 API's views directly (no per-request thread hops), the rest through Django.
application = ApiApplication(_django)


def _raise_open_file_limit() -> None:
    """The soft limit on open files raised to what the upstream pool needs (at least 65536),
    within the hard limit.

    Every stream holds two sockets (the client's and the upstream's), and container runtimes
    commonly start processes with a soft limit of 1024: a process would refuse connections
    at about 500 streams, well under the 2,000 it relays (bench/README.md, performance round
    4). Raising the soft limit needs no privilege; the hard limit is the operator's."""
    needed = 2 * settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Not the whole hard limit when it is huge (or unlimited): child processes inherit it.
    wanted = max(needed, 65536) if hard == resource.RLIM_INFINITY else min(hard, max(needed, 65536))
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # e.g. above the kernel's limit: keep the soft limit
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        logging.getLogger("gateway").warning(
            "open-file limit %d is below %d (two sockets per stream for GATEWAY_UPSTREAM_MAX_CONNECTIONS=%d): "
            "raise the hard limit (compose: ulimits.nofile)",
            soft,
            needed,
            settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS,
        )


tune_garbage_collection()
_raise_open_file_limit()
