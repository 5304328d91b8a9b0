"""The upstream dialect registry: one entry per provider `kind`, pairing what every layer may
know of the dialect (protocol/dialects.WireDialect: its surface column, hosted tools,
passthrough) with its adapter here (how a call is opened and read, what its translation applies
of the reported fields, which reasoning items it does not send, how it counts tokens).

Everything that differs by provider kind reads an entry instead of comparing kind strings; a new
dialect is its adapter, its protocol conversion and one `register(UpstreamDialect(...))` line
(the built-in ones are registered in upstreams/__init__.py; tests/dialects adds a test-only one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..domain import ProviderConfig, Target
from ..protocol import dialects as wire_dialects
from ..protocol.dialects import WireDialect
from ..protocol.request import CreateRequest
from ..protocol.tools import Tool
from .base import UpstreamCall, UpstreamRequest
from .http import provider_headers

Counter = Callable[[list[dict[str, Any]]], Awaitable[int | None]]


class Headers(Protocol):
    """A dialect's headers for a request to a provider (its key header and own headers)."""

    def __call__(self, provider: ProviderConfig, *, json_body: bool = True) -> dict[str, str]: ...


def bearer_headers(provider: ProviderConfig, *, json_body: bool = True) -> dict[str, str]:
    """The OpenAI-style dialects' headers: the key as `Authorization: Bearer`."""
    return provider_headers(provider, json_body=json_body)


def nothing_reported(target: Target, req: CreateRequest) -> frozenset[str]:
    return frozenset()


def all_reasoning_withheld(target: Target, request: UpstreamRequest) -> list[str]:
    """The dialects that take no reasoning back: every reasoning item with an id is withheld."""
    return [item["id"] for item in request.items if item.get("type") == "reasoning" and item.get("id")]


@dataclass(frozen=True, slots=True)
class UpstreamDialect:
    wire: WireDialect
    # Start a generation; raises a GatewayError before any byte is consumed.
    open: Callable[[Target, UpstreamRequest], Awaitable[UpstreamCall]]
    # What its translation of a request applies of wire.reported_fields.
    applied_fields: Callable[[Target, CreateRequest], frozenset[str]] = nothing_reported
    # The ids of the context's reasoning items its translation does not send (called only when
    # the context holds reasoning).
    withheld_reasoning: Callable[[Target, UpstreamRequest], list[str]] = all_reasoning_withheld
    # How the engine asks the upstream for the exact tokens of a context; None: it cannot.
    exact_counter: Callable[[Target, CreateRequest, list[Tool]], Counter | None] | None = None
    # The headers of any request to a provider of this kind (calls, the admin's connection
    # check): where its key goes and what else it needs.
    headers: Headers = bearer_headers

    @property
    def name(self) -> str:
        return self.wire.name


_ADAPTERS: dict[str, UpstreamDialect] = {}


def register(dialect: UpstreamDialect) -> None:
    """Add a dialect: its wire facts (and surface column) and its adapter."""
    if dialect.name in _ADAPTERS:
        raise ValueError(f"upstream dialect {dialect.name!r} is already registered")
    try:
        known = wire_dialects.get(dialect.name)
    except KeyError:
        wire_dialects.register(dialect.wire)
    else:
        if known is not dialect.wire:
            raise ValueError(f"upstream dialect {dialect.name!r} is already registered")
    _ADAPTERS[dialect.name] = dialect


def unregister(name: str) -> None:
    """Remove a dialect (tests add one for a while)."""
    del _ADAPTERS[name]
    wire_dialects.unregister(name)


def dialect_of(target: Target) -> UpstreamDialect:
    return dialect_named(target.provider.kind)


def dialect_named(kind: str) -> UpstreamDialect:
    """A provider kind's dialect (NotImplementedError for a kind without one)."""
    dialect = _ADAPTERS.get(kind)
    if dialect is None:
        raise NotImplementedError(f"provider kind {kind!r}")
    return dialect


def known(kind: object) -> bool:
    """Whether a provider kind has a dialect (configuration files are checked against this)."""
    return isinstance(kind, str) and kind in _ADAPTERS
