"""One error hierarchy for the gateway, mapped to the protocol's error body in one place."""

from __future__ import annotations

from typing import Any

# What an error echoes of a request is cut to these lengths: a 5,000-character metadata key
# or field name is not sent back whole in `param` (nor in the message, nor in the access log).
PARAM_MAX_CHARS = 256
MESSAGE_MAX_CHARS = 2000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class GatewayError(Exception):
    """An error that becomes `{"error": {message, type, param, code}}` with an HTTP status."""

    status: int = 400
    error_type: str = "invalid_request_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        operator_detail: str = "",
    ) -> None:
        message = _cut(message, MESSAGE_MAX_CHARS)
        super().__init__(message)
        self.message = message
        self.param = _cut(param, PARAM_MAX_CHARS) if param is not None else None
        self.code = code if code is not None else self.default_code
        if status is not None:
            self.status = status
        self.headers = headers or {}
        # What only the operator sees (the log, the admin's route health), never the client's
        # body: e.g. the address of an upstream it could not reach, which the operator configured.
        self.operator_detail = operator_detail

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def as_response_error(self) -> dict[str, Any]:
        """The `error` field of a failed Response object."""
        return {"code": self.code or self.error_type, "message": self.message}


class InvalidRequest(GatewayError):
    status = 400
    default_code = "invalid_request"


class NotFound(GatewayError):
    status = 404
    default_code = "not_found"


class AuthenticationFailed(GatewayError):
    status = 401
    default_code = "invalid_api_key"


class RequestTooLarge(GatewayError):
    status = 413
    default_code = "request_too_large"


class RateLimited(GatewayError):
    status = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class FailedDependency(GatewayError):
    """A tool the request names could not be used (an MCP server's tool listing failed): what
    OpenAI answers, with its type and code."""

    status = 424
    error_type = "external_connector_error"
    default_code = "http_error"


class UpstreamError(GatewayError):
    """The upstream answered with an error or with something that is not the protocol."""

    status = 502
    error_type = "server_error"
    default_code = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    status = 503
    default_code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status = 504
    default_code = "upstream_timeout"


class ServerError(GatewayError):
    status = 500
    error_type = "server_error"
    default_code = "server_error"


class ProviderMisconfigured(GatewayError):
    """A provider's key cannot be had (its variable unset or empty, or it was sealed under an
    encryption key no longer listed): the operator's to mend, so a 503 naming the provider and
    the remedy, never a 500; the request itself was fine."""

    status = 503
    error_type = "server_error"
    default_code = "provider_misconfigured"
