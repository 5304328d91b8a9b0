"""The resilient router: which target serves the next attempt, retries, cooldowns and per-target
concurrency.

Order: priority groups (lowest first), weighted random within a group, weight-0 targets of a
group after its weighted ones. A target cooling down (it failed GATEWAY_ROUTER_COOLDOWN_FAILURES
times in a row, or answered 429 with Retry-After) or at its concurrency limit is skipped while
another can take the attempt; if none can, the cooled ones are tried anyway (better than
refusing without asking).

Retries: before the first byte, a retryable failure (connection errors, timeouts, 429, 5xx)
falls back to the next target; when every target failed, the whole order is tried again after
an exponential backoff with full jitter (honouring a 429's Retry-After), up to
GATEWAY_ROUTER_MAX_RETRIES times and within GATEWAY_ROUTER_RETRY_BUDGET_SECONDS in all.

Health (consecutive failures, cooldown, last error; store/router_health.py) is shared through
Redis when REDIS_URL is set and read through a one-second local cache, so the request path
costs at most one Redis read per second per process; failures are written at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from django.conf import settings

from ..domain import Route, Target
from ..protocol.errors import GatewayError, InvalidRequest, RateLimited, UpstreamError, UpstreamUnavailable
from ..store import router_health
from ..store.router_health import Health, health_store
from ..ttlcache import TTLCache
from ..upstreams import UpstreamCall, delta_batches

log = logging.getLogger("gateway.router")

T = TypeVar("T")
HEALTH_CACHE_SECONDS = 1.0


# label -> health: the one-second view of the shared health
_health_view: TTLCache[str, Health] = TTLCache(lambda: HEALTH_CACHE_SECONDS)


def reset() -> None:
    """Tests: forget every target's health (and the current settings)."""
    router_health.reset()
    _health_view.clear()


async def _health(labels: list[str]) -> dict[str, Health]:
    known = {label: _health_view.get(label) for label in labels}
    stale = [label for label, cached in known.items() if cached is None]
    fresh: dict[str, Health] = {}
    if stale:
        try:
            fresh = await health_store().read(stale)
        except Exception as exc:  # noqa: BLE001 - no health: every target looks healthy
            log.warning("router: target health unavailable (%s)", exc)
            fresh = {label: Health() for label in stale}
        for label, health in fresh.items():
            _health_view.put(label, health)
    return {label: cached[0] if cached is not None else fresh[label] for label, cached in known.items()}


def attempt_order(route: Route, rng: random.Random | None = None) -> list[Target]:
    """Priority groups in order; weighted random within a group, its weight-0 targets after."""
    pick_from: Any = rng or random  # a Random, or the module's shared one
    order: list[Target] = []
    for priority in sorted({t.priority for t in route.targets}):
        group = [t for t in route.targets if t.priority == priority]
        pool = [t for t in group if t.weight > 0]
        while pool:
            pick = pick_from.choices(pool, weights=[t.weight for t in pool])[0]
            order.append(pick)
            pool.remove(pick)
        order += [t for t in group if t.weight == 0]
    return order


def retryable(error: GatewayError) -> bool:
    """Worth another target or another try: the upstream failed, not the request."""
    return isinstance(error, (UpstreamError, RateLimited)) and not isinstance(error, InvalidRequest)


def _retry_after(error: GatewayError) -> float | None:
    value = error.headers.get("Retry-After") if isinstance(error, RateLimited) else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class Slot:
    """A target's concurrency slot, held by one upstream call until it closes."""

    def __init__(self, target: Target, lease: str | None) -> None:
        self.target = target
        self.lease = lease

    async def release(self) -> None:
        if self.lease is not None:
            lease, self.lease = self.lease, None
            try:
                await health_store().release(self.target.label, lease)
            except Exception as exc:  # noqa: BLE001 - the lease expires on its own
                log.warning("router: could not release a slot of %s: %s", self.target.label, exc)


