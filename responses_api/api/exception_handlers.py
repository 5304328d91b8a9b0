"""Map every error to the protocol's body: `{"error": {message, type, param, code}}`."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from rest_framework import exceptions

from ..protocol.errors import GatewayError, RateLimited
from ..protocol.wirejson import dumpb, dumps
from ..store.outages import unavailable
from .notes import ErrorResponse

__all__ = ["dumps", "error_response", "json_response"]


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(dumpb(data), status=status, content_type="application/json")
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def error_response(error: GatewayError, body: dict[str, Any] | None = None) -> HttpResponse:
    """`body`: another dialect's error shape for this error (an inbound dialect's, such as
    Anthropic's, protocol/dialects.py); the protocol's own by default."""
    headers = dict(error.headers)
    if error.status == 429 and "x-should-retry" not in {k.lower() for k in headers}:
        headers.setdefault("Retry-After", "1")
    if error.status in (400, 401, 403, 404, 409):
        headers.setdefault("x-should-retry", "false")
    response = ErrorResponse(
        dumpb(error.body() if body is None else body), status=error.status, content_type="application/json"
    )
    for key, value in headers.items():
        response[key] = value
    response.log_fields = {
        "error_code": error.code,
        "error_param": error.param,
    }  # read by the access log (middleware.py)
    return response


def drf_exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """The exception handler of every /v1 view (DRF's EXCEPTION_HANDLER): the gateway's own
    errors, DRF's (405, throttles, permissions) and outages (503) become the protocol's error
    body; anything else goes on up to the ASGI lane, which logs it and answers a plain 500."""
    error = as_gateway_error(exc, context)
    return error_response(error) if error is not None else None


def as_gateway_error(exc: Exception, context: dict[str, Any]) -> GatewayError | None:
    """The gateway's error for what a view raised; None for a fault (a 500 from the lane)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, exceptions.APIException):
        return _from_drf(exc, context)
    return unavailable(exc)


def _from_drf(exc: Any, context: dict[str, Any]) -> GatewayError:
    detail, param = exc.detail, None
    if isinstance(exc, exceptions.MethodNotAllowed):
        request = context.get("request")
        message = f"Method {getattr(request, 'method', '?')} not allowed."
    elif isinstance(detail, dict) and detail:
        param, messages = next(iter(detail.items()))
        message = f"{param}: {messages[0] if isinstance(messages, list) else messages}"
    elif isinstance(detail, list) and detail:
        message = str(detail[0])
    else:
        message = str(detail)
    code = getattr(detail, "code", None) or exc.default_code
    headers = {}
    wait = getattr(exc, "wait", None) if isinstance(exc, exceptions.Throttled) else None
    if wait is not None:
        headers["Retry-After"] = str(max(1, int(wait)))
    kind = RateLimited if exc.status_code == 429 else GatewayError
    return kind(message, param=param, code=code, status=exc.status_code, headers=headers)
