"""Upstream adapters: one small interface, one implementation per provider wire format, each
registered as a dialect (upstreams/dialects.py) that the functions here dispatch on."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..domain import Target
from ..protocol import anthropic as anthropic_dialect
from ..protocol import dialects as wire_dialects
from ..protocol.batches import singly
from ..protocol.deltas import Delta
from ..protocol.request import CreateRequest
from .anthropic import anthropic_headers, anthropic_withheld_reasoning, open_messages
from .base import UpstreamCall, UpstreamRequest
from .chat_completions import chat_applied_fields, chat_withheld_reasoning, open_chat_completion
from .dialects import UpstreamDialect, dialect_of, register
from .responses import open_responses
from .tokenize import chat_exact_counter

# The built-in dialects (their wire facts and surface columns are protocol/dialects.py's).
register(
    UpstreamDialect(
        wire_dialects.get("chat_completions"),
        open_chat_completion,
        applied_fields=chat_applied_fields,
        withheld_reasoning=chat_withheld_reasoning,
        exact_counter=chat_exact_counter,
    )
)
# A native Responses upstream takes back only its own encrypted_content, which the gateway does
# not keep: every reasoning item is withheld (the default).
register(UpstreamDialect(wire_dialects.get("responses"), open_responses))
register(
    UpstreamDialect(
        wire_dialects.get("anthropic"),
        open_messages,
        applied_fields=lambda target, req: anthropic_dialect.applied_fields(req),
        withheld_reasoning=anthropic_withheld_reasoning,
        headers=anthropic_headers,
    )
)


async def open_call(target: Target, request: UpstreamRequest) -> UpstreamCall:
    """Start a generation on `target`; raises a GatewayError before any byte is consumed."""
    return await dialect_of(target).open(target, request)


def applied_fields(target: Target, req: CreateRequest) -> tuple[str, frozenset[str]]:
    """The target's kind, and what its translation of `req` applies of the fields whose use
    there depends on the request or the provider (surface.REPORTED_FIELDS)."""
    return target.provider.kind, dialect_of(target).applied_fields(target, req)


def withheld_reasoning(target: Target, request: UpstreamRequest) -> list[str]:
    """The ids of the reasoning items of a call's context that its translation does not send
    (in order; each dialect's rule is its entry's `withheld_reasoning`)."""
    if not any(item.get("type") == "reasoning" for item in request.items):
        return []
    return dialect_of(target).withheld_reasoning(target, request)


def delta_batches(call: UpstreamCall) -> AsyncIterator[list[Delta]]:
    """The call's deltas as batches: its own `delta_batches` if it has one (never empty lists)."""
    batches = getattr(call, "delta_batches", None)
    return batches() if batches is not None else singly(call.deltas())


__all__ = ["UpstreamCall", "UpstreamRequest", "applied_fields", "delta_batches", "open_call", "withheld_reasoning"]
