"""What the HTTP layer notes about one request as it passes (Zulip's `RequestNotes` pattern): one
typed record a request carries, instead of attributes set on Django's request ad hoc.

The ASGI lane (asgi.py) notes a refusal it made before the view; the middleware (middleware.py)
the request id and the access-log fields, which authentication, the views and the event stream
(sse.py) fill in; the access line is written from them when the response (or its stream) ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse

from ..protocol.errors import GatewayError

# The record's key in the request's __dict__: a dict lookup per access, where a WeakKeyDictionary
# (Zulip's storage) builds a weak reference each time, on a path that counts microseconds.
_KEY = "_gateway_notes"


@dataclass(slots=True)
class RequestNotes:
    request_id: str = ""  # the client's x-request-id when it is safe to echo, else ours
    log_extra: dict[str, Any] = field(default_factory=dict)  # the access line's fields
    rejected: GatewayError | None = None  # the lane refused the request before its view

    @classmethod
    def of(cls, request: HttpRequest) -> RequestNotes:
        """The request's notes, made at the first call."""
        notes: RequestNotes | None = request.__dict__.get(_KEY)
        if notes is None:
            notes = request.__dict__[_KEY] = cls()
        return notes


class ErrorResponse(HttpResponse):
    """A response with the protocol's error body (exception_handlers.error_response), carrying
    its code and param for the access line: the code that answers has no request at hand."""

    log_fields: dict[str, Any]
