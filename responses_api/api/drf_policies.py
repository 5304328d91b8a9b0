"""The DRF policies of the /v1 API: authentication, permissions, parsing, rendering.

Apart from `drf.py` (the view base class) so that REST_FRAMEWORK's defaults can name
them: DRF imports its default classes while `rest_framework.views` is being imported.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterable
from typing import Any

from django.conf import settings
from rest_framework.authentication import BaseAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer
from rest_framework.request import Request

from ..domain import Principal
from ..protocol import jsonlimits
from ..protocol.errors import InvalidRequest
from ..protocol.wirejson import dumpb
from ..store import db
from .auth import bearer_token, principal_for, staff_principal
from .notes import RequestNotes


class BearerKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer <API key>`; the principal is the request's `user`."""

    # Async: awaited by drf.ApiView's dispatch (DRF's own Request would not await it).
    async def authenticate(self, request: Request) -> tuple[Principal, None]:  # type: ignore[override]  # DRF awaits what an authenticator returns here (drf.py), its stubs say sync
        principal = await principal_for(bearer_token(request.META.get("HTTP_AUTHORIZATION")))
        RequestNotes.of(request._request).log_extra["tenant"] = principal.tenant_name
        return principal, None

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


class ApiKeyHeaderAuthentication(BearerKeyAuthentication):
    """Anthropic's clients send the key in `x-api-key`; `Authorization: Bearer` is taken too
    (the SDK's `auth_token`, Claude Code's ANTHROPIC_AUTH_TOKEN)."""

    async def authenticate(self, request: Request) -> tuple[Principal, None]:  # type: ignore[override]  # awaited by drf.py, as the base class's
        key = request.META.get("HTTP_X_API_KEY", "").strip()
        if not key:
            return await super().authenticate(request)
        principal = await principal_for(key)
        RequestNotes.of(request._request).log_extra["tenant"] = principal.tenant_name
        return principal, None

    def authenticate_header(self, request: Request) -> str:
        return "x-api-key"


class KeyOrStaffSessionAuthentication(BearerKeyAuthentication):
    """The history's read endpoints: an API key as everywhere, and, only when no key is
    presented, a logged-in staff user's admin session on GET and HEAD, answered with DRF's
    browsable API to a browser. A keyed request takes the key path after one header test;
    a POST is never authenticated by a session (no CSRF token is asked for: none is needed)."""

    def authenticate(self, request: Request) -> Awaitable[tuple[Principal, None]]:  # type: ignore[override]  # returns the key's coroutine itself, awaited by drf.py; the stubs say sync
        # Not a coroutine itself: a keyed request gets the key's coroutine as it is (awaited by
        # drf.ApiView's dispatch), one header test and no extra frame on the keyed path.
        if request.META.get("HTTP_AUTHORIZATION") or request.method not in ("GET", "HEAD"):
            return super().authenticate(request)
        return self._staff_session(request)

    async def _staff_session(self, request: Request) -> tuple[Principal, None]:
        if settings.SESSION_COOKIE_NAME not in request.COOKIES:
            return await super().authenticate(request)  # the 401 that asks for a key
        principal = await db.run(staff_principal, request._request)
        if principal is None:
            return await super().authenticate(request)
        RequestNotes.of(request._request).log_extra["tenant"] = principal.key_name
        if "text/html" in request.META.get("HTTP_ACCEPT", ""):
            request.accepted_renderer, request.accepted_media_type = HistoryBrowsableRenderer(), "text/html"
        return principal, None


class HistoryBrowsableRenderer(BrowsableAPIRenderer):
    """DRF's browsable API for a staff session, read-only: no forms (a POST never takes a
    session), the JSON indented."""

    template = "rest_framework/gateway_history.html"

    def get_content(self, renderer: Any, data: Any, accepted_media_type: Any, renderer_context: Any) -> str:
        return json.dumps(data, indent=2, ensure_ascii=False, default=str)

    def get_rendered_html_form(self, data: Any, view: Any, method: str, request: Any) -> None:
        return None

    def get_raw_data_form(self, data: Any, view: Any, method: str, request: Any) -> None:
        return None

    def get_filter_form(self, data: Any, view: Any, request: Any) -> None:
        return None


class HasApiKey(BasePermission):
    """Every /v1 endpoint needs a valid key (authentication raises before this for a bad one)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Principal)


class ProtocolJSONParser(BaseParser):
    """Request bodies are JSON whatever the client labels them (curl's `-d` says form data),
    within the gateway's nesting limit; the size limit is enforced while the body is read
    (`asgi.ApiApplication`), before any of it is buffered past the limit."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        # The whole body is already in memory (the fast lane read it): take it as bytes, so a
        # view that also forwards the raw body (the pass-through endpoints) can still read it.
        request = (parser_context or {}).get("request")
        # Django's request itself: through DRF's Request, `body` is a (slow) __getattr__ miss.
        raw = request._request.body if request is not None else stream.read()
        try:
            return jsonlimits.loads(raw or b"null")
        except jsonlimits.JsonTooDeep as exc:
            raise InvalidRequest(f"The request body {exc}; this gateway accepts at most {exc.limit}.") from None
        except ValueError as exc:
            raise InvalidRequest(f"The request body is not valid JSON: {exc}.") from None


class ProtocolJSONRenderer(BaseRenderer):
    """JSON as the protocol's clients expect it (`application/json`, no charset parameter),
    encoded by orjson (protocol/wirejson.py)."""

    media_type = "application/json"
    format = "json"
    charset = None

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return dumpb(data)


class ProtocolNegotiation(BaseContentNegotiation):
    """The API speaks one format: `Accept` (text/event-stream for streams, */* from curl) never
    turns a request into a 406, and a body is parsed as JSON whatever its label."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser:
        return next(iter(parsers))

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type
