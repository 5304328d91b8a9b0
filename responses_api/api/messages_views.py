"""Anthropic's Messages API under the gateway's keys (the inbound dialect of
protocol/dialects.py, `messages`): `POST /v1/messages` (JSON and streamed) and
`POST /v1/messages/count_tokens`, as Claude Code and the `anthropic` SDK send them (`x-api-key`
or `Authorization: Bearer`, `anthropic-version`, `anthropic-beta`).

On every route, as /v1/chat/completions is served (passthrough_views.py): the key, the model
allowlist, rate limits and budgets (`limits.admit`), the router's retries and fallback before
the first byte, a usage record (cache reads and writes counted), the access log and metrics.
To an Anthropic target the request goes in substance as the client sent it (system blocks,
`cache_control` marks, signed thinking, tools, images, documents, metadata, stop sequences,
its `anthropic-beta` values), only the model replaced by the route's; to a Chat Completions or a
native Responses target it is translated through the protocol core (protocol/messages_api.py)
and the answer written back as a Message or Anthropic's stream of events.

Storage: each turn is stored linear in its new messages (orchestration/message_turns.py; the
rule and why: protocol/messages_api.py), unless the client sends `x-gateway-store: false`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema

from ..domain import Principal, Route, Target
from ..engine.failover import route_call
from ..observability.metrics import upstream_error
from ..orchestration.admission import route_for
from ..orchestration.guardrails import check_input, guarded_batches, output_guard, record_output
from ..orchestration.limits import Grant, admit
from ..orchestration.message_turns import store_turn
from ..protocol import dialects
from ..protocol.deltas import Usage
from ..protocol.errors import GatewayError, InvalidRequest, ProviderMisconfigured
from ..protocol.ids import new_id
from ..protocol.messages_api import MessagesWriter, sse
from ..protocol.output_guard import OutputGuard
from ..protocol.request import CreateRequest, parse_create_request
from ..protocol.surface import header_names
from ..protocol.tokens import estimate_request
from ..store.usage import Endpoint, usage_writer
from ..upstreams import UpstreamRequest, open_call
from ..upstreams.anthropic import MessagesUsage, forward_messages
from ..upstreams.dialects import dialect_of
from ..upstreams.passthrough import Forwarded, body_chunks
from .drf import ApiRequest, ApiView
from .drf_policies import ApiKeyHeaderAuthentication
from .exception_handlers import as_gateway_error, error_response, json_response
from .openapi import anthropic_errors, json_body

log = logging.getLogger("gateway.messages")
DIALECT = dialects.inbound("messages")


def _anthropic_errors(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    error = as_gateway_error(exc, context)
    if error is None:
        return None
    if error.status == 401 and "Authorization: Bearer" in error.message:
        error = GatewayError(
            "You didn't provide an API key. Send it as 'x-api-key: <key>' (or 'Authorization: Bearer <key>').",
            code=error.code,
            status=401,
        )
    return error_response(error, DIALECT.error_body(error))


class MessagesApiView(ApiView):
    """A view of Anthropic's dialect: its key header, its error shape."""

    authentication_classes = (ApiKeyHeaderAuthentication,)
    refuses_openai_beta = False  # `?beta=true`: Claude Code's and the SDK's beta namespace

    def get_exception_handler(self) -> Any:
        return _anthropic_errors


def _betas(request: ApiRequest) -> str | None:
    value = request.META.get("HTTP_ANTHROPIC_BETA", "").strip()
    return value or None


def _native(target: Target) -> bool:
    return target.provider.kind == DIALECT.native_upstream


def _read_as_responses(body: dict[str, Any], *, output_floor: bool) -> CreateRequest:
    """The Messages body as a Responses create (a cap under 16 kept where the upstream takes it,
    as passthrough_views._read_as_responses does for Chat)."""
    converted = DIALECT.to_responses_body(body, output_floor=output_floor)
    limit = converted.get("max_output_tokens")
    if type(limit) is int and 1 <= limit < 16:
        return dataclasses.replace(
            parse_create_request({**converted, "max_output_tokens": 16}), max_output_tokens=limit
        )
    return parse_create_request(converted)


