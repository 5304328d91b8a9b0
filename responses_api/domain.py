"""The gateway's own types that several layers share: who is asking (`Principal`, with its
`Quota`s and `Budget`), and where a model name leads (`Route`, its `Target`s on a
`ProviderConfig`, its `Price` and what a call's `TokenCounts` cost). Plain frozen dataclasses: no Django, no I/O, so the lower
layers (store, upstreams, engine) can take them without importing the layers that build them
(api/auth.py builds principals, orchestration/routing.py routes, orchestration/limits.py
counts against quotas and budgets)."""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any


@dataclass(frozen=True, slots=True)
class Quota:
    """One scope's per-minute and concurrency limits (None: unlimited)."""

    scope: str  # "key:12", "tenant:3": the counters' names
    label: str  # "API key 'ci'", for messages
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent: int | None = None
    # Percentages of each limit at which alerts.py calls the webhooks (the owner's
    # alert_thresholds up to 100: a rate cannot go beyond its limit).
    alert_at: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Budget:
    """A tenant's budget (all its keys together), or a key's own (`key_id` set): each is
    counted on its own, and a request must fit both."""

    tenant_id: int
    period: str  # "day" | "month" (UTC)
    tokens: int | None = None
    usd: Decimal | None = None
    key_id: int | None = None
    label: str = "this tenant"  # for messages: "The monthly budget of this tenant is spent"
    alert_at: tuple[int, ...] = ()  # percentages at which alerts.py calls the webhooks

    @property
    def scope(self) -> str:
        """The counters' name: "tenant:3", "key:12"."""
        return f"key:{self.key_id}" if self.key_id is not None else f"tenant:{self.tenant_id}"

    def window(self, now: float) -> tuple[str, float, float]:
        """(period id, its start, seconds left) at `now` (epoch seconds)."""
        moment = datetime.fromtimestamp(now, UTC)
        if self.period == "day":
            start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
            ident, length = start.strftime("%Y-%m-%d"), 86400.0
        else:
            start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            ident = start.strftime("%Y-%m")
            length = calendar.monthrange(start.year, start.month)[1] * 86400.0
        return ident, start.timestamp(), start.timestamp() + length - now


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """What a call's usage is priced on, in OpenAI's terms: `input` counts every prompt token,
    the cache reads (`cached`) and cache writes (`cache_write`, of which `cache_write_1h` were
    written for an hour) included; they are parts of it, not additions."""

    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0  # every cache write (5-minute and 1-hour); the total the SDK shows
    cache_write_1h: int = 0  # the 1-hour part of `cache_write` (Anthropic's ephemeral_1h)

    @classmethod
    def from_usage(cls, usage: dict[str, Any] | None) -> TokenCounts:
        """From a Responses `usage` object (or a Chat Completions one: prompt/completion tokens)."""
        usage = usage if isinstance(usage, dict) else {}
        details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
        details = details if isinstance(details, dict) else {}
        return cls(
            input=_count(usage.get("input_tokens") or usage.get("prompt_tokens")),
            output=_count(usage.get("output_tokens") or usage.get("completion_tokens")),
            cached=_count(details.get("cached_tokens")),
            cache_write=_count(details.get("cache_write_tokens")),
            cache_write_1h=_count(details.get("cache_write_1h_tokens")),
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# Anthropic charges a 5-minute cache write 1.25x and a 1-hour one 2x the input price; a route
# that sets no write price is charged the same way.
CACHE_WRITE_FACTOR = Decimal("1.25")
CACHE_WRITE_1H_FACTOR = Decimal(2)


@dataclass(frozen=True, slots=True)
class Price:
    """A route's prices in USD per million tokens, which is micro-USD per token. None: the
    default derived from the input price (cache reads at the input price; writes 1.25x and 2x)."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None

    def cost(self, tokens: TokenCounts) -> Decimal:
        """The exact cost in micro-USD: the one place usage is priced (budgets' settlement and
        seeding, /v1/usage, the admin). Cache reads and writes are parts of `input`: the rest of
        it is charged at the input price, each part at its own; inconsistent counts (parts larger
        than the whole) are clamped, never charged twice."""
        cached = min(tokens.cached, tokens.input)
        written = min(tokens.cache_write, tokens.input - cached)
        written_1h = min(tokens.cache_write_1h, written)
        plain = tokens.input - cached - written
        return (
            self.input * plain
            + (self.input if self.cached_input is None else self.cached_input) * cached
            + (self.input * CACHE_WRITE_FACTOR if self.cache_write is None else self.cache_write)
            * (written - written_1h)
            + (self.input * CACHE_WRITE_1H_FACTOR if self.cache_write_1h is None else self.cache_write_1h) * written_1h
            + self.output * tokens.output
        )

    def micro_usd(self, input_tokens: int, output_tokens: int, **parts: int) -> int:
        """`cost` in whole micro-USD (budgets count integers); `parts`: cached, cache_write,
        cache_write_1h."""
        return int(self.cost(TokenCounts(input_tokens, output_tokens, **parts)))

    def as_json(self) -> list[str | None]:
        return [None if v is None else str(v) for v in self._fields()]

    @classmethod
    def from_json(cls, data: list[Any]) -> Price:
        values = [None if v is None else Decimal(v) for v in data] + [None] * (5 - len(data))
        return cls(values[0] or Decimal(0), values[1] or Decimal(0), *values[2:5])

    def _fields(self) -> tuple[Decimal | None, ...]:
        return (self.input, self.output, self.cached_input, self.cache_write, self.cache_write_1h)


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: int
    tenant_name: str
    key_id: int
    key_name: str
    is_admin: bool
    allowed_models: tuple[str, ...]
    quotas: tuple[Quota, ...] = ()  # the key's and the tenant's rate limits (limits.py)
    budgets: tuple[Budget, ...] = ()  # the key's and the tenant's budgets
    expires_at: float | None = None  # epoch seconds: the key's expiry (checked on cache hits too)
    staff_user: str | None = None  # a staff user's admin session browsing history (no key)

    # DRF treats the authenticated "user" as truthy and asks is_authenticated.
    is_authenticated = True

    def may_use(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    kind: str
    base_url: str
    api_key: str | None
    timeout: float  # a whole non-streamed answer
    connect_timeout: float
    first_byte_timeout: float = 60.0  # streamed: request -> first chunk
    idle_timeout: float = 30.0  # streamed: between chunks
    options: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    provider: ProviderConfig
    upstream_model: str
    weight: int
    priority: int = 0
    max_concurrent: int | None = None

    @property
    def label(self) -> str:
        return f"{self.provider.name}:{self.upstream_model}"


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    targets: tuple[Target, ...]
    run_on_worker: bool = False
    hosted_tools: tuple[tuple[str, str], ...] = ()  # (hosted tool type, registry tool serving it)
    context_window: int | None = None  # tokens; None: learned from the upstream, or unknown
    price: Price = Price()  # for budgets in USD
