"""The /v1 HTTP views: DRF views (drf.ApiView), thin: authenticate, parse, call, render.

Served by the ASGI fast lane on the event loop (asgi.py, drf.py). A create answers
with a plain JSON response (the bytes DRF's renderer would write, at a third of its cost) or,
with `stream: true`, an `EventStream` of server-sent events.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from ..history.views import list_responses, list_responses_schema
from ..orchestration.compact import compact_conversation
from ..orchestration.gateway import Started, start_response
from ..orchestration.input_tokens import count_input_tokens
from ..orchestration.worker import cancel_background, follow_log
from ..protocol import messages_api
from ..protocol.batches import singly
from ..protocol.errors import InvalidRequest, NotFound, ProviderMisconfigured
from ..protocol.events import Event, output_from_events
from ..protocol.request import CreateRequest, parse_compact_request, parse_create_request, parse_input_tokens_request
from ..protocol.surface import header_names
from ..store import db, selectors, services
from ..store.eventlog import event_log
from .asgi import fast_lane
from .drf import ApiRequest, ApiView
from .drf_policies import ApiKeyHeaderAuthentication, KeyOrStaffSessionAuthentication
from .exception_handlers import error_response, json_response
from .openapi import failed_dependency, json_body, json_or_stream, rate_limited, ref, response_header
from .queries import PageQuery, RetrieveQuery
from .sse import EventStream, note_response

log = logging.getLogger("gateway.views")


def _sse_response(request: ApiRequest, batches: AsyncIterator[list[Event]]) -> EventStream:
    return EventStream(batches, settings.GATEWAY_SSE_KEEPALIVE_SECONDS, request.log_extra)


class ResponsesView(ApiView):
    """`/v1/responses`: create a response; list stored ones (history)."""

    # The list may be browsed with a staff session; a create only ever takes a key.
    authentication_classes = (KeyOrStaffSessionAuthentication,)

    @extend_schema(
        operation_id="createResponse",
        tags=["Responses"],
        summary="Create a response",
        description="Run a model response: a JSON body, or server-sent events with `stream: true`. "
        "With `background: true` a worker runs it, and the answer is the queued response.",
        request=json_body("CreateResponseBody"),
        responses={
            **json_or_stream("ResponseResource"),
            **rate_limited(),
            **failed_dependency(),
        },
        parameters=[
            response_header(
                "x-gateway-dropped-tools",
                "Hosted tools this route cannot serve, dropped from the request (comma-separated).",
            ),
            response_header(
                "x-gateway-ignored-fields",
                "Request fields accepted but not applied on this route (comma-separated; README, "
                '"What the gateway does with each field").',
            ),
            response_header(
                "x-gateway-truncated-items",
                "With `truncation: auto`: how many of the oldest items were dropped to fit the context window.",
            ),
        ],
    )
    async def post(self, request: ApiRequest) -> HttpResponseBase:
        body = request.data
        req = parse_create_request(body)  # refuses anything but a JSON object
        request.log_extra["model"] = req.model
        try:
            started = await start_response(self.principal, req, cast(dict[str, Any], body))
        except ProviderMisconfigured:
            request.log_extra["routed"] = True  # the model has a route: its name is a known label
            raise
        request.log_extra["routed"] = True
        request.log_extra["model"] = started.request.model  # a prompt's template may name it
        response = await _answer(request, req, started)
        for name, value in started.rate_limit_headers.items():
            response[name] = value
        planned = started.request
        if planned.dropped_tools:
            response["x-gateway-dropped-tools"] = ",".join(planned.dropped_tools)
        if planned.ignored_fields:
            response["x-gateway-ignored-fields"] = header_names(planned.ignored_fields)
        return response

    @list_responses_schema
    async def get(self, request: ApiRequest) -> Response:
        return await list_responses(request, self.principal)


async def _answer(request: ApiRequest, req: CreateRequest, started: Started) -> HttpResponseBase:
    await started.connect()  # every target failed: a clean HTTP error, nothing streamed
    if req.stream:  # a worker's events are relayed live: the work survives a disconnect
        response = _sse_response(request, started.event_batches())
        if started.truncated_items:  # known for the first step; later steps are in the log
            response["x-gateway-truncated-items"] = str(started.truncated_items)
        return response
    result = await started.to_end()
    note_response(request.log_extra, result)
    if started.error is not None:
        raise started.error
    # A plain JSON response: the same bytes as DRF's Response and renderer, at a third of the cost.
    answer = json_response(result)
    if started.truncated_items:  # truncation "auto" dropped the oldest items to fit the window
        answer["x-gateway-truncated-items"] = str(started.truncated_items)
        request.log_extra["truncated_items"] = started.truncated_items
    return answer


async def _current(tenant_id: int, response_id: str) -> dict[str, Any]:
    """The stored response; for a running worker response, with its output so far.

    On PostgreSQL one statement on the event loop (row and output items: a finished background
    response's final retrieve, bench/background.py), not two ORM queries in a thread."""
    if db.native_async():
        statement = selectors.response_retrieve_statement(tenant_id=tenant_id, response_id=response_id)
        body = selectors.response_from_record(await db.fetch_one(*statement), response_id)
    else:
        body = await db.run(selectors.response_retrieve, tenant_id=tenant_id, response_id=response_id)
    if body["status"] in ("queued", "in_progress") and not body["output"]:
        body["output"] = output_from_events(await event_log().snapshot(response_id))
    return body


async def _running_view(tenant_id: int, response_id: str) -> bytes | None:
    """The Response JSON of a running worker response, as its worker last wrote it beside its
    event log (store/eventlog.py): a poll of a running response reads one Redis key, no
    database. Only the caller's tenant's; anything else (none, another tenant's, Redis
    unreachable) reads the database, which answers the 404s and every ended response."""
    try:
        held = await event_log().running_view(response_id, tenant_id=tenant_id)
    except Exception:  # noqa: BLE001 - the database answers
        return None
    if held is None or held[0] != tenant_id:
        return None
    return held[1]


class ResponseDetailView(ApiView):
    """`/v1/responses/{id}`: retrieve (or stream again, for a background response); delete."""

    @extend_schema(
        operation_id="getResponse",
        tags=["Responses"],
        summary="Retrieve a response",
        description="The stored response; a running background response with its output so far.",
        parameters=RetrieveQuery.openapi_parameters(),
        responses=json_or_stream("ResponseResource"),
    )
    async def get(self, request: ApiRequest, response_id: str) -> HttpResponseBase:
        args = RetrieveQuery.parse(request.query_params)
        if not args["stream"]:
            running = await _running_view(self.principal.tenant_id, response_id)
            if running is not None:
                return HttpResponse(running, content_type="application/json")
            return json_response(await _current(self.principal.tenant_id, response_id))
        row = await db.run(selectors.response_get_row, tenant_id=self.principal.tenant_id, response_id=response_id)
        if not row.on_worker:
            raise InvalidRequest("Only background (worker-run) responses can be streamed again.", param="stream")
        # An expired or lost log (and one Redis cannot give now) ends with the stored state.
        return _sse_response(request, singly(follow_log(response_id, args["starting_after"])))

    @extend_schema(
        operation_id="deleteResponse",
        tags=["Responses"],
        summary="Delete a response",
        responses={200: ref("DeletedResponse")},
    )
    async def delete(self, request: ApiRequest, response_id: str) -> Response:
        await db.run(services.response_delete, tenant_id=self.principal.tenant_id, response_id=response_id)
        return Response({"id": response_id, "object": "response", "deleted": True})


class ResponseCancelView(ApiView):
    """`/v1/responses/{id}/cancel`: stop a background response."""

    @extend_schema(
        operation_id="cancelResponse",
        tags=["Responses"],
        summary="Cancel a background response",
        request=None,
        responses={200: ref("ResponseResource")},
    )
    async def post(self, request: ApiRequest, response_id: str) -> Response:
        tenant_id = self.principal.tenant_id
        row = await db.run(selectors.response_get_row, tenant_id=tenant_id, response_id=response_id)
        if not row.background:
            raise InvalidRequest(
                "Only background responses can be cancelled; this one was not created with 'background': true.",
                param="response_id",
                code="not_background",
            )
        await cancel_background(response_id)
        return Response(await _current(tenant_id, response_id))


class ResponseInputItemsView(ApiView):
    """`/v1/responses/{id}/input_items`: the items a response was given, paged."""

    @extend_schema(
        operation_id="listInputItems",
        tags=["Responses"],
        summary="List a response's input items",
        parameters=PageQuery.openapi_parameters(),
        responses={200: ref("ItemList")},
    )
    async def get(self, request: ApiRequest, response_id: str) -> Response:
        page = await db.run(
            selectors.input_items_page,
            tenant_id=self.principal.tenant_id,
            response_id=response_id,
            **PageQuery.parse(request.query_params),
        )
        return Response(page.as_dict())


class ModelsView(ApiView):
    """`/v1/models`: the models this key may use (in Anthropic's shape for its clients)."""

    authentication_classes = (ApiKeyHeaderAuthentication,)

    @extend_schema(
        operation_id="listModels",
        tags=["Models"],
        summary="List the models this key may use",
        responses={200: ref("ModelList")},
    )
    async def get(self, request: ApiRequest) -> Response:
        models = await db.run(selectors.models_visible, self.principal)
        if request.META.get("HTTP_ANTHROPIC_VERSION"):
            # An Anthropic client (Claude Code, the anthropic SDK) lists models in its own shape.
            data = [anthropic_model(m) for m in models]
            return Response(
                {
                    "data": data,
                    "has_more": False,
                    "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None,
                }
            )
        return Response({"object": "list", "data": models})


def anthropic_model(model: dict[str, Any]) -> dict[str, Any]:
    """A model of /v1/models as Anthropic's ModelInfo."""
    created = datetime.datetime.fromtimestamp(int(model.get("created") or 0), tz=datetime.UTC)
    return {
        "type": "model",
        "id": model["id"],
        "display_name": model["id"],
        "created_at": created.isoformat().replace("+00:00", "Z"),
    }


class ModelDetailView(ApiView):
    """`/v1/models/{model}`."""

    authentication_classes = (ApiKeyHeaderAuthentication,)

    @extend_schema(operation_id="getModel", tags=["Models"], summary="Retrieve a model", responses={200: ref("Model")})
    async def get(self, request: ApiRequest, model: str) -> Response:
        data = [m for m in await db.run(selectors.models_visible, self.principal) if m["id"] == model]
        if not data:
            raise NotFound(f"The model '{model}' does not exist.", param="model", code="model_not_found")
        if request.META.get("HTTP_ANTHROPIC_VERSION"):
            return Response(anthropic_model(data[0]))
        return Response(data[0])


class ResponseCompactView(ApiView):
    """`/v1/responses/compact`: a conversation's context, compacted into one item."""

    @extend_schema(
        operation_id="compactResponse",
        tags=["Responses"],
        summary="Compact a conversation",
        description="The routed model summarises the conversation (`input` and/or `previous_response_id`); "
        "the answer keeps the user messages verbatim and adds a `compaction` item whose "
        "`encrypted_content` (sealed by this gateway for the key's tenant) stands for the rest "
        "in a later request's `input`.",
        request=json_body("CompactRequest"),
        responses={
            200: ref("CompactedResponse"),
            **rate_limited(),
        },
    )
    async def post(self, request: ApiRequest) -> Response:
        compacted, rate_limit_headers = await compact_conversation(self.principal, parse_compact_request(request.data))
        request.log_extra.update(response_id=compacted["id"], response_status="completed")
        return Response(compacted, headers=rate_limit_headers)


class ResponseInputTokensView(ApiView):
    """`/v1/responses/input_tokens`: what a create with this body would send, counted."""

    @extend_schema(
        operation_id="countInputTokens",
        tags=["Responses"],
        summary="Count a request's input tokens",
        description="What a create with this body would send to the model, counted: exactly where the "
        "upstream counts (`x-gateway-token-count: exact`), else estimated.",
        request=json_body("CreateResponseBody"),
        responses={
            200: ref("InputTokens"),
            **rate_limited(),
        },
        parameters=[response_header("x-gateway-token-count", "`exact` or `estimate`.")],
    )
    async def post(self, request: ApiRequest) -> Response:
        count, exact, rate_limit_headers = await count_input_tokens(
            self.principal, parse_input_tokens_request(request.data), cast(dict[str, Any], request.data)
        )
        return Response(
            {"object": "response.input_tokens", "input_tokens": count},
            headers={"x-gateway-token-count": "exact" if exact else "estimate", **rate_limit_headers},
        )


@fast_lane
async def not_found(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
    if request.path.startswith(messages_api.BATCHES_PATH):
        refused = NotFound(messages_api.BATCHES_NOT_SERVED, code="not_found")
        return error_response(refused, messages_api.error_body(refused))
    return error_response(NotFound(f"Unknown endpoint {request.method} {request.path}.", code="unknown_url"))