class MessagesView(MessagesApiView):
    """`/v1/messages`: Anthropic's Messages API on any route."""

    @extend_schema(
        operation_id="createMessage",
        tags=["Anthropic Messages"],
        summary="Anthropic Messages, on any route",
        description="Anthropic's Messages API (Claude Code, the anthropic SDK): sent in substance as is to an "
        "Anthropic upstream, translated for Chat Completions and Responses upstreams; errors in Anthropic's shape.",
        request=json_body("MessagesBody"),
        responses={
            (200, "application/json"): OpenApiResponse({"type": "object"}, description="A Message."),
            (200, "text/event-stream"): OpenApiResponse({"type": "object"}),
            **anthropic_errors(),
        },
    )
    async def post(self, request: ApiRequest) -> HttpResponseBase:
        principal = self.principal
        body = DIALECT.check(request.data)
        model: str = body["model"]
        request.log_extra["model"] = model
        betas = _betas(request)
        if betas:  # the access log says which betas Anthropic's clients ask for, on every route
            request.log_extra["anthropic_beta"] = betas
        try:
            route = await route_for(principal, model)
        except ProviderMisconfigured:
            request.log_extra["routed"] = True
            raise
        request.log_extra["routed"] = True
        # The input guardrails, before any upstream call, on every route kind: the Anthropic
        # route and the stored turns get the redacted body too.
        body = await check_input(principal, model, body, ("system", "messages"), where="messages")
        stream = body.get("stream") is True
        grant = await admit(
            principal, price=route.price, estimate=lambda: len(request.body) // 4, output_cap=body["max_tokens"]
        )
        try:
            response = await _serve(request, principal, route, body, model=model, stream=stream, grant=grant)
        except BaseException:
            if grant is not None:
                await grant.end(None)
            raise
        for name, value in (grant.headers if grant is not None else {}).items():
            response[name] = value
        return response


async def _serve(
    request: ApiRequest,
    principal: Principal,
    route: Route,
    body: dict[str, Any],
    *,
    model: str,
    stream: bool,
    grant: Grant | None,
) -> HttpResponseBase:
    started = time.monotonic()
    betas = _betas(request)
    translated: dict[bool, CreateRequest] = {}
    # The store rule (protocol/messages_api.py): stored unless the client opts out.
    store = request.META.get("HTTP_X_GATEWAY_STORE", "").strip().lower() != "false"
    turn = _Turn(request, principal, body, model=model, store=store, grant=grant, started=started)
    # The output guardrails (one cached look-up): a guarded answer is read as deltas, an
    # Anthropic route's too, so that they see it before the client does.
    guard = await output_guard(tenant_id=principal.tenant_id, key_id=principal.key_id, model=model)

    def failed(target: Target, exc: GatewayError) -> None:
        log.warning("upstream %s failed before the first byte: %s", target.label, exc.message)
        upstream_error(target.label, exc.code)

    async def open_one(target: Target) -> Any:
        if _native(target) and guard is None:
            return await forward_messages(target, body, stream=stream, betas=betas)
        floor = dialect_of(target).wire.output_floor
        if floor not in translated:
            translated[floor] = _read_as_responses(body, output_floor=floor)
        req = translated[floor]
        return await open_call(
            target,
            UpstreamRequest(
                request=req, items=req.input_items, tools=req.tools, stream=stream, tenant_id=principal.tenant_id
            ),
        )

    try:
        target, opened, slot = await route_call(route, open_one, on_failure=failed)
    except GatewayError as exc:
        _record(principal, model, "", exc.status, None, started)
        raise
    if isinstance(opened, Forwarded):
        return await _forwarded(turn, opened, slot, stream=stream)
    return await _translated(turn, opened, slot, target, stream=stream, guard=guard)


