"""The health of upstream targets, shared by every process (engine/failover.py decides with it):
consecutive failures, cooldowns, the last error, and the leases of per-target concurrency. In
Redis when REDIS_URL is set (a Lua script counts a failure and starts a cooldown atomically;
leases are a sorted set with expiry), in this process otherwise."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from .redis_clients import async_client, sync_client
from .redis_or_memory import RedisOrMemory


@dataclass(slots=True)
class Health:
    failures: int = 0
    cooled_until: float = 0.0  # epoch seconds
    last_error: str = ""
    last_error_at: float = 0.0

    def cooling(self, now: float) -> bool:
        return self.cooled_until > now


class HealthStore:
    async def read(self, labels: list[str]) -> dict[str, Health]:
        raise NotImplementedError

    async def failed(self, label: str, error: str, *, cool_for: float | None) -> Health:
        raise NotImplementedError

    async def succeeded(self, label: str) -> None:
        raise NotImplementedError

    async def acquire(self, label: str, limit: int, lease: str, seconds: float) -> bool:
        raise NotImplementedError

    async def release(self, label: str, lease: str) -> None:
        raise NotImplementedError

    def read_sync(self, labels: list[str]) -> dict[str, tuple[Health, int]]:
        """(health, requests in flight) per target, for the admin."""
        raise NotImplementedError


class MemoryHealthStore(HealthStore):
    def __init__(self) -> None:
        self.health: dict[str, Health] = {}
        self.leases: dict[str, dict[str, float]] = {}

    async def read(self, labels: list[str]) -> dict[str, Health]:
        return {label: self.health.get(label, Health()) for label in labels}

    async def failed(self, label: str, error: str, *, cool_for: float | None) -> Health:
        now = time.time()
        health = self.health.setdefault(label, Health())
        health.failures += 1
        health.last_error, health.last_error_at = error[:300], now
        if cool_for is None and health.failures >= settings.GATEWAY_ROUTER_COOLDOWN_FAILURES:
            cool_for = settings.GATEWAY_ROUTER_COOLDOWN_SECONDS
        if cool_for:
            health.cooled_until = max(health.cooled_until, now + cool_for)
        return Health(health.failures, health.cooled_until, health.last_error, health.last_error_at)

    async def succeeded(self, label: str) -> None:
        health = self.health.get(label)
        if health is not None:
            health.failures, health.cooled_until = 0, 0.0

    async def acquire(self, label: str, limit: int, lease: str, seconds: float) -> bool:
        now = time.time()
        held = {k: v for k, v in self.leases.get(label, {}).items() if v > now}
        if len(held) >= limit:
            self.leases[label] = held
            return False
        held[lease] = now + seconds
        self.leases[label] = held
        return True

    async def release(self, label: str, lease: str) -> None:
        self.leases.get(label, {}).pop(lease, None)

    def read_sync(self, labels: list[str]) -> dict[str, tuple[Health, int]]:
        now = time.time()
        return {
            label: (self.health.get(label, Health()), sum(1 for v in self.leases.get(label, {}).values() if v > now))
            for label in labels
        }


_FAILED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
redis.call('HSET', KEYS[1], 'last_error', ARGV[1], 'last_error_at', tostring(now))
local cool = tonumber(ARGV[2])
if cool < 0 and failures >= tonumber(ARGV[3]) then cool = tonumber(ARGV[4]) end
local until_ = tonumber(redis.call('HGET', KEYS[1], 'cooled_until') or '0')
if cool > 0 and now + cool > until_ then
  until_ = now + cool
  redis.call('HSET', KEYS[1], 'cooled_until', tostring(until_))
end
redis.call('EXPIRE', KEYS[1], 86400)
return {failures, tostring(until_), tostring(now)}
"""

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return 1
"""


class RedisHealthStore(HealthStore):
    PREFIX = "gw:rt:"

    def __init__(self, url: str) -> None:
        self.url = url

    def _client(self) -> Any:
        return async_client(self.url)

    @staticmethod
    def _health(raw: dict[bytes | str, bytes | str]) -> Health:
        def text(key: bytes) -> str:
            value = raw.get(key, b"")
            return value.decode() if isinstance(value, bytes) else str(value)

        return Health(
            int(text(b"failures") or 0),
            float(text(b"cooled_until") or 0),
            text(b"last_error"),
            float(text(b"last_error_at") or 0),
        )

    async def read(self, labels: list[str]) -> dict[str, Health]:
        async with self._client().pipeline(transaction=False) as pipe:
            for label in labels:
                pipe.hgetall(self.PREFIX + label)
            rows = await pipe.execute()
        return {label: self._health(row) for label, row in zip(labels, rows)}

    async def failed(self, label: str, error: str, *, cool_for: float | None) -> Health:
        failures, until, now = await self._client().eval(
            _FAILED,
            1,
            self.PREFIX + label,
            error[:300],
            -1 if cool_for is None else cool_for,
            settings.GATEWAY_ROUTER_COOLDOWN_FAILURES,
            settings.GATEWAY_ROUTER_COOLDOWN_SECONDS,
        )
        return Health(int(failures), float(until), error[:300], float(now))

    async def succeeded(self, label: str) -> None:
        await self._client().hset(self.PREFIX + label, mapping={"failures": 0, "cooled_until": 0})

    async def acquire(self, label: str, limit: int, lease: str, seconds: float) -> bool:
        return bool(await self._client().eval(_ACQUIRE, 1, self.PREFIX + "inflight:" + label, limit, lease, seconds))

    async def release(self, label: str, lease: str) -> None:
        await self._client().zrem(self.PREFIX + "inflight:" + label, lease)

    def read_sync(self, labels: list[str]) -> dict[str, tuple[Health, int]]:
        client = sync_client(self.url)
        now = time.time()
        return {
            label: (
                self._health(client.hgetall(self.PREFIX + label)),
                client.zcount(self.PREFIX + "inflight:" + label, now, "+inf"),
            )
            for label in labels
        }


health_store: RedisOrMemory[HealthStore] = RedisOrMemory(RedisHealthStore, MemoryHealthStore)


def reset() -> None:
    """Tests: forget every target's health kept in this process (and the current settings)."""
    health_store.reset()
