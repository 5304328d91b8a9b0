"""Static files (the admin's) through WhiteNoise, without making every API request sync.

WhiteNoise's middleware is sync-only: in an async middleware chain Django
wraps everything below it in sync<->async adapters, two thread hops per
request. This async middleware consults WhiteNoise only for STATIC_URL paths.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware


class AsyncStaticFilesMiddleware:
    sync_capable = False
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        # WhiteNoise answers static paths itself and returns its get_response() for the rest.
        self.whitenoise = WhiteNoiseMiddleware(lambda request: None)
        self.prefix = "/" + settings.STATIC_URL.lstrip("/")
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(self.prefix):
            response = await sync_to_async(self.whitenoise, thread_sensitive=False)(request)
            if response is not None:
                return response
        return await self.get_response(request)
