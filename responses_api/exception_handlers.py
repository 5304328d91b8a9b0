"""Map every error to the protocol's body: `{"error": {message, type, param, code}}`."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

from .protocol.errors import GatewayError
from .protocol.wirejson import dumpb, dumps

__all__ = ["dumps", "error_response", "json_response"]


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(dumpb(data), status=status, content_type="application/json")
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def error_response(error: GatewayError) -> HttpResponse:
    headers = dict(error.headers)
    if error.status == 429 and "x-should-retry" not in {k.lower() for k in headers}:
        headers.setdefault("Retry-After", "1")
    if error.status in (400, 401, 403, 404, 409):
        headers.setdefault("x-should-retry", "false")
    response = json_response(error.body(), status=error.status, headers=headers)
    response.log_fields = {"error_code": error.code, "error_param": error.param}  # type: ignore[attr-defined]
    return response


def drf_exception_handler(exc: Exception, context: dict) -> HttpResponse | None:
    """DRF views answer with the same error body as the async views."""
    from rest_framework import exceptions

    if isinstance(exc, GatewayError):
        return error_response(exc)
    if isinstance(exc, exceptions.APIException):
        status = exc.status_code
        kind = "invalid_request_error"
        code = {401: "invalid_api_key", 403: "permission_denied", 404: "not_found"}.get(status)
        detail = exc.detail
        param = None
        if isinstance(detail, dict) and detail:
            param, messages = next(iter(detail.items()))
            message = f"{param}: {messages[0] if isinstance(messages, list) else messages}"
        elif isinstance(detail, list) and detail:
            message = str(detail[0])
        else:
            message = str(detail)
        return json_response({"error": {"message": message, "type": kind, "param": param, "code": code}}, status=status)
    return None
