"""The /v1 HTTP views: thin (auth, parse, call, render). Async, served under ASGI."""

from __future__ import annotations


import logging
from typing import Any
from collections.abc import AsyncIterator, Awaitable, Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from . import db, selectors, services
from .asgi import fast_lane
from .auth import Principal, bearer_token
from .exception_handlers import error_response, json_response
from .background import cancel_background
from .eventlog import event_log
from .gateway import WorkerStarted, compact_conversation, count_input_tokens, principal_for, start_response
from .history.views import list_responses
from .outages import unavailable
from .protocol import jsonlimits
from .protocol.errors import GatewayError, InvalidRequest, NotFound, ServerError
from .protocol.events import Event, output_from_events
from .engine import ResponseRun
from .protocol.request import CreateRequest, parse_create_request
from .sse import EventStream, note_response

log = logging.getLogger("gateway.views")

View = Callable[..., Awaitable[HttpResponse]]


def api_endpoint(methods: dict[str, View]) -> Callable[..., Awaitable[HttpResponse]]:
    """Dispatch by method, authenticate, and map every GatewayError to the protocol body."""

    @csrf_exempt
    async def endpoint(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        handler = methods.get(request.method or "")
        if handler is None:
            return json_response(
                {
                    "error": {
                        "message": f"Method {request.method} not allowed.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "method_not_allowed",
                    }
                },
                status=405,
                headers={"Allow": ", ".join(methods)},
            )
        try:
            principal = await principal_for(bearer_token(request.headers.get("authorization")))
            request.log_extra["tenant"] = principal.tenant_name  # type: ignore[attr-defined]
            return await handler(request, principal, **kwargs)
        except GatewayError as exc:
            return error_response(exc)
        except Exception as exc:
            outage = unavailable(exc)
            if outage is not None:
                return error_response(outage)
            # Never an HTML 500: the protocol's error body, and the traceback in the log.
            log.exception("unhandled error", extra={"request_id": getattr(request, "request_id", None)})
            return error_response(ServerError("The gateway failed to handle this request."))

    endpoint.csrf_exempt = True  # type: ignore[attr-defined]
    return fast_lane(endpoint)


def _json_body(request: HttpRequest) -> Any:
    try:
        return jsonlimits.loads(request.body or b"null")
    except jsonlimits.JsonTooDeep as exc:
        raise InvalidRequest(f"The request body {exc}; this gateway accepts at most {exc.limit}.") from None
    except ValueError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.") from None


def _sse_response(request: HttpRequest, events: AsyncIterator[Event]) -> EventStream:
    return EventStream(events, settings.GATEWAY_SSE_KEEPALIVE_SECONDS, request.log_extra)  # type: ignore[attr-defined]


async def create_response(request: HttpRequest, principal: Principal) -> HttpResponse:
    body = _json_body(request)
    req = parse_create_request(body)
    request.log_extra["model"] = req.model  # type: ignore[attr-defined]
    started = await start_response(principal, req, body)
    request.log_extra["routed"] = True  # type: ignore[attr-defined]
    response = await _answer(request, req, started)
    for name, value in _rate_limit_headers(started).items():
        response[name] = value
    if req.dropped_tools:
        response["x-gateway-dropped-tools"] = ",".join(req.dropped_tools)
    return response


def _rate_limit_headers(started: ResponseRun | WorkerStarted) -> dict[str, str]:
    if isinstance(started, WorkerStarted):
        return started.rate_limit_headers
    grant = getattr(started.persistence, "grant", None)
    return grant.headers if grant is not None else {}


async def _answer(request: HttpRequest, req: CreateRequest, started: ResponseRun | WorkerStarted) -> HttpResponse:
    if isinstance(started, WorkerStarted):
        if req.stream:  # relay the worker's events live; the work survives a disconnect
            return _sse_response(request, event_log().read(started.response_id))
        note_response(request.log_extra, started.response)  # type: ignore[attr-defined]
        return json_response(started.response)
    run = started
    await run.connect()  # every target failed: a clean HTTP error, nothing streamed
    if req.stream:
        response = _sse_response(request, run.events())
        if run.truncated_items:  # known for the first step; later steps are in the log
            response["x-gateway-truncated-items"] = str(run.truncated_items)
        return response
    result = await run.run_to_end()
    note_response(request.log_extra, result)  # type: ignore[attr-defined]
    if run.error is not None:
        raise run.error
    response = json_response(result)
    if run.truncated_items:  # truncation "auto" dropped the oldest items to fit the window
        response["x-gateway-truncated-items"] = str(run.truncated_items)
        request.log_extra["truncated_items"] = run.truncated_items  # type: ignore[attr-defined]
    return response


async def _current(principal: Principal, response_id: str) -> dict:
    """The stored response; for a running worker response, with its output so far."""
    body = await db.run(selectors.response_retrieve, tenant_id=principal.tenant_id, response_id=response_id)
    if body["status"] in ("queued", "in_progress") and not body["output"]:
        body["output"] = output_from_events(await event_log().snapshot(response_id))
    return body


async def retrieve_response(request: HttpRequest, principal: Principal, response_id: str) -> HttpResponse:
    if request.GET.get("stream") in ("true", "1", "True"):
        row = await db.run(selectors.response_get_row, tenant_id=principal.tenant_id, response_id=response_id)
        if not row.on_worker:
            raise InvalidRequest("Only background (worker-run) responses can be streamed again.", param="stream")
        raw_after = request.GET.get("starting_after")
        try:
            after = int(raw_after) if raw_after is not None else -1
        except ValueError:
            raise InvalidRequest("'starting_after' must be an integer.", param="starting_after") from None
        if await event_log().last_sequence_number(response_id) < 0:
            raise NotFound("The event log of this response has expired.", param="stream", code="event_log_expired")
        return _sse_response(request, event_log().read(response_id, after))
    return json_response(await _current(principal, response_id))


async def delete_response(request: HttpRequest, principal: Principal, response_id: str) -> HttpResponse:
    await db.run(services.response_delete, tenant_id=principal.tenant_id, response_id=response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


async def cancel_response(request: HttpRequest, principal: Principal, response_id: str) -> HttpResponse:
    row = await db.run(selectors.response_get_row, tenant_id=principal.tenant_id, response_id=response_id)
    if not row.background:
        raise InvalidRequest(
            "Only background responses can be cancelled; this one was not created with 'background': true.",
            param="response_id",
            code="not_background",
        )
    await cancel_background(response_id)
    return json_response(await _current(principal, response_id))


def _limit(raw: str | None) -> int:
    if raw is None:
        return 20
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest("'limit' must be an integer between 1 and 100.", param="limit") from None
    if not 1 <= value <= 100:
        raise InvalidRequest("'limit' must be an integer between 1 and 100.", param="limit")
    return value


async def list_input_items(request: HttpRequest, principal: Principal, response_id: str) -> HttpResponse:
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    page = await db.run(
        selectors.input_items_page,
        tenant_id=principal.tenant_id,
        response_id=response_id,
        after=request.GET.get("after"),
        limit=_limit(request.GET.get("limit")),
        order=order,
    )
    return json_response(page.as_dict())


async def list_models(request: HttpRequest, principal: Principal) -> HttpResponse:
    data = await db.run(selectors.models_visible, principal)
    return json_response({"object": "list", "data": data})


async def retrieve_model(request: HttpRequest, principal: Principal, model: str) -> HttpResponse:
    data = [m for m in await db.run(selectors.models_visible, principal) if m["id"] == model]
    if not data:
        raise NotFound(f"The model '{model}' does not exist.", param="model", code="model_not_found")
    return json_response(data[0])


async def compact_response(request: HttpRequest, principal: Principal) -> HttpResponse:
    compacted = await compact_conversation(principal, _json_body(request))
    request.log_extra.update(response_id=compacted["id"], response_status="completed")  # type: ignore[attr-defined]
    return json_response(compacted)


responses = api_endpoint({"POST": create_response, "GET": list_responses})
response_compact = api_endpoint({"POST": compact_response})


async def input_tokens(request: HttpRequest, principal: Principal) -> HttpResponse:
    count, exact = await count_input_tokens(principal, _json_body(request))
    return json_response(
        {"object": "response.input_tokens", "input_tokens": count},
        headers={"x-gateway-token-count": "exact" if exact else "estimate"},
    )


response_input_tokens = api_endpoint({"POST": input_tokens})
response_detail = api_endpoint({"GET": retrieve_response, "DELETE": delete_response})
response_cancel = api_endpoint({"POST": cancel_response})
response_input_items = api_endpoint({"GET": list_input_items})
models = api_endpoint({"GET": list_models})
model_detail = api_endpoint({"GET": retrieve_model})


@fast_lane
async def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    return error_response(NotFound(f"Unknown endpoint {request.method} {request.path}.", code="unknown_url"))
