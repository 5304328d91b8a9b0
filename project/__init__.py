"""Django project package: settings, URLs, ASGI entry point and the Celery app."""

from .celery import app as celery_app

__all__ = ("celery_app",)
