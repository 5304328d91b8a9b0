"""Neutral deltas: what every upstream adapter yields, whatever the provider's wire format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningSignature:
    """The upstream's signature of the reasoning just streamed (Anthropic's signed thinking),
    which it needs back with that reasoning on a later turn."""

    signature: str


@dataclass(frozen=True, slots=True)
class OutputItem:
    """A whole output item relayed as the upstream made it: a hosted tool the upstream ran
    itself (web_search_call, ...; native Responses upstreams)."""

    item: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call; fragments of parallel calls are keyed by `index`."""

    index: int
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    # Input tokens written to the prompt cache (part of input_tokens), and of those the ones
    # written for one hour (Anthropic's `ephemeral_1h_input_tokens`, priced apart; internal:
    # not one of the SDK's buckets).
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    # The SDK's `cache_write_tokens_details` (ttl_30m_tokens, ttl_12h_tokens), only when an
    # upstream reports those buckets itself.
    cache_write_details: tuple[int, int] | None = None

    def __add__(self, other: Usage) -> Usage:
        details = None
        if self.cache_write_details is not None or other.cache_write_details is not None:
            mine, theirs = self.cache_write_details or (0, 0), other.cache_write_details or (0, 0)
            details = (mine[0] + theirs[0], mine[1] + theirs[1])
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            details,
        )

    def as_dict(self) -> dict[str, Any]:
        input_details: dict[str, Any] = {
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }
        if self.cache_write_details is not None:
            input_details["cache_write_tokens_details"] = {
                "ttl_30m_tokens": self.cache_write_details[0],
                "ttl_12h_tokens": self.cache_write_details[1],
            }
        usage = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "input_tokens_details": input_details,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }
        return usage


@dataclass(frozen=True, slots=True)
class ResponseFields:
    """Fields of the upstream's own Response passed on as it reported them (a native Responses
    upstream's `prompt_cache_diagnostics` and `tool_usage`)."""

    fields: dict[str, Any]


# The upstream Response fields passed on (ResponseFields).
PASSED_RESPONSE_FIELDS = ("prompt_cache_diagnostics", "tool_usage")


def add_counts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two usage objects of nested counts (`tool_usage`) added key by key."""
    out = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        if isinstance(value, dict) and isinstance(mine, dict):
            out[key] = add_counts(mine, value)
        elif isinstance(value, int) and isinstance(mine, int) and not isinstance(value, bool):
            out[key] = mine + value
        else:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class Finish:
    """The upstream's finish reason, already mapped: stop | length | content_filter | tool_calls."""

    reason: str


Delta = (
    TextDelta
    | RefusalDelta
    | ReasoningDelta
    | ReasoningSignature
    | ToolCallDelta
    | OutputItem
    | Usage
    | ResponseFields
    | Finish
)


class UpstreamFailed(Exception):
    """An upstream's own failure event in its stream (`response.failed`, Anthropic's `error`),
    raised by a dialect's decoder: (code, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
