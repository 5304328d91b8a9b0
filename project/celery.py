"""The Celery application; configuration comes from Django settings (CELERY_*)."""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("gateway")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _survive_broker_outages(**_: object) -> None:
    """In a worker, before its broker connection: a Redis outage must be a lost connection, not
    the worker's exit (responses_api/ops/kombu_outage.py). Only there: importing the Redis
    transport imports redis, which loads OpenTelemetry's SDK, and web processes stay without it."""
    from responses_api.ops.kombu_outage import install

    install()


@worker_init.connect
def _room_for_many_runs(**_: object) -> None:
    """A worker process holds GATEWAY_WORKER_CONCURRENCY runs, each with an upstream connection
    (and a tool's, at times): the soft open-file limit (often 1024 in containers) raised to
    the hard one, and the upstream pool checked to have room for every run."""
    import logging
    import resource

    from django.conf import settings

    runs = settings.GATEWAY_WORKER_CONCURRENCY
    # Before any pool exists (they are made on first use): a worker's runs wait longer for a
    # connection than a web request does (GATEWAY_WORKER_DB_TIMEOUT).
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        pool["timeout"] = max(float(pool.get("timeout", 0)), settings.GATEWAY_WORKER_DB_TIMEOUT)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # above the kernel's limit: keep the soft limit
            pass
    log = logging.getLogger("gateway")
    if soft != resource.RLIM_INFINITY and soft < 4 * runs + 256:
        log.warning("open-file limit %d is low for %d runs per process (compose: ulimits.nofile)", soft, runs)
    if runs > settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS:
        log.warning(
            "GATEWAY_UPSTREAM_MAX_CONNECTIONS=%d is below GATEWAY_WORKER_CONCURRENCY=%d: runs wait for a connection",
            settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS,
            runs,
        )


@worker_ready.connect
@worker_process_init.connect
def _tune_garbage_collection(**_: object) -> None:
    """As a web process does (project/gc_tuning.py), once the worker has loaded what it runs:
    in its process (the threads pool's runs share it), or in each child of a prefork pool."""
    from project.gc_tuning import tune_garbage_collection

    tune_garbage_collection()
