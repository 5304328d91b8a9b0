"""Django REST framework on the event loop: the base class of every /v1 view.

Each /v1 endpoint is an `ApiView` (a DRF `APIView`): bearer-key authentication,
permission and throttle classes, a parser and a renderer, and one exception
handler that answers with the protocol's error body. What differs from stock DRF
is where it runs. DRF's `dispatch` is synchronous, and adrf (the async DRF
package) runs authentication, permissions and throttles through
`sync_to_async`: a thread hop per request, the cost the ASGI fast lane exists
to avoid (bench/README.md: asgiref was 27% of a create's CPU). `ApiView`
awaits the same steps on the event loop (async or plain `authenticate`,
`has_permission` and `allow_request` alike), and its views are served by the
fast lane (`asgi.ApiApplication`), which renders their `Response` in place.
The policies (authentication, permissions, parser, renderer) are in drf_policies.py.
"""

from __future__ import annotations

import inspect
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from rest_framework.authentication import BaseAuthentication
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from ..domain import Principal
from ..protocol.errors import InvalidRequest
from ..protocol.surface import BETA_MESSAGE, beta_requested
from .asgi import fast_lane
from .drf_policies import (
    BearerKeyAuthentication,
    HasApiKey,
    ProtocolJSONParser,
    ProtocolJSONRenderer,
    ProtocolNegotiation,
)
from .notes import RequestNotes


class ApiRequest(Request):
    """DRF's Request with the access-log fields of the request's notes (notes.py)."""

    @property
    def log_extra(self) -> dict[str, Any]:
        return RequestNotes.of(self._request).log_extra


