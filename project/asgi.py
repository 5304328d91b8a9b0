"""ASGI entry point (`project.asgi:application`), served by uvicorn.

When GATEWAY_CONFIG names a file, its providers, routes and tools are synced
into the database here, once per process start, before any request.
"""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

application = get_asgi_application()

from django.conf import settings  # noqa: E402  (after setup)

if settings.GATEWAY_CONFIG:
    from responses_api.config_sync import sync_config_file

    sync_config_file(settings.GATEWAY_CONFIG)
