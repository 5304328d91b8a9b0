"""Rate limits and budgets: requests, tokens and concurrent runs per minute per key and per
tenant, and a key's and a tenant's token or cost budget per day or month (a key's budget is
another scope of the same counters: a request must fit both).

The counters (store/limit_counters.py) live in Redis when REDIS_URL is set (one Lua script
checks every limit of a request and takes them all or none, so web processes and workers share
them exactly) and in this process otherwise (the embedded mode has one process). Nothing is counted for a
principal without limits: that path costs one attribute test.

- Requests and tokens per minute are token buckets (capacity = the limit, refilled
  continuously): a burst up to the limit, then the limit's pace. A request reserves its
  estimated tokens (input estimate plus max_output_tokens) when it starts; its end settles
  the difference with the real usage, so a bucket may go into debt, which later requests
  wait out. A request estimated above the whole limit needs a full bucket.
- Concurrent requests are leases (a sorted set with expiry in Redis): a stream or
  background run holds one until it ends; a process that dies lets it expire.
- Budgets count spent tokens and cost (micro-USD from the route's price table) per period.
  The count is seeded from the database when its period starts (or Redis lost it), so
  Redis is a cache of what the store already knows. The settle that counts a request's
  spend also reports the alert thresholds it crossed first in the period (alerts.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ..domain import Budget, Price, Quota, TokenCounts
from ..observability.metrics import rate_limited
from ..protocol.errors import RateLimited
from ..store import db
from ..store.limit_counters import Check, Crossing, Decision, LimitStore, Spend, limit_store
from ..store.outages import ServiceUnavailable
from ..store.selectors import spend_since
from ..store.usage import usage_writer
from .alerts import budget_crossed, limit_crossed

log = logging.getLogger("gateway.limits")


# -- a request's admission and its end ---------------------------------------------------


def checks_for(
    quotas: tuple[Quota, ...],
    budgets: tuple[Budget, ...],
    *,
    estimate: int,
    now: float,
    concurrent: bool = True,
    reserve: tuple[int, int] = (0, 0),
) -> list[Check]:
    """`reserve`: (tokens, micro-USD) a request reserves against the budget until it ends."""
    checks: list[Check] = []
    for q in quotas:
        if q.requests_per_minute:
            checks.append(
                Check(
                    "bucket",
                    f"rpm:{q.scope}",
                    "requests per minute",
                    q.label,
                    q.requests_per_minute,
                    cost=1,
                    alert_at=q.alert_at,
                )
            )
        if q.tokens_per_minute:
            checks.append(
                Check(
                    "bucket",
                    f"tpm:{q.scope}",
                    "tokens per minute",
                    q.label,
                    q.tokens_per_minute,
                    cost=estimate,
                    alert_at=q.alert_at,
                )
            )
        if q.concurrent and concurrent:
            checks.append(
                Check("lease", f"conc:{q.scope}", "concurrent requests", q.label, q.concurrent, alert_at=q.alert_at)
            )
    for budget in budgets:
        if budget.tokens is None and budget.usd is None:
            continue
        ident, _, left = budget.window(now)
        checks.append(
            Check(
                "budget",
                budget_key(budget, ident),
                "daily budget" if budget.period == "day" else "monthly budget",
                budget.label,
                budget.tokens if budget.tokens is not None else -1,
                micro_usd_limit=int(budget.usd * 1_000_000) if budget.usd is not None else -1,
                reset_in=left,
                cost=reserve[0],
                reserve_micro_usd=reserve[1],
            )
        )
    return checks


def budget_key(budget: Budget, ident: str) -> str:
    """A budget's counter in one period. A tenant's keeps the name it had before keys had
    budgets (`budget:<tenant id>:<period>`), so a deploy does not reseed running counts."""
    if budget.key_id is None:
        return f"budget:{budget.tenant_id}:{ident}"
    return f"budget:key:{budget.key_id}:{ident}"


@dataclass(slots=True)
class BudgetHold:
    """A budget a request counts against, as its end needs it: the counter and, for the alert
    thresholds the settle checks, the limits and whose budget it is."""

    key: str
    scope: str  # "tenant:3", "key:12"
    period: str
    tokens: int  # -1: no token limit
    micro_usd: int  # -1: no cost limit
    alert_at: tuple[int, ...] = ()

    def as_list(self) -> list[Any]:
        return [self.key, self.scope, self.period, self.tokens, self.micro_usd, list(self.alert_at)]


@dataclass(slots=True, weakref_slot=True, eq=False)  # identity: kept in a WeakSet
class Grant:
    """What a request holds from admission to its end; `end()` settles and releases (once)."""

    lease_id: str
    buckets: list[tuple[str, int, int]]  # (key, limit, reserved): tokens-per-minute buckets
    leases: list[str]
    budgets: list[BudgetHold]
    price: Price
    headers: dict[str, str] = field(default_factory=dict)
    ended: bool = False

    def as_job(self) -> dict[str, Any]:
        """For a worker to end it: plain JSON."""
        return {
            "lease_id": self.lease_id,
            "buckets": self.buckets,
            "leases": self.leases,
            "budgets": [b.as_list() for b in self.budgets],
            "price": self.price.as_json(),
        }

    @classmethod
    def from_job(cls, data: dict[str, Any] | None) -> Grant | None:
        if not data:
            return None
        return cls(
            lease_id=data["lease_id"],
            buckets=[tuple(b) for b in data["buckets"]],
            leases=list(data["leases"]),
            # A job queued before key budgets named its one (tenant) budget `budget_key`: no
            # alerts for it, but its settle still counts.
            budgets=[BudgetHold(b[0], b[1], b[2], b[3], b[4], tuple(b[5])) for b in data.get("budgets", ())]
            + ([BudgetHold(data["budget_key"], "", "", -1, -1)] if data.get("budget_key") else []),
            price=Price.from_json(data["price"]),
        )

    async def end(self, usage: dict[str, Any] | None, *, cache_write_1h_tokens: int = 0) -> None:
        """Settle the request: `usage` as the client got it, and `cache_write_1h_tokens`, the
        1-hour part of its cache writes, which the public usage does not show but its price does."""
        if self.ended:
            return
        self.ended = True
        _renewing.discard(self)
        counts = TokenCounts.from_usage(usage)
        if cache_write_1h_tokens:
            counts = dataclasses.replace(counts, cache_write_1h=min(cache_write_1h_tokens, counts.cache_write))
        used = counts.input + counts.output
        # Always, when there is a budget: the settle also gives back this request's reservation.
        # Priced here, at the end, with cache reads and writes: never on the way in.
        micro_usd = int(self.price.cost(counts)) if self.budgets else 0
        budgets = [Spend(b.key, used, micro_usd, b.tokens, b.micro_usd, b.alert_at) for b in self.budgets]
        try:
            await limit_store().settle(
                [(k, limit, used - reserved) for k, limit, reserved in self.buckets],
                budgets,
                self.leases,
                self.lease_id,
                on_crossed=self._crossed if any(b.alert_at for b in self.budgets) else None,
            )
        except Exception as exc:  # noqa: BLE001 - the leases expire on their own
            log.warning("rate limits: could not settle %s: %s", self.lease_id, exc)

    def _crossed(self, crossings: list[Crossing]) -> None:
        """Thresholds this request's spend crossed first in their period (each reported by one
        settle only, across processes): alerts.py logs and sends them."""
        holds = {b.key: b for b in self.budgets}
        for crossing in crossings:
            hold = holds.get(crossing.key)
            if hold is not None:
                budget_crossed(
                    scope=hold.scope,
                    period=hold.period,
                    token_limit=hold.tokens,
                    micro_usd_limit=hold.micro_usd,
                    crossing=crossing,
                )


async def admit(
    principal: Any,
    *,
    price: Price | None = None,
    estimate: Callable[[], int] = lambda: 0,
    concurrent: bool = True,
    lease_seconds: float | None = None,
    output_cap: int = 0,
    output_reserve: int = 0,
) -> Grant | None:
    """Take what one request needs from every limit of its key and tenant, or raise a 429
    naming the limit (with Retry-After). None when the principal has no limits."""
    quotas, budgets = principal.quotas, principal.budgets
    if not quotas and not budgets:
        return None
    now = time.time()
    needs_tokens = any(q.tokens_per_minute for q in quotas)
    budgeted = any(b.tokens is not None or b.usd is not None for b in budgets)
    input_estimate = estimate() if needs_tokens or budgeted else 0
    estimated = max(1, input_estimate + output_cap) if needs_tokens or budgeted else 0
    reserved = estimated if needs_tokens else 0
    # Against a budget: the input estimate plus the output the request may produce (its cap,
    # `output_cap`, where it set one; `output_reserve` otherwise), each at its own price: the
    # output, priced as input, reserved a fraction of what it may cost.
    output = output_cap + output_reserve
    budget_tokens = max(1, input_estimate + output) if budgeted else 0
    reserve = (budget_tokens, (price or Price()).micro_usd(input_estimate, output) if budgeted else 0)
    checks = checks_for(quotas, budgets, estimate=reserved, now=now, concurrent=concurrent, reserve=reserve)
    if not checks:
        return None
    lease_id = uuid.uuid4().hex
    renewed = lease_seconds is None and _renewal_on  # this process renews it while it runs
    if lease_seconds is None:
        lease_seconds = float(settings.GATEWAY_LEASE_SECONDS if renewed else settings.GATEWAY_FOREGROUND_MAX_SECONDS)
    store = limit_store()
    try:
        decision = await store.acquire(checks, lease_id, lease_seconds)
        by_key = {budget_key(b, b.window(now)[0]): b for b in budgets}
        for _ in budgets:  # a budget's period has no count yet: the database has it (each once)
            if decision.seed < 0:
                break
            await _seed_budget(store, by_key[checks[decision.seed].key], checks[decision.seed], now)
            decision = await store.acquire(checks, lease_id, lease_seconds)
    except RateLimited:
        raise
    except Exception as exc:
        if settings.GATEWAY_RATE_LIMIT_FAIL_OPEN:
            log.warning("rate limits not enforced for this request (store unreachable: %s)", exc)
            return None
        raise ServiceUnavailable(
            "Rate limits cannot be checked right now; try again shortly.",
            headers={"Retry-After": "2"},
        ) from exc
    if decision.crossings:  # rare: a threshold reached first in its window (alerts.py, in the background)
        for crossing in decision.crossings:
            check = checks[crossing.check]
            limit_crossed(scope=check.key.split(":", 1)[1], what=check.what, limit=check.limit, crossing=crossing)
    if not decision.allowed and decision.failed < 0:  # a budget count vanished again at once
        log.warning("rate limits: budget count unavailable; request let through")
        return None
    if not decision.allowed:
        _refuse(checks[decision.failed], decision.retry_after)
    grant = Grant(
        lease_id=lease_id,
        # What each bucket really took: an estimate above the whole limit took the limit.
        buckets=[(c.key, c.limit, min(c.cost, c.limit)) for c in checks if c.what == "tokens per minute"],
        leases=[c.key for c in checks if c.kind == "lease"],
        budgets=[
            BudgetHold(
                c.key, by_key[c.key].scope, by_key[c.key].period, c.limit, c.micro_usd_limit, by_key[c.key].alert_at
            )
            for c in checks
            if c.kind == "budget"
        ],
        price=price or Price(),
        headers=_headers(checks, decision),
    )
    if renewed and (grant.leases or grant.budgets):
        _renewing.add(grant)
    return grant


# Grants whose leases this process renews while their requests run (weakly: a grant nobody
# holds any more is no longer renewed, and its lease lapses).
_renewing: weakref.WeakSet[Grant] = weakref.WeakSet()
_renewal_on = False  # liveness.py beats in this process: foreground leases are short and renewed


def renew_leases_from_now_on() -> None:
    global _renewal_on
    _renewal_on = True


async def renew_live_leases() -> None:
    """liveness.py's beat: the leases of this process's running requests last another
    GATEWAY_LEASE_SECONDS."""
    grants = [(g.lease_id, g.leases, [b.key for b in g.budgets]) for g in list(_renewing) if not g.ended]
    if grants:
        await limit_store().renew(grants, float(settings.GATEWAY_LEASE_SECONDS))


def _refuse(check: Check, retry_after: float) -> None:
    rate_limited(check.what)
    seconds = max(1, math.ceil(retry_after))
    if check.kind == "budget":
        message = f"The {check.what} of {check.label} is spent; it renews in {_duration(retry_after)}."
    elif check.kind == "lease":
        # A slot frees when a request in flight ends, which nobody can foresee; what the gateway
        # knows is when the first lease runs out if its holder stopped (`retry_after`): within
        # GATEWAY_LEASE_SECONDS where web processes renew their leases (liveness.py). A
        # background run's lease lasts its whole window (the reaper ends a lost run sooner), as
        # does a request's in a process that does not beat, so where every slot is held that way
        # no such bound is promised; Retry-After then only paces the client's next try.
        lease = float(settings.GATEWAY_LEASE_SECONDS)
        message = f"Rate limit reached for {check.label} on {check.what}: limit {check.limit}, all in flight. "
        if retry_after <= lease:
            message += (
                f"A slot frees when one of them ends, and in {_duration(retry_after)} at the latest "
                "if the process serving it stopped."
            )
        else:
            message += "A slot frees when one of them ends."
        seconds = max(1, math.ceil(min(retry_after, lease)))
    else:
        message = (
            f"Rate limit reached for {check.label} on {check.what}: limit {check.limit}. "
            f"Please try again in {_duration(retry_after)}."
        )
    raise RateLimited(
        message,
        code="budget_exceeded" if check.kind == "budget" else "rate_limit_exceeded",
        headers={"Retry-After": str(seconds)},
    )


def _headers(checks: list[Check], decision: Decision) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers, from the tightest request and token bucket."""
    headers: dict[str, str] = {}
    for what, name in (("requests per minute", "requests"), ("tokens per minute", "tokens")):
        tightest = min(
            ((c, decision.remaining[i]) for i, c in enumerate(checks) if c.what == what),
            key=lambda pair: pair[1][0] / pair[0].limit,
            default=None,
        )
        if tightest is not None:
            check, (left, to_full) = tightest
            headers[f"x-ratelimit-limit-{name}"] = str(check.limit)
            headers[f"x-ratelimit-remaining-{name}"] = str(max(0, math.floor(left)))
            headers[f"x-ratelimit-reset-{name}"] = _duration(to_full)
    return headers


