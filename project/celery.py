"""The Celery application; configuration comes from Django settings (CELERY_*)."""

import os

from celery import Celery
from celery.signals import worker_init

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
