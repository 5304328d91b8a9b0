"""`POST /v1/chat/completions` and `POST /v1/embeddings` under the gateway's keys, routes,
model allowlists and usage accounting, passed through to the route's Chat Completions
targets (upstreams/passthrough.py)."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from . import db, services
from .auth import Principal
from .gateway import route_for
from .limits import Grant, admit
from .router import route_call
from .metrics import upstream_error
from .models import UsageRecord
from .protocol.errors import GatewayError, InvalidRequest
from .upstreams.passthrough import body_chunks, forward, usage_tokens
from .views import _json_body, api_endpoint

log = logging.getLogger("gateway.passthrough")

_recording: set[asyncio.Task] = set()


async def _relay(request: HttpRequest, principal: Principal, *, path: str, endpoint: str) -> HttpResponse:
    body = _json_body(request)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    request.log_extra["model"] = model  # type: ignore[attr-defined]
    route = await route_for(principal, model)
    request.log_extra["routed"] = True  # type: ignore[attr-defined]
    stream = endpoint == UsageRecord.Endpoint.CHAT_COMPLETIONS and body.get("stream") is True
    grant = await admit(principal, price=route.price, estimate=lambda: _estimate(request.body, body))
    try:
        response = await _forward(request, principal, route, body, path=path, endpoint=endpoint,
                                  model=model, stream=stream, grant=grant)
    except BaseException:
        if grant is not None:
            await grant.end(None)
        raise
    for name, value in (grant.headers if grant is not None else {}).items():
        response[name] = value
    return response


def _estimate(raw: bytes, body: dict[str, Any]) -> int:
    """Tokens to reserve: about four bytes of the request a token, and the answer's cap."""
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return len(raw) // 4 + (cap if isinstance(cap, int) else 0)


async def _forward(request: HttpRequest, principal: Principal, route: Any, body: dict[str, Any], *, path: str,
                   endpoint: str, model: str, stream: bool, grant: Grant | None) -> HttpResponse:
    started = time.monotonic()

    def failed(target: Any, exc: GatewayError) -> None:  # fall back / retry before the first byte, as responses do
        log.warning("upstream %s failed before the first byte: %s", target.label, exc.message)
        upstream_error(target.label, exc.code)

    try:
        _, forwarded, slot = await route_call(route, lambda target: forward(target, path, body, stream=stream),
                                              on_failure=failed)
    except GatewayError as exc:
        _record(principal, endpoint, model, "", exc.status, None, started)
        raise
    content_type = forwarded.response.headers.get("content-type", "application/json")
    if stream:
        usage: dict[str, Any] = {}

        async def chunks():  # type: ignore[no-untyped-def]
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
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    _note_tokens(request, usage)
    _record(principal, endpoint, model, forwarded.target.label, 200, usage, started)
    if grant is not None:
        await grant.end(usage)
    return HttpResponse(raw, content_type=content_type)


def _note_tokens(request: HttpRequest, usage: dict[str, Any] | None) -> None:
    """For the access log and the metrics."""
    input_tokens, output_tokens = usage_tokens(usage)
    request.log_extra.update(input_tokens=input_tokens, output_tokens=output_tokens)  # type: ignore[attr-defined]


def _record(principal: Principal, endpoint: str, model: str, upstream: str, status: int,
            usage: dict[str, Any] | None, started: float) -> None:
    """Store the call's usage without holding up the answer (and even if the client left)."""
    input_tokens, output_tokens = usage_tokens(usage)
    if endpoint == UsageRecord.Endpoint.EMBEDDINGS and output_tokens is None and input_tokens is not None:
        output_tokens = 0
    task = asyncio.ensure_future(db.run(
        services.usage_record, tenant_id=principal.tenant_id, api_key_id=principal.key_id, endpoint=endpoint,
        model=model, upstream=upstream, status=status, input_tokens=input_tokens, output_tokens=output_tokens,
        latency_ms=int((time.monotonic() - started) * 1000)))
    _recording.add(task)
    task.add_done_callback(_recorded)


def _recorded(task: asyncio.Task) -> None:
    _recording.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not record usage: %s", task.exception())


async def chat_completions(request: HttpRequest, principal: Principal) -> HttpResponse:
    return await _relay(request, principal, path="/chat/completions", endpoint=UsageRecord.Endpoint.CHAT_COMPLETIONS)


async def embeddings(request: HttpRequest, principal: Principal) -> HttpResponse:
    return await _relay(request, principal, path="/embeddings", endpoint=UsageRecord.Endpoint.EMBEDDINGS)


chat_completions_endpoint = api_endpoint({"POST": chat_completions})
embeddings_endpoint = api_endpoint({"POST": embeddings})
