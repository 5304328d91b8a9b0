"""The Celery application; configuration comes from Django settings (CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

# Before any broker connection: a Redis outage must be a lost connection, not a worker exit.
from responses_api.ops.kombu_outage import install as _survive_broker_outages  # noqa: E402

_survive_broker_outages()

app = Celery("gateway")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
