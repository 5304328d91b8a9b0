"""Upstream adapters: one small interface, one implementation per provider wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..domain import Target
from ..protocol import anthropic as anthropic_dialect
from ..protocol import chat as chat_dialect
from ..protocol.batches import singly
from ..protocol.deltas import Delta
from ..protocol.request import CreateRequest
from .anthropic import open_messages, signed_thinking
from .base import UpstreamCall, UpstreamRequest
from .chat_completions import chat_options, open_chat_completion
from .responses import open_responses


async def open_call(target: Target, request: UpstreamRequest) -> UpstreamCall:
    """Start a generation on `target`; raises a GatewayError before any byte is consumed."""
    if target.provider.kind == "chat_completions":
        return await open_chat_completion(target, request)
    if target.provider.kind == "responses":
        return await open_responses(target, request)
    if target.provider.kind == "anthropic":
        return await open_messages(target, request)
    raise NotImplementedError(f"provider kind {target.provider.kind!r}")


def applied_fields(target: Target, req: CreateRequest) -> tuple[str, frozenset[str]]:
    """The target's kind, and what its translation of `req` applies of the fields whose use
    there depends on the request or the provider (surface.REPORTED_FIELDS)."""
    kind = target.provider.kind
    if kind == "chat_completions":
        return kind, chat_dialect.applied_fields(req, chat_options(target.provider.options))
    if kind == "anthropic":
        return kind, anthropic_dialect.applied_fields(req)
    return kind, frozenset()


def withheld_reasoning(target: Target, request: UpstreamRequest) -> list[str]:
    """The ids of the reasoning items of a call's context that its translation does not send
    (in order): on Anthropic those without this gateway's seal of an Anthropic signature, on a
    Chat Completions provider all of them unless it takes reasoning back (`send_reasoning`,
    and then those with no text), on a native Responses upstream all of them (it takes back
    only its own encrypted_content, which the gateway does not keep)."""
    items = request.items
    if not any(item.get("type") == "reasoning" for item in items):
        return []
    kind = target.provider.kind
    if kind == "anthropic":
        kept = signed_thinking(items, request.tenant_id)
        return [
            item["id"]
            for item, sent in zip(items, kept, strict=True)
            if item.get("type") == "reasoning" and item.get("id") and not sent.get("signature")
        ]
    send_back = kind == "chat_completions" and chat_options(target.provider.options).send_reasoning
    return [
        item["id"]
        for item in items
        if item.get("type") == "reasoning" and item.get("id") and not (send_back and chat_dialect.reasoning_text(item))
    ]


def delta_batches(call: UpstreamCall) -> AsyncIterator[list[Delta]]:
    """The call's deltas as batches: its own `delta_batches` if it has one (never empty lists)."""
    batches = getattr(call, "delta_batches", None)
    return batches() if batches is not None else singly(call.deltas())


__all__ = ["UpstreamCall", "UpstreamRequest", "applied_fields", "delta_batches", "open_call", "withheld_reasoning"]
