"""Diagnostics only: the project settings with just the gateway's own RequestIdMiddleware.

Every Django MiddlewareMixin middleware (Security, Session, Common, Csrf,
Auth, Messages, XFrame) runs its process_request/process_response through
sync_to_async(thread_sensitive=True) under ASGI: a hop to a per-request
single-thread executor (a new OS thread per request, alive until the response
has been sent, joined by one more new thread). WhiteNoise's middleware is
sync-only, which makes the whole chain sync. This module measures how much
the /v1 API would gain if its requests skipped them (the admin needs them, so
this is not a fix by itself)."""
from project.settings import *

MIDDLEWARE = ["responses_api.middleware.RequestIdMiddleware"]
SILENCED_SYSTEM_CHECKS = ["admin.E408", "admin.E409", "admin.E410"]
