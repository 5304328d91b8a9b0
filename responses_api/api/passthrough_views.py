"""`POST /v1/chat/completions` and `POST /v1/embeddings` under the gateway's keys, routes,
model allowlists and usage accounting, passed through to the route's Chat Completions
targets (upstreams/passthrough.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema

from ..domain import Principal
from ..engine.failover import route_call
from ..observability.metrics import upstream_error
from ..orchestration.admission import route_for
from ..orchestration.guardrails import (
    check_input,
    guarded_batches,
    output_guard,
    record_output,
    refuse_unchecked_token_ids,
)
from ..orchestration.limits import Grant, admit
from ..protocol.chat_translation import ChatWriter, chat_to_responses_body, chat_usage, sse
from ..protocol.errors import GatewayError, InvalidRequest, ProviderMisconfigured
from ..protocol.ids import new_id
from ..protocol.output_guard import OutputGuard
from ..protocol.request import CreateRequest, parse_create_request
from ..protocol.surface import REPORTED_FIELDS, header_names, unapplied_chat_fields
from ..store.usage import Endpoint, usage_writer
from ..upstreams import UpstreamRequest, applied_fields, open_call
from ..upstreams.dialects import dialect_of
from ..upstreams.passthrough import Forwarded, body_chunks, forward, usage_tokens
from .drf import ApiRequest, ApiView
from .exception_handlers import json_response
from .openapi import json_body, rate_limited, response_header

log = logging.getLogger("gateway.passthrough")


async def _relay(request: ApiRequest, principal: Principal, *, path: str, endpoint: str) -> HttpResponseBase:
    body = request.data
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    request.log_extra["model"] = model
    try:
        route = await route_for(principal, model)
    except ProviderMisconfigured:
        request.log_extra["routed"] = True  # the model has a route: its name is a known label
        raise
    request.log_extra["routed"] = True
    # The input guardrails, before any upstream call: the client's text (messages, or what is embedded).
    chat = endpoint == Endpoint.CHAT_COMPLETIONS
    if not chat:
        await refuse_unchecked_token_ids(principal, model, body)
    body = await check_input(
        principal,
        model,
        body,
        ("messages", "prompt") if chat else ("input",),
        where="chat.completions" if chat else "embeddings",
    )
    stream = endpoint == Endpoint.CHAT_COMPLETIONS and body.get("stream") is True
    # The output guardrails (one cached look-up): a guarded answer is read as deltas, whatever
    # the upstream's kind, so that they see it before the client does.
    guard = await output_guard(tenant_id=principal.tenant_id, key_id=principal.key_id, model=model) if chat else None
    grant = await admit(
        principal, price=route.price, estimate=lambda: len(request.body) // 4, output_cap=_output_cap(body)
    )
    try:
        response = await _forward(
            request,
            principal,
            route,
            body,
            path=path,
            endpoint=endpoint,
            model=model,
            stream=stream,
            grant=grant,
            guard=guard,
        )
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
    for name, value in (grant.headers if grant is not None else {}).items():
        response[name] = value
    return response


def _read_as_responses(body: dict[str, Any], *, output_floor: bool) -> CreateRequest:
    """The Chat body as a Responses create. A cap under the Responses API's floor of 16 is
    refused only where the upstream is a Responses server; Chat Completions clients may ask an
    Anthropic upstream for fewer tokens, and get exactly that cap."""
    converted = chat_to_responses_body(body, output_floor=output_floor)
    limit = converted.get("max_output_tokens")
    if type(limit) is int and 1 <= limit < 16:
        return dataclasses.replace(
            parse_create_request({**converted, "max_output_tokens": 16}), max_output_tokens=limit
        )
    return parse_create_request(converted)


# What a client (or the operator reading its error) does about a model without the endpoint. The
# upstream's own reason is quoted before it and may advise its own operator instead (llama.cpp:
# "start it with --embeddings", which would stop the bundled model's completions).
_WHAT_TO_DO = {
    "embeddings": (
        " For embeddings, call a model routed to an embedding model (e.g. nomic-embed-text on Ollama, "
        "text-embedding-3-small on OpenAI): add it as a provider and model in GATEWAY_CONFIG "
        "(deploy/gateway.yaml) or in the admin."
    ),
}


def _output_cap(body: dict[str, Any]) -> int:
    """The answer's cap, reserved at the output price (the input: about four bytes a token)."""
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return cap if isinstance(cap, int) and cap > 0 else 0


