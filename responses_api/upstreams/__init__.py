"""Upstream adapters: one small interface, one implementation per provider wire format."""

from __future__ import annotations

from ..domain import Target
from .anthropic import open_messages
from .base import UpstreamCall, UpstreamRequest
from .chat_completions import open_chat_completion
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


__all__ = ["UpstreamCall", "UpstreamRequest", "open_call"]
