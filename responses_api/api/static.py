"""Static files (the admin's) through WhiteNoise, without making every API request sync.

WhiteNoise's middleware is sync-only: in an async middleware chain Django
wraps everything below it in sync<->async adapters, two thread hops per
request. This async middleware consults WhiteNoise only for STATIC_URL paths.

Without `collectstatic` (a checkout run with DEBUG=0, outside the image, which collects them
when it is built) the admin still works: its files are served unhashed from the installed
apps (settings.WHITENOISE_USE_FINDERS), and a warning at start says what to run. Refusing to
start instead would take /v1 down over the admin's stylesheets, which is not what someone
trying the gateway wants; a 500 on /admin/login/ ("Missing staticfiles manifest entry")
helps nobody.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.storage import CompressedManifestStaticFilesStorage

log = logging.getLogger("gateway.static")


def collected() -> bool:
    """`collectstatic` has written its manifest to STATIC_ROOT."""
    return (Path(settings.STATIC_ROOT) / "staticfiles.json").exists()


class StaticStorage(CompressedManifestStaticFilesStorage):
    """Hashed, compressed names from the manifest once `collectstatic` wrote it; the plain
    names, served from the apps (AsyncStaticFilesMiddleware) until then (instead of a 500)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.collected = self.manifest_storage.exists(self.manifest_name)

    def stored_name(self, name: str) -> str:
        return super().stored_name(name) if self.collected else name


class AsyncStaticFilesMiddleware:
    sync_capable = False
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]]) -> None:
        self.get_response = get_response
        # WhiteNoise answers static paths itself and returns its get_response() for the rest.
        self.whitenoise = WhiteNoiseMiddleware(lambda request: None)
        self.prefix = "/" + settings.STATIC_URL.lstrip("/")
        self.from_apps = not collected()  # WhiteNoise has nothing to serve: the finders have it
        if not settings.DEBUG and self.from_apps:
            log.warning(
                "static files are not collected in %s: the admin's are served unhashed from the installed "
                "apps; run `python manage.py collectstatic --noinput` for cacheable, compressed ones",
                settings.STATIC_ROOT,
            )
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(self.prefix):
            # WhiteNoise is untyped: its answer is a response, or None for a path it does not serve.
            response: HttpResponseBase | None = await sync_to_async(self.whitenoise, thread_sensitive=False)(request)
            if response is None and self.from_apps:
                response = await sync_to_async(_from_apps, thread_sensitive=False)(request, self.prefix)
            if response is not None:
                return response
        return await self.get_response(request)


def _from_apps(request: HttpRequest, prefix: str) -> HttpResponseBase | None:
    """A static file found in the installed apps (Django's own view, as `runserver` serves them)."""
    from django.contrib.staticfiles.views import serve
    from django.http import Http404

    try:
        return serve(request, request.path_info.removeprefix(prefix), insecure=True)
    except Http404:
        return None
