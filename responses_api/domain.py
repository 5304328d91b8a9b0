"""The gateway's own types that several layers share: who is asking (`Principal`, with its
`Quota`s and `Budget`), and where a model name leads (`Route`, its `Target`s on a
`ProviderConfig`, its `Price`). Plain frozen dataclasses: no Django, no I/O, so the lower
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
class Price:
    """USD per million tokens, which is micro-USD per token."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)

    def micro_usd(self, input_tokens: int, output_tokens: int) -> int:
        return int(self.input * input_tokens + self.output * output_tokens)


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