async def route_call(
    route: Route,
    open_one: Callable[[Target], Awaitable[T]],
    *,
    on_failure: Callable[[Target, GatewayError], None] | None = None,
) -> tuple[Target, T, Slot]:
    """Open a call on the best target, with fallback, retries and backoff. Returns the target,
    what `open_one` returned and the concurrency slot the call holds (release it at its end).
    Raises the last error when every attempt failed."""
    started = time.monotonic()
    budget = settings.GATEWAY_ROUTER_RETRY_BUDGET_SECONDS
    last: GatewayError | None = None
    for retry in range(settings.GATEWAY_ROUTER_MAX_RETRIES + 1):
        order = attempt_order(route)
        health = await _health([t.label for t in order])
        now = time.time()
        ready = [t for t in order if not health[t.label].cooling(now)]
        cooled = [t for t in order if health[t.label].cooling(now)]
        busy = 0
        for target in ready + cooled:  # a cooled target only once every other one failed or is busy
            slot = await _slot(target)
            if slot is None:
                busy += 1
                continue
            try:
                result = await open_one(target)
            except GatewayError as exc:
                await slot.release()
                last = exc
                if on_failure is not None:
                    on_failure(target, exc)
                if not retryable(exc):
                    raise
                await _failed(target, exc)
                continue
            except BaseException:
                await slot.release()
                raise
            if health[target.label].failures:
                await _succeeded(target)
            return target, result, slot
        if last is None and busy:
            raise UpstreamUnavailable(
                f"Every target of model '{route.name}' is at its concurrency limit; retry shortly.",
                code="upstream_busy",
                headers={"Retry-After": "1"},
            )
        assert last is not None
        if retry == settings.GATEWAY_ROUTER_MAX_RETRIES:
            break
        delay = random.uniform(
            0, min(settings.GATEWAY_ROUTER_BACKOFF_MAX_SECONDS, settings.GATEWAY_ROUTER_BACKOFF_SECONDS * 2**retry)
        )
        wanted = _retry_after(last)
        if wanted is not None:
            delay = max(delay, wanted)
        if time.monotonic() - started + delay > budget:
            log.warning("router: %s: no retry, the %g s budget would be exceeded (%s)", route.name, budget, last.code)
            break
        log.warning("router: %s: every target failed (%s); retry %d in %.2f s", route.name, last.code, retry + 1, delay)
        await asyncio.sleep(delay)
    assert last is not None
    raise last


async def _slot(target: Target) -> Slot | None:
    limit = target.max_concurrent
    if not limit:
        return Slot(target, None)

    lease = uuid.uuid4().hex
    try:
        acquired = await health_store().acquire(
            target.label, limit, lease, float(settings.GATEWAY_FOREGROUND_MAX_SECONDS)
        )
    except Exception as exc:  # noqa: BLE001 - unknown: let the call through
        log.warning("router: concurrency of %s not counted (%s)", target.label, exc)
        return Slot(target, None)
    return Slot(target, lease) if acquired else None


async def _failed(target: Target, error: GatewayError) -> None:
    try:
        health = await health_store().failed(
            target.label, f"{error.code}: {error.operator_detail or error.message}", cool_for=_retry_after(error)
        )
    except Exception as exc:  # noqa: BLE001 - health is advisory
        log.warning("router: could not record a failure of %s: %s", target.label, exc)
        return
    _health_view.put(target.label, health)
    if health.cooling(time.time()):
        log.warning(
            "router: target %s cooled down for %.0f s after %d failure(s); last: %s",
            target.label,
            health.cooled_until - time.time(),
            health.failures,
            health.last_error,
        )


async def _succeeded(target: Target) -> None:
    try:
        await health_store().succeeded(target.label)
    except Exception as exc:  # noqa: BLE001 - health is advisory: a success not recorded costs nothing
        log.warning("router: could not record a success of %s: %s", target.label, exc)
        return
    _health_view.put(target.label, Health())
    log.info("router: target %s is healthy again", target.label)


def target_health(labels: list[str]) -> dict[str, tuple[Health, int]]:
    """For the admin: each target's health and requests in flight (sync)."""
    try:
        return health_store().read_sync(labels)
    except Exception as exc:  # noqa: BLE001 - the admin shows health as unknown
        log.warning("router: target health unavailable: %s", exc)
        return {}


class SlotCall:
    """A call holding a target's concurrency slot (router.py) until it ends or is closed."""

    def __init__(self, call: UpstreamCall, slot: Slot) -> None:
        self.call = call
        self.slot = slot

    async def deltas(self) -> AsyncIterator[Any]:
        try:
            async for delta in self.call.deltas():
                yield delta
        finally:
            await self.slot.release()

    async def delta_batches(self) -> AsyncIterator[list[Any]]:
        try:
            async for batch in delta_batches(self.call):
                yield batch
        finally:
            await self.slot.release()

    async def aclose(self) -> None:
        try:
            await self.call.aclose()
        finally:
            await self.slot.release()