async def _forward(
    request: ApiRequest,
    principal: Principal,
    route: Any,
    body: dict[str, Any],
    *,
    path: str,
    endpoint: str,
    model: str,
    stream: bool,
    grant: Grant | None,
    guard: OutputGuard | None = None,
) -> HttpResponseBase:
    started = time.monotonic()

    def failed(target: Any, exc: GatewayError) -> None:  # fall back / retry before the first byte, as responses do
        log.warning("upstream %s failed before the first byte: %s", target.label, exc.message)
        upstream_error(target.label, exc.code)

    # The Chat request read as a Responses one, once a target needs it: one reading for each floor
    # (a fallback of another kind reads a cap under 16 otherwise).
    translated: dict[bool, CreateRequest] = {}

    async def open_one(target: Any) -> Any:
        kind = target.provider.kind
        wire = dialect_of(target).wire
        if endpoint in wire.forwards and guard is None:
            try:
                return await forward(target, path, body, stream=stream)
            except InvalidRequest as exc:
                if exc.code != "model_not_supported":
                    raise
                what = "embeddings" if endpoint == Endpoint.EMBEDDINGS else "chat completions"
                raise InvalidRequest(
                    f"The model '{model}' serves no {what}. {exc.message}{_WHAT_TO_DO.get(what, '')}",
                    param="model",
                    code="model_not_supported",
                ) from None
        if endpoint == Endpoint.EMBEDDINGS:
            raise InvalidRequest(
                f"The model '{model}' serves no embeddings (its upstream is {kind}).",
                param="model",
                code="model_not_supported",
            )
        floor = wire.output_floor
        if floor not in translated:
            translated[floor] = _read_as_responses(body, output_floor=floor)
        req = translated[floor]
        return await open_call(
            target, UpstreamRequest(request=req, items=req.input_items, tools=req.tools, stream=stream)
        )

    try:
        target, forwarded, slot = await route_call(route, open_one, on_failure=failed)
    except GatewayError as exc:
        _record(principal, endpoint, model, "", exc.status, None, started)
        raise
    if not isinstance(forwarded, Forwarded):
        return await _translated(
            request,
            principal,
            forwarded,
            slot,
            target,
            body,
            model=model,
            stream=stream,
            grant=grant,
            started=started,
            guard=guard,
        )
    content_type = forwarded.response.headers.get("content-type", "application/json")
    if stream:
        usage: dict[str, Any] = {}

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in body_chunks(forwarded, usage):
                    yield chunk
            finally:
                await slot.release()
                _note_tokens(request, usage)
                _record(principal, endpoint, model, forwarded.target.label, 200, usage, started)
                if grant is not None:
                    await grant.end(usage)

        response = StreamingHttpResponse(chunks(), content_type=content_type)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    try:
        raw = await forwarded.response.read()
    finally:
        forwarded.response.release()
        await slot.release()
    answer: Any
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    answered_usage = answer.get("usage") if isinstance(answer, dict) else None
    _note_tokens(request, answered_usage)
    _record(principal, endpoint, model, forwarded.target.label, 200, answered_usage, started)
    if grant is not None:
        await grant.end(answered_usage)
    return HttpResponse(raw, content_type=content_type)