def _duration(seconds: float) -> str:
    """OpenAI's form: 20ms, 1s, 6m0s, 1h2m3s."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


async def _seed_budget(store: LimitStore, budget: Budget, check: Check, now: float) -> None:
    _, start, left = budget.window(now)
    await usage_writer.flush()  # the calls of the last half second, queued as usage records
    tokens, micro_usd = await db.run(
        spend_since, tenant_id=budget.tenant_id, key_id=budget.key_id, start=datetime.fromtimestamp(start, UTC)
    )
    await store.seed(check.key, tokens, micro_usd, left + 86400)


def current_use(quotas: tuple[Quota, ...], budgets: tuple[Budget, ...]) -> list[dict[str, Any]]:
    """Each limit with its current use (sync: the admin and the usage API's thread)."""
    now = time.time()
    checks = checks_for(quotas, budgets, estimate=0, now=now)
    by_key = {budget_key(b, b.window(now)[0]): b for b in budgets}
    if not checks:
        return []
    try:
        used = limit_store().snapshot(checks)
    except Exception as exc:  # noqa: BLE001 - shown as unknown
        log.warning("rate limits: could not read current use: %s", exc)
        used = [{"used": None}] * len(checks)
    out = []
    for check, use in zip(checks, used):
        entry: dict[str, Any] = {
            "scope": check.label,
            "limit": check.what,
            "value": check.limit if check.limit >= 0 else None,
            **use,
        }
        if check.kind == "budget":
            budget = by_key[check.key]
            if entry.get("used") is None:
                # No request has counted this period yet (or Redis lost it): the store knows
                # what it spent, as the first request of the period will seed it.
                _, start, _ = budget.window(now)
                entry["used"], entry["micro_usd"] = spend_since(
                    tenant_id=budget.tenant_id, key_id=budget.key_id, start=datetime.fromtimestamp(start, UTC)
                )
            entry["usd"] = check.micro_usd_limit / 1_000_000 if check.micro_usd_limit >= 0 else None
            entry["renews_in_seconds"] = int(check.reset_in)
            if "micro_usd" in entry:
                entry["used_usd"] = entry.pop("micro_usd") / 1_000_000
        out.append(entry)
    return out
