"""Provider kind `responses`: an upstream that speaks `/v1/responses` itself (OpenAI, vLLM,
SGLang). The request and the reading of its events are in protocol/native.py."""

from __future__ import annotations

from ..domain import Target
from ..protocol.deltas import UpstreamFailed
from ..protocol.errors import UpstreamError
from ..protocol.native import EventDecoder, build_responses_request, response_to_deltas
from .base import UpstreamRequest
from .chat_completions import Opened, post_json
from .events import EventStreamCall, failed
from .http import provider_headers


async def open_responses(target: Target, request: UpstreamRequest) -> EventStreamCall:
    provider = target.provider
    body = build_responses_request(
        request.request,
        request.items,
        upstream_model=target.upstream_model,
        stream=request.stream,
        tools=request.tools,
        extra_body=provider.options.get("extra_body"),
        prefix=request.prefix,
        scope=target.label,
    )
    headers = provider_headers(provider)
    opened = await post_json(target, f"{provider.base_url}/responses", body, headers, stream=request.stream)
    if isinstance(opened, Opened):
        return EventStreamCall(target, EventDecoder, opened=opened)
    if not isinstance(opened, dict):
        raise UpstreamError(
            f"Upstream '{target.label}' answered with something that is not a Response.", code="upstream_malformed"
        )
    try:
        return EventStreamCall(target, EventDecoder, deltas=response_to_deltas(opened))
    except UpstreamFailed as failure:
        raise failed(target, failure) from None
