"""Provider kind `anthropic`: Anthropic's Messages API (`POST {base_url}/messages`, e.g.
https://api.anthropic.com/v1). The request and the reading of its events are in
protocol/anthropic.py. The key goes in `x-api-key`, the API version in `anthropic-version`
(the provider's `anthropic_version` option, default protocol.anthropic.API_VERSION)."""

from __future__ import annotations

import json
from typing import Any

from ..domain import ProviderConfig, Target
from ..protocol.anthropic import (
    API_VERSION,
    STRUCTURED_OUTPUTS_BETA,
    EventDecoder,
    build_messages_request,
    message_to_deltas,
    usage_of,
)
from ..protocol.deltas import UpstreamFailed, Usage
from ..protocol.errors import UpstreamError
from ..sealing import SealBroken, sealer
from .base import UpstreamRequest
from .chat_completions import Opened, post_json
from .events import EventStreamCall
from .http import provider_headers
from .passthrough import Forwarded, forward


def messages_headers(target: Target, betas: str | None = None) -> dict[str, str]:
    """The headers of a request to an Anthropic provider: its key in `x-api-key`, its API version,
    and the betas a client asked for after those the provider's configuration sends."""
    headers = anthropic_headers(target.provider)
    if betas:
        name = next((k for k in headers if k.lower() == "anthropic-beta"), "anthropic-beta")
        configured = headers.get(name)
        headers[name] = f"{configured},{betas}" if configured else betas
    return headers


async def forward_messages(
    target: Target, body: dict[str, Any], *, stream: bool, betas: str | None, path: str = "/messages"
) -> Forwarded:
    """A Messages request sent in substance as the client sent it (the route's upstream model in
    it): the inbound Messages front door to an Anthropic target (api/messages_views.py)."""
    return await forward(target, path, body, stream=stream, headers=messages_headers(target, betas))


class MessagesUsage:
    """The usage of a forwarded Messages stream, read from its events as they pass
    (message_start's, then message_delta's, which Anthropic sends cumulative); and, given a
    `sink` (protocol.messages_api.MessagesWriter), its content as deltas, for storing the turn."""

    def __init__(self, sink: Any = None) -> None:
        self.usage = Usage()
        self._tail = b""
        self._sink = sink
        self._decoder = EventDecoder() if sink is not None else None

    def scan(self, chunk: bytes) -> None:
        *lines, self._tail = (self._tail + chunk).split(b"\n")
        self._tail = self._tail[-65536:]
        for line in lines:
            if not line.startswith(b"data:") or (self._decoder is None and b'"usage"' not in line):
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("type") == "message_start":
                self.usage = usage_of((event.get("message") or {}).get("usage"))
            elif event.get("type") == "message_delta":
                self.usage = usage_of(event.get("usage"), self.usage)
            if self._decoder is not None:
                try:
                    deltas = self._decoder.feed(event)
                except UpstreamFailed:
                    continue
                for delta in deltas:
                    self._sink.feed(delta)

    @property
    def finished(self) -> bool:
        """The stream's message_stop was read (with a sink: its content is whole)."""
        return self._decoder is not None and self._decoder.finished

    def message(self, answer: dict[str, Any]) -> None:
        """A whole (not streamed) message's usage, and its content to the sink."""
        self.usage = usage_of(answer.get("usage"))
        if self._sink is not None:
            for delta in message_to_deltas(answer):
                self._sink.feed(delta)


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
