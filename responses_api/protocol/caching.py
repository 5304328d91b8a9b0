"""Prompt caching across dialects: the request's cache fields (`prompt_cache_key`,
`prompt_cache_retention`, `prompt_cache_options`), the content parts' `prompt_cache_breakpoint`
and `service_tier`, as each upstream dialect takes them.

Native Responses upstreams take them as they are. Chat Completions upstreams take them only
where the provider says so (`send_prompt_cache`, `send_service_tier`: a strict server refuses
fields it does not know). Anthropic has no cache key: its cache is `cache_control` on content
blocks, at most `ANTHROPIC_BREAKPOINTS` per request, which this module places as OpenAI places
breakpoints: in `implicit` mode (the default) one breakpoint at the end of the prompt and the
latest three explicit ones, in `explicit` mode the latest four explicit ones; earlier explicit
breakpoints are not sent (OpenAI, too, writes only the latest ones).
"""

from __future__ import annotations

from typing import Any

from .request import CreateRequest

ANTHROPIC_BREAKPOINTS = 4
# Anthropic's cache lives 5 minutes, or 1 hour when asked. OpenAI's lifetimes are minimums
# (`30m`, `12h`) and `prompt_cache_retention: 24h` a longer retention: any of them asks for more
# than 5 minutes, so each becomes Anthropic's longest, 1 hour; none leaves Anthropic's default.
ANTHROPIC_LONG_TTL = "1h"
# Blocks Anthropic refuses a cache_control on.
_UNCACHEABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})
# service_tier -> Anthropic's: `auto` uses priority capacity when the organisation has it,
# `standard_only` never does. Flex, scale and ultrafast have no counterpart (not sent).
ANTHROPIC_SERVICE_TIERS = {"auto": "auto", "priority": "auto", "fast": "auto", "default": "standard_only"}


def asks_for_caching(req: CreateRequest) -> bool:
    return bool(req.prompt_cache_key or req.prompt_cache_retention or req.prompt_cache_options)


def request_ttl(req: CreateRequest) -> str | None:
    """The lifetime the request asks of every breakpoint (OpenAI's `ttl`), if any."""
    if req.prompt_cache_options and req.prompt_cache_options.get("ttl"):
        return str(req.prompt_cache_options["ttl"])
    return "12h" if req.prompt_cache_retention == "24h" else None


def cache_control(breakpoint_: dict[str, Any] | None) -> dict[str, Any]:
    """A content part's `prompt_cache_breakpoint` as Anthropic's `cache_control`."""
    return {"type": "ephemeral", **({"ttl": ANTHROPIC_LONG_TTL} if (breakpoint_ or {}).get("ttl") else {})}


def place_anthropic_breakpoints(messages: list[dict[str, Any]], req: CreateRequest) -> None:
    """Settle the `cache_control` marks of the Messages request's blocks (set where the parts
    had breakpoints): the implicit one at the end of the prompt, the latest explicit ones up to
    the limit, lifetimes as the request asks, and longer lifetimes before shorter ones (the
    API refuses a 1-hour mark after a 5-minute one)."""
    for message in messages:
        for block in message["content"]:
            if "cache_control" in block and not _cacheable(block):
                del block["cache_control"]
    marked = [b for m in messages for b in m["content"] if "cache_control" in b]
    mode = (req.prompt_cache_options or {}).get("mode", "implicit")
    implicit: dict[str, Any] | None = None
    if mode == "implicit" and (marked or asks_for_caching(req)) and messages:
        cacheable = [b for b in messages[-1]["content"] if _cacheable(b)]
        if cacheable:
            implicit = cacheable[-1]
    adds_one = implicit is not None and not any(b is implicit for b in marked)
    explicit_room = ANTHROPIC_BREAKPOINTS - (1 if adds_one else 0)
    for block in marked[: max(len(marked) - explicit_room, 0)]:
        del block["cache_control"]
    if implicit is not None and "cache_control" not in implicit:
        implicit["cache_control"] = {"type": "ephemeral"}
    marks = [b["cache_control"] for m in messages for b in m["content"] if "cache_control" in b]
    if request_ttl(req):
        for mark in marks:
            mark["ttl"] = ANTHROPIC_LONG_TTL
    longer_later = False
    for mark in reversed(marks):
        if mark.get("ttl") == ANTHROPIC_LONG_TTL:
            longer_later = True
        elif longer_later:
            mark["ttl"] = ANTHROPIC_LONG_TTL


def _cacheable(block: dict[str, Any]) -> bool:
    """Whether Anthropic takes a cache_control on the block (not on thinking, nor on empty text)."""
    if block.get("type") in _UNCACHEABLE_BLOCKS:
        return False
    return block.get("type") != "text" or bool(block.get("text"))


def upstream_cache_fields(req: CreateRequest) -> dict[str, Any]:
    """The request's cache fields as OpenAI's Responses and Chat Completions APIs take them."""
    fields: dict[str, Any] = {}
    if req.prompt_cache_key:
        fields["prompt_cache_key"] = req.prompt_cache_key
    if req.prompt_cache_retention:
        fields["prompt_cache_retention"] = req.prompt_cache_retention
    if req.prompt_cache_options:
        fields["prompt_cache_options"] = dict(req.prompt_cache_options)
    return fields