async def _translated(
    request: ApiRequest,
    principal: Principal,
    call: Any,
    slot: Any,
    target: Any,
    body: dict[str, Any],
    *,
    model: str,
    stream: bool,
    grant: Grant | None,
    started: float,
    guard: OutputGuard | None = None,
) -> HttpResponseBase:
    """A Chat Completions answer written from a native Responses or Anthropic upstream's deltas
    (or any upstream's, when output guardrails apply: `guard` checks them first)."""
    writer = ChatWriter(model, "chatcmpl-" + new_id("gw").split("_", 1)[1])
    endpoint = Endpoint.CHAT_COMPLETIONS

    async def finish(status: int) -> None:
        await record_output(guard, principal, response_id=writer.id, where="chat.completions")
        await slot.release()
        usage = chat_usage(writer.usage)
        _note_tokens(request, usage)
        _record(principal, endpoint, model, target.label, status, usage, started)
        if grant is not None:
            await grant.end(usage)

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
        await finish(200)
        return _announce(json_response(writer.completion()), body, target)
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True

    async def chunks() -> AsyncIterator[bytes]:
        status = 200
        try:
            yield sse(writer.opening())
            async for batch in guarded_batches(call, guard, input_estimate=len(request.body) // 4):
                written = [chunk for delta in batch if (chunk := writer.feed(delta)) is not None]
                if written:
                    yield b"".join(sse(chunk) for chunk in written)
            for chunk in writer.closing(include_usage):
                yield sse(chunk)
            yield b"data: [DONE]\n\n"
        except GatewayError as exc:  # mid-stream: OpenAI's way, an error object and no [DONE]
            status = exc.status
            yield sse(exc.body())
        finally:
            await call.aclose()
            await finish(status)

    response = StreamingHttpResponse(chunks(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return _announce(response, body, target)


def _announce(response: HttpResponseBase, body: dict[str, Any], target: Any) -> HttpResponseBase:
    """Name the fields this target's kind accepted without applying (protocol/surface.py); of
    those whose use depends on their value, what its translation reports."""
    kind = target.provider.kind
    applied = None
    # Reported fields: only where the body is translated (one forwarded as is applies them all).
    if Endpoint.CHAT_COMPLETIONS not in dialect_of(target).wire.forwards and REPORTED_FIELDS[kind] & body.keys():
        _, applied = applied_fields(target, parse_create_request(chat_to_responses_body(body)))
    ignored = unapplied_chat_fields(body, kind, applied)
    if ignored:
        response["x-gateway-ignored-fields"] = header_names(ignored)
    return response


def _note_tokens(request: ApiRequest, usage: dict[str, Any] | None) -> None:
    """For the access log and the metrics."""
    input_tokens, output_tokens = usage_tokens(usage)
    request.log_extra.update(input_tokens=input_tokens, output_tokens=output_tokens)


def _record(
    principal: Principal,
    endpoint: str,
    model: str,
    upstream: str,
    status: int,
    usage: dict[str, Any] | None,
    started: float,
) -> None:
    """Store the call's usage without holding up the answer (and even if the client left):
    in the next batch of usage records (store/usage.py)."""
    input_tokens, output_tokens = usage_tokens(usage)
    if endpoint == Endpoint.EMBEDDINGS and output_tokens is None and input_tokens is not None:
        output_tokens = 0
    usage_writer.add(
        tenant_id=principal.tenant_id,
        api_key_id=principal.key_id,
        endpoint=endpoint,
        model=model,
        upstream=upstream,
        status=status,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_ms=int((time.monotonic() - started) * 1000),
    )


class ChatCompletionsView(ApiView):
    """`/v1/chat/completions`, passed through to the routed upstream (usage recorded)."""

    @extend_schema(
        operation_id="createChatCompletion",
        tags=["Pass-through"],
        summary="Chat Completions, passed through",
        description="Relayed to the upstream the model routes to, and its usage recorded; "
        "the body and the answer (JSON or server-sent events) are the upstream's own.",
        request=json_body("PassThroughBody"),
        responses={
            (200, "application/json"): OpenApiResponse({"type": "object"}, description="The upstream's answer."),
            (200, "text/event-stream"): OpenApiResponse({"type": "object"}),
            **rate_limited(),
        },
        parameters=[
            response_header(
                "x-gateway-ignored-fields",
                "On a route translated to a Responses or Anthropic upstream: the fields accepted but "
                "not applied (comma-separated).",
            )
        ],
    )
    async def post(self, request: ApiRequest) -> HttpResponseBase:
        return await _relay(request, self.principal, path="/chat/completions", endpoint=Endpoint.CHAT_COMPLETIONS)


class EmbeddingsView(ApiView):
    """`/v1/embeddings`, passed through to the routed upstream (usage recorded)."""

    @extend_schema(
        operation_id="createEmbedding",
        tags=["Pass-through"],
        summary="Embeddings, passed through",
        description="Relayed to the upstream the model routes to, and its usage recorded.",
        request=json_body("PassThroughBody"),
        responses={200: OpenApiResponse({"type": "object"}, description="The upstream's answer."), **rate_limited()},
    )
    async def post(self, request: ApiRequest) -> HttpResponseBase:
        return await _relay(request, self.principal, path="/embeddings", endpoint=Endpoint.EMBEDDINGS)