class ApiView(APIView):
    """A DRF view whose handlers are coroutines, dispatched on the event loop."""

    authentication_classes: tuple[type[BaseAuthentication], ...] = (BearerKeyAuthentication,)
    permission_classes: tuple[type[BasePermission], ...] = (HasApiKey,)
    throttle_classes = ()
    parser_classes: tuple[type[BaseParser], ...] = (ProtocolJSONParser,)
    renderer_classes = (ProtocolJSONRenderer,)
    content_negotiation_class = ProtocolNegotiation
    # No OPTIONS (no CORS preflight or DRF metadata here): 405 like any method an endpoint lacks.
    http_method_names = ["get", "post", "delete", "head"]
    metadata_class = None
    # `?beta=true` and `openai-beta` ask for OpenAI's beta surface, refused whole; Anthropic's
    # dialect uses `?beta=true` for its own betas (its SDK's `client.beta.messages`), which its
    # views serve (api/messages_views.py).
    refuses_openai_beta = True

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        """What DRF's `as_view` gives (its checks, and the attributes that describe the view:
        `cls`, `csrf_exempt`, ...), calling `dispatch_async` without the layers of wrapper
        coroutines Django's view function and `csrf_exempt` add: no CSRF applies to bearer keys."""
        described = super().as_view(**initkwargs)

        async def endpoint(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            view = cls(**initkwargs)
            view.setup(request, *args, **kwargs)
            return await view.dispatch_async(request, *args, **kwargs)

        endpoint.__dict__.update(described.__dict__)
        endpoint.__name__, endpoint.__qualname__ = cls.__name__, cls.__qualname__
        endpoint.__doc__, endpoint.__module__ = cls.__doc__, cls.__module__
        return fast_lane(endpoint)

    @property
    def principal(self) -> Principal:
        return self.request.user  # type: ignore[return-value]  # DRF types its user as Django's; ours is the key's Principal

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> ApiRequest:
        if request.META.get("CONTENT_LENGTH") and not request.META.get("CONTENT_TYPE"):
            # DRF ignores a body without a media type; this API's bodies are JSON.
            request.META["CONTENT_TYPE"] = "application/json"
        return ApiRequest(
            request,
            parsers=self.get_parsers(),
            authenticators=self.get_authenticators(),
            negotiator=self.get_content_negotiator(),
            parser_context=self.get_parser_context(request),
        )

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return self.dispatch_async(request, *args, **kwargs)

    async def dispatch_async(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """DRF's `dispatch`, awaiting each step instead of running it in a thread."""
        self.args = args
        self.kwargs = kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            await self.initial_async(drf_request, *args, **kwargs)
            method = (drf_request.method or "").lower()
            handler = getattr(self, method, None) if method in self.http_method_names else None
            response = (handler or self.http_method_not_allowed)(drf_request, *args, **kwargs)
            if inspect.isawaitable(response):
                response = await response
        except Exception as exc:  # noqa: BLE001 - DRF's own dispatch: every error goes to the exception handler
            response = self.handle_exception(exc)
        response = self.finalize_response(drf_request, response, *args, **kwargs)
        return self._released(drf_request, response)

    def _released(self, request: Request, response: HttpResponseBase) -> HttpResponseBase:
        """Render a JSON answer now (no I/O) and drop the references DRF leaves between the
        view, its Request and the Response: the parser and renderer contexts name each other,
        about 23 objects in cycles per request that only the cyclic GC frees. With requests
        in flight they outlive young collections and pile up for full ones, which then cost
        every request CPU (bench/README.md, "DRF views")."""
        if getattr(response, "is_rendered", True) is False:
            response.render()  # type: ignore[attr-defined]  # only DRF's Response has render(); a plain HttpResponse is rendered already
            response.renderer_context = None  # type: ignore[attr-defined]  # only DRF's Response has a renderer context
        request.parser_context = None  # type: ignore[assignment]  # cleared to break DRF's reference cycle (docstring)
        self.request = None  # type: ignore[assignment]  # cleared to break DRF's reference cycle (docstring)
        return response

    async def initial_async(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.format_kwarg = None  # one format: no `.json` suffixes, no `?format=`
        request.accepted_renderer, request.accepted_media_type = self.perform_content_negotiation(request)
        request.version, request.versioning_scheme = None, None
        await self._authenticate(request)
        meta = request._request.META
        if self.refuses_openai_beta and beta_requested(meta.get("QUERY_STRING", ""), meta.get("HTTP_OPENAI_BETA")):
            # The beta surface is refused whole (protocol/surface.py) until a part of it is served.
            raise InvalidRequest(BETA_MESSAGE, param="beta")
        for permission in self.get_permissions():
            allowed = permission.has_permission(request, self)
            if inspect.isawaitable(allowed):
                allowed = await allowed
            if not allowed:
                self.permission_denied(
                    request, message=getattr(permission, "message", None), code=getattr(permission, "code", None)
                )
        waits = []
        for throttle in self.get_throttles():
            allowed = throttle.allow_request(request, self)
            if inspect.isawaitable(allowed):
                allowed = await allowed
            if not allowed:
                waits.append(throttle.wait())
        if waits:
            # None when no throttle knows how long (DRF's own check_throttles passes it on too).
            self.throttled(request, max((w for w in waits if w is not None), default=None))  # type: ignore[arg-type]  # DRF's throttled() takes None for an unknown wait, its stubs say float

    async def _authenticate(self, request: Request) -> None:
        """`Request._authenticate`, awaiting async authenticators (its private steps as DRF's own)."""
        for authenticator in request.authenticators or ():
            try:
                result: Any = authenticator.authenticate(request)
                if inspect.isawaitable(result):
                    result = await result
            except Exception:
                request._not_authenticated()  # type: ignore[attr-defined]  # DRF's private step, as its own Request._authenticate calls it
                raise
            if result is not None:
                request._authenticator = authenticator  # type: ignore[attr-defined]  # DRF's private attribute, as its own Request._authenticate sets it
                request.user, request.auth = result
                return
        request._not_authenticated()  # type: ignore[attr-defined]  # DRF's private step, as its own Request._authenticate calls it
