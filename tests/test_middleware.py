"""The middleware chain stays fully async: one sync-only middleware would put two thread hops on every request."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.test import AsyncRequestFactory
from django.utils.module_loading import import_string

from responses_api.api.static import AsyncStaticFilesMiddleware

pytestmark = pytest.mark.embedded


def test_every_middleware_is_async_capable() -> None:
    sync_only = [path for path in settings.MIDDLEWARE if not getattr(import_string(path), "async_capable", False)]
    assert sync_only == []


async def test_collected_static_files_are_served_and_the_rest_passes_through(settings, tmp_path) -> None:
    from django.core.management import call_command

    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    call_command("collectstatic", "--noinput", verbosity=0)

    async def downstream(request):
        return HttpResponse("api", status=299)

    middleware = AsyncStaticFilesMiddleware(downstream)
    factory = AsyncRequestFactory()
    css = await middleware(factory.get("/static/admin/css/base.css"))
    assert css.status_code == 200 and "text/css" in css["Content-Type"]
    api = await middleware(factory.get("/v1/responses"))
    assert api.status_code == 299
    missing = await middleware(factory.get("/static/not-there.css"))
    assert missing.status_code == 299  # not a static file: the app decides