async def _forwarded(turn: _Turn, forwarded: Forwarded, slot: Any, *, stream: bool) -> HttpResponseBase:
    """An Anthropic upstream's answer as it sent it, its usage (and, to store the turn, its
    content) read on the way."""
    label = forwarded.target.label
    content_type = forwarded.response.headers.get("content-type", "application/json")
    writer = turn.writer() if turn.store else None
    reader = MessagesUsage(writer)
    if stream:

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in body_chunks(forwarded, {}):
                    reader.scan(chunk)
                    yield chunk
            finally:
                await slot.release()
                if writer is not None:
                    writer.closing()
                # Only a whole answer is stored (the upstream's message_stop seen).
                await turn.settle(label, 200, reader.usage, writer if reader.finished else None)

        response = StreamingHttpResponse(chunks(), content_type=content_type)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    try:
        raw = await forwarded.response.read()
    finally:
        forwarded.response.release()
        await slot.release()
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        reader.message(answer)
    if writer is not None:
        writer.message()
    await turn.settle(label, 200, reader.usage, writer)
    return HttpResponse(raw, content_type=content_type)


async def _translated(
    turn: _Turn, call: Any, slot: Any, target: Target, *, stream: bool, guard: OutputGuard | None = None
) -> HttpResponseBase:
    """A Message written from a Chat Completions or a native Responses upstream's deltas (or any
    upstream's, when output guardrails apply: `guard` checks them first; what it redacts is
    what the client gets and the turn stores)."""
    writer = turn.writer()
    request, body = turn.request, turn.body

    async def finish(status: int, whole: bool = True) -> None:
        await record_output(guard, turn.principal, response_id=writer.id, where="messages")
        await slot.release()
        # Only a whole answer is stored (a client gone mid-stream leaves a usage record).
        await turn.settle(target.label, status, writer.usage, writer if status == 200 and whole else None)

    if not stream:
        try:
            async for batch in guarded_batches(call, guard, input_estimate=len(request.body) // 4):
                for delta in batch:
                    writer.feed(delta)
        except GatewayError as exc:
            await finish(exc.status)
            raise
        finally:
            await call.aclose()
        message = writer.message()
        await finish(200)
        return _announce(json_response(message), request, body)

    async def events() -> AsyncIterator[bytes]:
        status, whole = 200, False
        try:
            yield b"".join(sse(event) for event in writer.opening())
            # One write per batch of deltas that came together (one network read), as the
            # Responses streams are written (api/sse.py).
            async for batch in guarded_batches(call, guard, input_estimate=len(request.body) // 4):
                events = [event for delta in batch for event in writer.feed(delta)]
                if events:
                    yield b"".join(sse(event) for event in events)
            closing = writer.closing()
            whole = True
            yield b"".join(sse(event) for event in closing)
        except GatewayError as exc:  # mid-stream: Anthropic's way, an `error` event ends the stream
            status = exc.status
            yield sse(DIALECT.error_body(exc))
        finally:
            await call.aclose()
            await finish(status, whole)

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return _announce(response, request, body)


def _announce(response: HttpResponseBase, request: ApiRequest, body: dict[str, Any]) -> HttpResponseBase:
    """Name what a translated route accepted without applying: fields, and the client's betas
    (each only adds optional behaviour of Anthropic's own API: ignored, never refused)."""
    ignored = DIALECT.ignored_fields(body)
    betas = _betas(request)
    if betas:
        ignored += [f"anthropic-beta:{b.strip()}" for b in betas.split(",") if b.strip()]
    if ignored:
        response["x-gateway-ignored-fields"] = header_names(ignored)
    return response


class _Turn:
    """One /v1/messages call's ending: the access log's tokens, the turn stored (its usage with
    it) or a usage record, and the settle of its limits and budgets (cache reads and writes
    priced)."""

    def __init__(
        self,
        request: ApiRequest,
        principal: Principal,
        body: dict[str, Any],
        *,
        model: str,
        store: bool,
        grant: Grant | None,
        started: float,
    ) -> None:
        self.request, self.principal, self.body = request, principal, body
        self.model, self.store, self.grant, self.started = model, store, grant, started

    def writer(self) -> MessagesWriter:
        return DIALECT.writer(self.model, "msg_" + new_id("gw").split("_", 1)[1])  # type: ignore[no-any-return]  # the registry types its writer loosely

    async def settle(self, upstream: str, status: int, usage: Usage | None, writer: MessagesWriter | None) -> None:
        request, principal = self.request, self.principal
        request.log_extra.update(
            input_tokens=usage.input_tokens if usage else None, output_tokens=usage.output_tokens if usage else None
        )
        write_1h = usage.cache_write_1h_tokens if usage else 0
        stored = False
        if self.store and status == 200 and writer is not None:
            try:
                response_id = await store_turn(
                    principal,
                    self.body,
                    writer,
                    model=self.model,
                    upstream=upstream,
                    latency_ms=int((time.monotonic() - self.started) * 1000),
                    cache_write_1h_tokens=write_1h,
                )
                request.log_extra["response_id"] = response_id
                stored = True
            except InvalidRequest as exc:  # a block with no item to store as: its usage is kept
                log.info("a /v1/messages turn is not stored: %s", exc.message)
            except Exception:  # the client has its answer; its usage is not lost
                log.exception("a /v1/messages turn could not be stored; its usage is recorded")
        if not stored:  # the stored response counts its tokens itself (the usage API, budgets)
            _record(principal, self.model, upstream, status, usage, self.started)
        if self.grant is not None:
            await self.grant.end(usage.as_dict() if usage is not None else None, cache_write_1h_tokens=write_1h)


def _record(principal: Principal, model: str, upstream: str, status: int, usage: Usage | None, started: float) -> None:
    usage_writer.add(
        tenant_id=principal.tenant_id,
        api_key_id=principal.key_id,
        endpoint=Endpoint.MESSAGES,
        model=model,
        upstream=upstream,
        status=status,
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        cached_tokens=usage.cached_tokens if usage else None,
        cache_write_tokens=usage.cache_write_tokens if usage else None,
        cache_write_1h_tokens=usage.cache_write_1h_tokens if usage else None,
        latency_ms=int((time.monotonic() - started) * 1000),
    )


class CountTokensView(MessagesApiView):
    """`/v1/messages/count_tokens`: exact on an Anthropic route (the upstream counts), an
    estimate elsewhere (`x-gateway-token-count: estimate`)."""

    @extend_schema(
        operation_id="countMessageTokens",
        tags=["Anthropic Messages"],
        summary="Count a Messages request's input tokens",
        request=json_body("CountTokensBody"),
        responses={200: OpenApiResponse({"type": "object"}), **anthropic_errors()},
    )
    async def post(self, request: ApiRequest) -> HttpResponseBase:
        principal = self.principal
        data = request.data
        if isinstance(data, dict) and "max_tokens" not in data:
            data = {**data, "max_tokens": 1}  # count_tokens takes no max_tokens
        body = DIALECT.check(data)
        body.pop("max_tokens", None)
        body.pop("stream", None)
        request.log_extra["model"] = body["model"]
        route = await route_for(principal, body["model"])
        grant = await admit(principal, concurrent=False)
        try:
            count, exact = await _count(route, body, _betas(request))
        finally:
            if grant is not None:
                await grant.end(None)
        response = json_response({"input_tokens": count}, headers=grant.headers if grant is not None else None)
        response["x-gateway-token-count"] = "exact" if exact else "estimate"
        return response


async def _count(route: Route, body: dict[str, Any], betas: str | None) -> tuple[int, bool]:
    native = [t for t in route.targets if _native(t)]
    if native:
        try:
            forwarded = await forward_messages(
                native[0], body, stream=False, betas=betas, path="/messages/count_tokens"
            )
        except GatewayError as exc:
            if exc.status < 500 and exc.status not in (404, 405):
                raise  # the upstream refused the request itself: the client's to fix
            # An Anthropic-compatible server without the endpoint, or one that is down: estimated.
            log.info("count_tokens: %s did not count (%s); estimated", native[0].label, exc.message)
        else:
            try:
                answer = json.loads(await forwarded.response.read())
            except ValueError:
                answer = None
            finally:
                forwarded.response.release()
            tokens = answer.get("input_tokens") if isinstance(answer, dict) else None
            if type(tokens) is int:
                return tokens, True
    req = _read_as_responses({**body, "max_tokens": 16}, output_floor=True)
    return estimate_request(list(req.input_items), req.instructions, [t.schema() for t in req.tools]), False


__all__ = ["CountTokensView", "MessagesView"]
