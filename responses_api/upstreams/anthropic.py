"""Provider kind `anthropic`: Anthropic's Messages API (`POST {base_url}/messages`, e.g.
https://api.anthropic.com/v1). The request and the reading of its events are in
protocol/anthropic.py. The key goes in `x-api-key`, the API version in `anthropic-version`
(the provider's `anthropic_version` option, default protocol.anthropic.API_VERSION)."""

from __future__ import annotations

from typing import Any

from ..domain import ProviderConfig, Target
from ..protocol.anthropic import (
    API_VERSION,
    STRUCTURED_OUTPUTS_BETA,
    EventDecoder,
    build_messages_request,
    message_to_deltas,
)
from ..protocol.errors import UpstreamError
from ..sealing import SealBroken, sealer
from .base import UpstreamRequest
from .chat_completions import Opened, post_json
from .events import EventStreamCall
from .http import provider_headers


def anthropic_headers(provider: ProviderConfig, *, json_body: bool = True) -> dict[str, str]:
    """The key in `x-api-key` (not a bearer token) and the API version, on every request."""
    return provider_headers(
        provider,
        key_header="x-api-key",
        key_format="{}",
        own={"anthropic-version": str(provider.options.get("anthropic_version") or API_VERSION)},
        json_body=json_body,
    )


async def open_messages(target: Target, request: UpstreamRequest) -> EventStreamCall:
    provider = target.provider
    body = build_messages_request(
        request.request,
        signed_thinking(request.items, request.tenant_id),
        upstream_model=target.upstream_model,
        stream=request.stream,
        tools=request.tools,
        options=provider.options,
        prefix=request.prefix,
        scope=f"{target.label}\n{request.tenant_id}",
    )
    headers = anthropic_headers(provider)
    if "output_format" in body:  # the beta's field: announce the beta (after any the provider sends)
        name = next((k for k in headers if k.lower() == "anthropic-beta"), "anthropic-beta")
        beta = headers.get(name)
        headers[name] = f"{beta},{STRUCTURED_OUTPUTS_BETA}" if beta else STRUCTURED_OUTPUTS_BETA
    opened = await post_json(target, f"{provider.base_url}/messages", body, headers, stream=request.stream)
    if isinstance(opened, Opened):
        return EventStreamCall(target, EventDecoder, opened=opened)
    if not isinstance(opened, dict):
        raise UpstreamError(
            f"Upstream '{target.label}' answered with something that is not a message.", code="upstream_malformed"
        )
    return EventStreamCall(target, EventDecoder, deltas=message_to_deltas(opened))


def signed_thinking(items: list[dict[str, Any]], tenant_id: int | None) -> list[dict[str, Any]]:
    """Reasoning items whose `encrypted_content` this gateway sealed with Anthropic's signature
    become `{"type": "reasoning", "thinking", "signature"}`, which the request sends back as
    thinking blocks; other reasoning items are left as they are (and not sent)."""
    if tenant_id is None or not any(i["type"] == "reasoning" and i.get("encrypted_content") for i in items):
        return items
    out = []
    for item in items:
        if item["type"] == "reasoning" and item.get("encrypted_content"):
            try:
                payload = sealer().unseal(item["encrypted_content"], tenant_id=tenant_id, purpose="reasoning")
            except SealBroken:
                payload = None
            if isinstance(payload, dict) and payload.get("signature"):
                item = {"type": "reasoning", "thinking": payload.get("text") or "", "signature": payload["signature"]}
        out.append(item)
    return out


def anthropic_withheld_reasoning(target: Target, request: UpstreamRequest) -> list[str]:
    """Those without this gateway's seal of an Anthropic signature (the others go back as
    thinking blocks)."""
    items = request.items
    kept = signed_thinking(items, request.tenant_id)
    return [
        item["id"]
        for item, sent in zip(items, kept, strict=True)
        if item.get("type") == "reasoning" and item.get("id") and not sent.get("signature")
    ]
