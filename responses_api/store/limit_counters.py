"""The counters behind rate limits and budgets (orchestration/limits.py decides with them):
token buckets, concurrency leases and budget spend with its reservations. In Redis when
REDIS_URL is set (one Lua script checks every limit of a request and takes them all or none,
so web processes and workers share them exactly; settles are batched off the request path),
in this process otherwise (the embedded mode has one process)."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from .redis_clients import async_client, sync_client
from .redis_or_memory import RedisOrMemory

log = logging.getLogger("gateway.limits")


@dataclass(slots=True)
class Check:
    kind: str  # "bucket" | "lease" | "budget"
    key: str
    what: str  # for the message: "requests per minute", "tokens per minute", ...
    label: str
    limit: int
    cost: int = 0  # bucket: what is taken
    micro_usd_limit: int = -1  # budget: -1 unlimited
    reset_in: float = 0.0  # budget: seconds to the period's end
    reserve_micro_usd: int = 0  # budget: what this request reserves (its tokens are `cost`)
    alert_at: tuple[int, ...] = ()  # bucket, lease: percentages of the limit that alert


@dataclass(slots=True)
class Spend:
    """What a request spent against one budget, settled at its end, with what that budget's
    alert thresholds need: its limits (-1: none) and the percentages (e.g. 80, 100)."""

    key: str
    tokens: int
    micro_usd: int
    token_limit: int = -1
    micro_usd_limit: int = -1
    alert_at: tuple[int, ...] = ()


@dataclass(slots=True)
class Crossing:
    """A threshold a settle crossed first in its budget's period (only one settle, across
    processes, reports each), with the spend it reached."""

    key: str
    percent: int
    tokens: int
    micro_usd: int


def crossed(spend: Spend, tokens: int, micro_usd: int, alerted: set[tuple[int, int, int]]) -> list[Crossing]:
    """The thresholds reached and not yet reported (the Redis settle script does the same);
    marks them in `alerted`. A flag names the percentage and the budget's limits: an operator
    who raises a budget mid-period gets the new budget's thresholds reported too."""
    out = []
    for pct in spend.alert_at:
        reached = (spend.token_limit >= 0 and tokens * 100 >= spend.token_limit * pct) or (
            spend.micro_usd_limit >= 0 and micro_usd * 100 >= spend.micro_usd_limit * pct
        )
        flag = (pct, spend.token_limit, spend.micro_usd_limit)
        if reached and flag not in alerted:
            alerted.add(flag)
            out.append(Crossing(spend.key, pct, tokens, micro_usd))
    return out


OnCrossed = Callable[[list[Crossing]], None]


@dataclass(slots=True)
class LimitCrossing:
    """A per-minute or concurrency limit's threshold reached by the request being admitted
    (`refused`: the limit refused it), reported by this acquire only: its flag, set in the same
    atomic step, keeps every other request, in any process, from reporting it again for
    GATEWAY_LIMIT_ALERT_WINDOW_SECONDS."""

    check: int  # index in the request's checks
    percent: int
    used: int  # requests or tokens of the last minute, or runs in flight, with this one
    refused: bool = False


def limit_flag(key: str, percent: int, limit: int) -> str:
    """The flag of one threshold of one limit (the limit's value in it: a limit raised alerts
    at its new thresholds at once)."""
    return f"{key}:alert:{percent}:{limit}"


def limit_crossings(
    check: Check, index: int, used: float, refused: bool, flag: Callable[[str], bool]
) -> list[LimitCrossing]:
    """The thresholds `used` reached (all up to 100 when refused) whose flag `flag` could set;
    the Redis acquire script does the same."""
    out = []
    for pct in check.alert_at:
        if (refused or used * 100 >= check.limit * pct) and flag(limit_flag(check.key, pct, check.limit)):
            out.append(LimitCrossing(index, pct, math.floor(used), refused))
    return out


@dataclass(slots=True)
class Decision:
    allowed: bool
    failed: int = -1  # index of the check that refused
    retry_after: float = 0.0
    remaining: dict[int, tuple[float, float]] = field(default_factory=dict)  # bucket -> (left, to full)
    seed: int = -1  # a budget whose period count is not known yet
    crossings: list[LimitCrossing] = field(default_factory=list)  # alert thresholds this request reached


class LimitStore:
    async def acquire(self, checks: list[Check], lease_id: str, lease_seconds: float) -> Decision:
        raise NotImplementedError

    async def settle(
        self,
        buckets: list[tuple[str, int, int]],
        budgets: list[Spend],
        leases: list[str],
        lease_id: str,
        on_crossed: OnCrossed | None = None,
    ) -> None:
        """buckets: (key, limit, tokens to take back (+) or give back (-)); budgets: what was
        spent; leases: keys to release `lease_id` from. `on_crossed` hears of the alert
        thresholds the spend crossed first (when the settle is done, maybe later)."""
        raise NotImplementedError

    async def seed(self, key: str, tokens: int, micro_usd: int, ttl: float) -> None:
        raise NotImplementedError

    async def unflag(self, key: str, flag: str) -> None:
        """An alert reported but not recorded (alerts.py): its flag cleared, so that the next
        request reaching the threshold reports it again. `key`: a budget's counter, whose
        hash holds its flags; "" for a limit's flag (a key of its own)."""
        raise NotImplementedError

    def snapshot(self, checks: list[Check]) -> list[dict[str, Any]]:
        """Current use, synchronously (the admin): one entry per check."""
        raise NotImplementedError

    async def renew(self, grants: list[tuple[str, list[str], list[str]]], until_seconds: float) -> None:
        """(lease id, lease keys, budget keys) of live requests: their leases and reservations
        now last `until_seconds` more (liveness.py: a dead process's stop being renewed)."""
        raise NotImplementedError

    async def drain(self) -> None:
        """Wait for settles still on their way."""


class MemoryLimitStore(LimitStore):
    """The embedded mode's store: the same arithmetic as the Redis script, in this process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self.leases: dict[str, dict[str, float]] = {}  # key -> {lease id: until}
        self.spent: dict[str, tuple[int, int, float]] = {}  # key -> (tokens, micro_usd, until)
        # budget key -> {lease id: (tokens, micro_usd, until)}: what running requests reserved
        self.reserved: dict[str, dict[str, tuple[int, int, float]]] = {}
        self.alerted: dict[str, set[tuple[int, int, int]]] = {}  # budget key -> (pct, limits) reported
        self.limit_flags: dict[str, float] = {}  # limit_flag() -> until

    def _level(self, key: str, limit: int, now: float) -> float:
        tokens, at = self.buckets.get(key, (float(limit), now))
        return min(float(limit), tokens + max(0.0, now - at) * limit / 60.0)

    def _spent(self, key: str, now: float) -> tuple[int, int] | None:
        entry = self.spent.get(key)
        if entry is None or entry[2] <= now:
            return None
        return entry[0], entry[1]

    async def acquire(self, checks: list[Check], lease_id: str, lease_seconds: float) -> Decision:
        now = self.clock()
        levels: dict[int, float] = {}
        for i, check in enumerate(checks):
            if check.kind == "bucket":
                level, cost = self._level(check.key, check.limit, now), min(check.cost, check.limit)
                if level < cost:
                    return Decision(
                        False,
                        i,
                        (cost - level) * 60.0 / check.limit,
                        crossings=self._crossings(check, i, check.limit - level, True, now),
                    )
                levels[i] = level - cost
            elif check.kind == "lease":
                held = {k: v for k, v in self.leases.get(check.key, {}).items() if v > now}
                self.leases[check.key] = held
                if len(held) >= check.limit:
                    return Decision(
                        False, i, min(held.values()) - now, crossings=self._crossings(check, i, len(held), True, now)
                    )
            else:
                spent = self._spent(check.key, now)
                if spent is None:
                    return Decision(False, seed=i)
                holding = {k: v for k, v in self.reserved.get(check.key, {}).items() if v[2] > now}
                self.reserved[check.key] = holding
                reserved = (sum(v[0] for v in holding.values()), sum(v[1] for v in holding.values()))
                if _over_budget(check, *spent, reserved=reserved):
                    return Decision(False, i, check.reset_in)
        decision = Decision(True)
        for i, check in enumerate(checks):
            if check.kind == "bucket":
                self.buckets[check.key] = (levels[i], now)
                decision.remaining[i] = (levels[i], (check.limit - levels[i]) * 60.0 / check.limit)
                # alert_at is ascending (api/auth.py): below its first threshold, nothing more
                if check.alert_at and (check.limit - levels[i]) * 100 >= check.limit * check.alert_at[0]:
                    decision.crossings += self._crossings(check, i, check.limit - levels[i], False, now)
            elif check.kind == "lease":
                self.leases[check.key][lease_id] = now + lease_seconds
                if check.alert_at and len(self.leases[check.key]) * 100 >= check.limit * check.alert_at[0]:
                    decision.crossings += self._crossings(check, i, len(self.leases[check.key]), False, now)
            else:
                self.reserved[check.key][lease_id] = (check.cost, check.reserve_micro_usd, now + lease_seconds)
        return decision

    def _crossings(self, check: Check, index: int, used: float, refused: bool, now: float) -> list[LimitCrossing]:
        if not check.alert_at:
            return []

        def flag(name: str) -> bool:
            if self.limit_flags.get(name, 0.0) > now:
                return False
            self.limit_flags[name] = now + settings.GATEWAY_LIMIT_ALERT_WINDOW_SECONDS
            return True

        return limit_crossings(check, index, used, refused, flag)

    async def unflag(self, key: str, flag: str) -> None:
        if key:
            pct, tokens, micro_usd = (int(part) for part in flag.split(":")[1:])
            self.alerted.get(key, set()).discard((pct, tokens, micro_usd))
        else:
            self.limit_flags.pop(flag, None)

    async def settle(
        self,
        buckets: list[tuple[str, int, int]],
        budgets: list[Spend],
        leases: list[str],
        lease_id: str,
        on_crossed: OnCrossed | None = None,
    ) -> None:
        now = self.clock()
        for key, limit, delta in buckets:
            self.buckets[key] = (min(float(limit), self._level(key, limit, now) - delta), now)
        crossings: list[Crossing] = []
        for spend in budgets:
            self.reserved.get(spend.key, {}).pop(lease_id, None)
            entry = self.spent.get(spend.key)
            if entry is not None and entry[2] > now:
                self.spent[spend.key] = (entry[0] + spend.tokens, entry[1] + spend.micro_usd, entry[2])
                if spend.alert_at:
                    alerted = self.alerted.setdefault(spend.key, set())
                    crossings += crossed(spend, entry[0] + spend.tokens, entry[1] + spend.micro_usd, alerted)
        for key in leases:
            self.leases.get(key, {}).pop(lease_id, None)
        if crossings and on_crossed is not None:
            try:
                on_crossed(crossings)
            except Exception as exc:  # noqa: BLE001 - an alert lost is logged, the counts are right
                log.warning("budget alerts: could not report %d crossing(s): %s", len(crossings), exc)

    async def renew(self, grants: list[tuple[str, list[str], list[str]]], until_seconds: float) -> None:
        until = self.clock() + until_seconds
        for lease_id, keys, budget_keys in grants:
            for key in keys:
                if lease_id in self.leases.get(key, {}):
                    self.leases[key][lease_id] = until
            for budget_key in budget_keys:
                held = self.reserved.get(budget_key, {}).get(lease_id)
                if held is not None:
                    self.reserved[budget_key][lease_id] = (held[0], held[1], until)

    async def seed(self, key: str, tokens: int, micro_usd: int, ttl: float) -> None:
        if self._spent(key, self.clock()) is None:
            self.spent[key] = (tokens, micro_usd, self.clock() + ttl)
            self.alerted.pop(key, None)  # a new count (Redis's flags go with its hash)

    def snapshot(self, checks: list[Check]) -> list[dict[str, Any]]:
        now = self.clock()
        out: list[dict[str, int | None]] = []
        for check in checks:
            if check.kind == "bucket":
                out.append({"used": max(0, round(check.limit - self._level(check.key, check.limit, now)))})
            elif check.kind == "lease":
                out.append({"used": sum(1 for v in self.leases.get(check.key, {}).values() if v > now)})
            else:
                spent = self._spent(check.key, now)
                out.append({"used": None} if spent is None else {"used": spent[0], "micro_usd": spent[1]})
        return out


def _over_budget(check: Check, tokens: int, micro_usd: int, *, reserved: tuple[int, int] = (0, 0)) -> bool:
    """Whether a request must be refused. The rule (the same in the Redis script): what is spent,
    what running requests reserved and what this one reserves must fit the budget; but when no
    request holds a reservation, one is admitted as long as anything is left, so that the end of
    a budget can be used: only that last request may cross it, by at most its own size."""

    def refused(limit: int, spent: int, held: int, wanted: int) -> bool:
        if limit < 0:
            return False
        if spent >= limit:
            return True
        return held > 0 and spent + held + wanted > limit

    return refused(check.limit, tokens, reserved[0], check.cost) or refused(
        check.micro_usd_limit, micro_usd, reserved[1], check.reserve_micro_usd
    )


# Every check of a request in one atomic step: evaluate all, then take all (or nothing).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local lease_id = ARGV[1]
local lease_until = now + tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local n = #KEYS
local level = {}
local crossed = {}
local function refused(limit, spent, held, wanted)
  if limit < 0 then return false end
  if spent >= limit then return true end
  return held > 0 and spent + held + wanted > limit
end
-- alert thresholds of a per-minute or concurrency limit (ARGV's 7th field, "80,100"): each
-- reported by this request only if its flag was not set (limit_crossings() in Python)
local function alerts(i, key, limit, used, refusing)
  local at = ARGV[3 + (i - 1) * 7 + 7]
  if at == '' then return end
  for pct in string.gmatch(at, '%d+') do
    local p = tonumber(pct)
    if (refusing or used * 100 >= limit * p)
        and redis.call('SET', key .. ':alert:' .. pct .. ':' .. limit, 1, 'NX', 'EX', window) then
      table.insert(crossed, i)
      table.insert(crossed, p)
      table.insert(crossed, math.floor(used))
      table.insert(crossed, refusing and 1 or 0)
    end
  end
end
local function deny(i, retry)
  local out = {'deny', i, tostring(retry)}
  for _, v in ipairs(crossed) do table.insert(out, v) end
  return out
end
for i = 1, n do
  local kind = ARGV[3 + (i - 1) * 7 + 1]
  local a = tonumber(ARGV[3 + (i - 1) * 7 + 2])
  local b = tonumber(ARGV[3 + (i - 1) * 7 + 3])
  local c = tonumber(ARGV[3 + (i - 1) * 7 + 4])
  local d = tonumber(ARGV[3 + (i - 1) * 7 + 5])
  local e = tonumber(ARGV[3 + (i - 1) * 7 + 6])
  local key = KEYS[i]
  if kind == 'bucket' then
    local v = redis.call('HMGET', key, 'level', 'at')
    local lv = tonumber(v[1]) or a
    local at = tonumber(v[2]) or now
    lv = math.min(a, lv + math.max(0, now - at) * a / 60)
    local cost = math.min(b, a)
    if lv < cost then
      alerts(i, key, a, a - lv, true)
      return deny(i, (cost - lv) * 60 / a)
    end
    level[i] = lv - cost
  elseif kind == 'lease' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    local held = redis.call('ZCARD', key)
    if held >= a then
      -- the first lease to expire: when a slot frees at the latest, if its holder stopped
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      alerts(i, key, a, held, true)
      return deny(i, tonumber(first[2]) - now)
    end
  else
    local v = redis.call('HMGET', key, 'tokens', 'micro_usd')
    if not v[1] then return {'seed', i, '0'} end
    -- reservations of running requests: expired ones (a dead process's) are given back first
    local rkey, akey = key .. ':r', key .. ':a'
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', rkey, '-inf', now)) do
      local held = redis.call('HGET', akey, id)
      if held then
        local sep = string.find(held, ',')
        redis.call('HINCRBY', key, 'rt', 0 - tonumber(string.sub(held, 1, sep - 1)))
        redis.call('HINCRBY', key, 'ru', 0 - tonumber(string.sub(held, sep + 1)))
        redis.call('HDEL', akey, id)
      end
      redis.call('ZREM', rkey, id)
    end
    local r = redis.call('HMGET', key, 'rt', 'ru')
    local rt, ru = tonumber(r[1]) or 0, tonumber(r[2]) or 0
    if refused(a, tonumber(v[1]), rt, d) or refused(b, tonumber(v[2]), ru, e) then
      return deny(i, c)
    end
  end
end
local out = {'ok'}
for i = 1, n do
  local kind = ARGV[3 + (i - 1) * 7 + 1]
  local a = tonumber(ARGV[3 + (i - 1) * 7 + 2])
  local key = KEYS[i]
  if kind == 'bucket' then
    local to_full = (a - level[i]) * 60 / a
    redis.call('HSET', key, 'level', tostring(level[i]), 'at', tostring(now))
    redis.call('EXPIRE', key, math.ceil(to_full) + 1)
    table.insert(out, tostring(level[i]))
    table.insert(out, tostring(to_full))
    alerts(i, key, a, a - level[i], false)
  elseif kind == 'lease' then
    redis.call('ZADD', key, lease_until, lease_id)
    redis.call('EXPIRE', key, math.ceil(lease_until - now) + 1)
    alerts(i, key, a, redis.call('ZCARD', key), false)
  else
    local d = ARGV[3 + (i - 1) * 7 + 5]
    local e = ARGV[3 + (i - 1) * 7 + 6]
    local rkey, akey = key .. ':r', key .. ':a'
    redis.call('ZADD', rkey, lease_until, lease_id)
    redis.call('HSET', akey, lease_id, d .. ',' .. e)
    redis.call('HINCRBY', key, 'rt', d)
    redis.call('HINCRBY', key, 'ru', e)
    local ttl = redis.call('TTL', key)
    if ttl > 0 then
      redis.call('EXPIRE', rkey, ttl)
      redis.call('EXPIRE', akey, ttl)
    end
  end
end
for _, v in ipairs(crossed) do table.insert(out, v) end
return out
"""

_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local lease_id = ARGV[1]
local nb, ns = tonumber(ARGV[2]), tonumber(ARGV[3])
local arg = 4
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if i <= nb then
    local a, delta = tonumber(ARGV[arg]), tonumber(ARGV[arg + 1])
    arg = arg + 2
    local v = redis.call('HMGET', key, 'level', 'at')
    local lv = tonumber(v[1]) or a
    local at = tonumber(v[2]) or now
    lv = math.min(a, math.min(a, lv + math.max(0, now - at) * a / 60) - delta)
    redis.call('HSET', key, 'level', tostring(lv), 'at', tostring(now))
    redis.call('EXPIRE', key, math.ceil((a - lv) * 60 / a) + 1)
  elseif i <= nb + ns then
    if redis.call('EXISTS', key) == 1 then
      local tok = redis.call('HINCRBY', key, 'tokens', ARGV[arg])
      local mic = redis.call('HINCRBY', key, 'micro_usd', ARGV[arg + 1])
      local held = redis.call('HGET', key .. ':a', lease_id)
      if held then
        local sep = string.find(held, ',')
        redis.call('HINCRBY', key, 'rt', 0 - tonumber(string.sub(held, 1, sep - 1)))
        redis.call('HINCRBY', key, 'ru', 0 - tonumber(string.sub(held, sep + 1)))
        redis.call('HDEL', key .. ':a', lease_id)
        redis.call('ZREM', key .. ':r', lease_id)
      end
      -- alert thresholds reached: each reported by one settle only (a flag in the period's hash,
      -- named by the percentage and the limits, so that a budget raised mid-period alerts again)
      local tl, ul = tonumber(ARGV[arg + 2]), tonumber(ARGV[arg + 3])
      local limits = ':' .. ARGV[arg + 2] .. ':' .. ARGV[arg + 3]
      for pct in string.gmatch(ARGV[arg + 4], '%d+') do
        local p = tonumber(pct)
        if ((tl >= 0 and tok * 100 >= tl * p) or (ul >= 0 and mic * 100 >= ul * p))
            and redis.call('HSETNX', key, 'alert:' .. pct .. limits, 1) == 1 then
          table.insert(out, i - nb)
          table.insert(out, p)
          table.insert(out, tok)
          table.insert(out, mic)
        end
      end
    end
    arg = arg + 5
  else
    redis.call('ZREM', key, lease_id)
  end
end
return out
"""

_SEED = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'tokens', ARGV[1], 'micro_usd', ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
"""


class RedisLimitStore(LimitStore):
    PREFIX = "gw:rl:"

    def __init__(self, url: str) -> None:
        self.url = url
        self._scripts: dict[int, dict[str, Any]] = {}  # per client (one per event loop)
        # (keys, args, the budget keys in order, who hears of crossed thresholds)
        self._pending: list[tuple[list[str], list[Any], list[str], OnCrossed | None]] = []
        self._flushing: asyncio.Future[None] | None = None

    def _script(self, name: str) -> Any:
        """A registered script (sent by its SHA; the text only when Redis lacks it)."""
        client = async_client(self.url)
        scripts = self._scripts.get(id(client))
        if scripts is None:
            scripts = {
                key: client.register_script(text)
                for key, text in (("acquire", _ACQUIRE), ("settle", _SETTLE), ("seed", _SEED))
            }
            self._scripts = {id(client): scripts}
        return scripts[name]

    async def acquire(self, checks: list[Check], lease_id: str, lease_seconds: float) -> Decision:
        args: list[Any] = [lease_id, lease_seconds, max(1, math.ceil(settings.GATEWAY_LIMIT_ALERT_WINDOW_SECONDS))]
        for check in checks:
            args += [
                check.kind,
                check.limit,
                check.cost if check.kind == "bucket" else check.micro_usd_limit,
                check.reset_in,
                check.cost if check.kind == "budget" else 0,
                check.reserve_micro_usd,
                _alert_arg(check.alert_at),
            ]
        reply = await self._script("acquire")(keys=[self.PREFIX + c.key for c in checks], args=args)
        verdict = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
        if verdict == "seed":
            return Decision(False, seed=int(reply[1]) - 1)
        if verdict == "deny":
            return Decision(False, int(reply[1]) - 1, float(reply[2]), crossings=_limit_crossings(reply[3:]))
        decision = Decision(True)
        values = iter(reply[1:])
        for i, check in enumerate(checks):
            if check.kind == "bucket":
                decision.remaining[i] = (float(next(values)), float(next(values)))
        decision.crossings = _limit_crossings(list(values))
        return decision

    async def unflag(self, key: str, flag: str) -> None:
        client = self._script("settle").registered_client
        if key:
            await client.hdel(self.PREFIX + key, flag)
        else:
            await client.delete(self.PREFIX + flag)

    async def settle(
        self,
        buckets: list[tuple[str, int, int]],
        budgets: list[Spend],
        leases: list[str],
        lease_id: str,
        on_crossed: OnCrossed | None = None,
    ) -> None:
        """Queued, not awaited: a request's end does not wait for it, and the settles of one
        event-loop turn go to Redis in one pipeline (under load, one round trip for many).
        `drain()` waits for them (a worker before its loop closes); `on_crossed` is called
        from there."""
        keys = (
            [self.PREFIX + k for k, _, _ in buckets]
            + [self.PREFIX + b.key for b in budgets]
            + [self.PREFIX + k for k in leases]
        )
        if not keys:
            return
        args: list[Any] = [lease_id, len(buckets), len(budgets)]
        for _, limit, delta in buckets:
            args += [limit, delta]
        for b in budgets:
            args += [b.tokens, b.micro_usd, b.token_limit, b.micro_usd_limit, ",".join(map(str, b.alert_at))]
        self._pending.append((keys, args, [b.key for b in budgets], on_crossed))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # the other requests ending in this turn join the batch
        from redis.exceptions import NoScriptError

        script = self._script("settle")
        client = script.registered_client
        while self._pending:
            batch, self._pending = self._pending, []
            for attempt in range(2):
                try:
                    # EVALSHA by hand: a pipeline given Script objects asks SCRIPT EXISTS first,
                    # every time (one more round trip per flush).
                    async with client.pipeline(transaction=False) as pipe:
                        for keys, args, _, _ in batch:
                            pipe.evalsha(script.sha, len(keys), *keys, *args)
                        replies = await pipe.execute()
                    _report_crossings(batch, replies)
                    break
                except NoScriptError:  # Redis restarted and lost its scripts: load it, once
                    if attempt:
                        log.warning("rate limits: could not settle %d request(s): script missing", len(batch))
                    else:
                        await client.script_load(_SETTLE)
                except Exception as exc:  # noqa: BLE001 - leases expire; buckets refill on their own
                    log.warning("rate limits: could not settle %d request(s): %s", len(batch), exc)
                    break

    async def drain(self) -> None:
        if self._flushing is not None and not self._flushing.done():
            await self._flushing

    async def seed(self, key: str, tokens: int, micro_usd: int, ttl: float) -> None:
        await self._script("seed")(keys=[self.PREFIX + key], args=[tokens, micro_usd, math.ceil(ttl)])

    async def renew(self, grants: list[tuple[str, list[str], list[str]]], until_seconds: float) -> None:
        if not grants:
            return
        client = self._script("settle").registered_client
        until = time.time() + until_seconds  # Redis's clock and ours: the same host's, or NTP's
        async with client.pipeline(transaction=False) as pipe:
            for lease_id, keys, budget_keys in grants:
                for key in keys:
                    pipe.zadd(self.PREFIX + key, {lease_id: until}, xx=True)
                for budget_key in budget_keys:
                    pipe.zadd(self.PREFIX + budget_key + ":r", {lease_id: until}, xx=True)
            await pipe.execute()

    def snapshot(self, checks: list[Check]) -> list[dict[str, Any]]:
        client = sync_client(self.url)
        now = time.time()
        out: list[dict[str, int | None]] = []
        for check in checks:
            key = self.PREFIX + check.key
            if check.kind == "bucket":
                level, at = client.hmget(key, "level", "at")
                if level is None or at is None:
                    out.append({"used": 0})
                    continue
                current = min(check.limit, float(level) + max(0.0, now - float(at)) * check.limit / 60.0)
                out.append({"used": max(0, round(check.limit - current))})
            elif check.kind == "lease":
                out.append({"used": client.zcount(key, now, "+inf")})
            else:
                tokens, micro_usd = client.hmget(key, "tokens", "micro_usd")
                out.append(
                    {"used": None} if tokens is None else {"used": int(tokens), "micro_usd": int(micro_usd or 0)}
                )
        return out


@functools.cache
def _alert_arg(alert_at: tuple[int, ...]) -> str:
    """The script's form of a limit's thresholds ("80,100"), made once per distinct set: every
    request sends it."""
    return ",".join(map(str, alert_at))


def _limit_crossings(values: list[Any]) -> list[LimitCrossing]:
    """The acquire script's (check, percent, used, refused) per threshold it reported."""
    if not values:
        return []
    flat = [int(v) for v in values]
    return [LimitCrossing(flat[i] - 1, flat[i + 1], flat[i + 2], bool(flat[i + 3])) for i in range(0, len(flat), 4)]


def _report_crossings(
    batch: list[tuple[list[str], list[Any], list[str], OnCrossed | None]], replies: list[Any]
) -> None:
    """Each settle's reply lists (budget index, percent, tokens, micro-USD) per threshold it
    crossed first."""
    for (_, _, budget_keys, on_crossed), reply in zip(batch, replies):
        if not reply or on_crossed is None:
            continue
        values = [int(v) for v in reply]
        crossings = [
            Crossing(budget_keys[values[i] - 1], values[i + 1], values[i + 2], values[i + 3])
            for i in range(0, len(values), 4)
        ]
        try:
            on_crossed(crossings)
        except Exception as exc:  # noqa: BLE001 - an alert lost is logged, the counts are right
            log.warning("budget alerts: could not report %d crossing(s): %s", len(crossings), exc)


limit_store: RedisOrMemory[LimitStore] = RedisOrMemory(RedisLimitStore, MemoryLimitStore)


async def drain() -> None:
    """A worker's run ended: let its settle reach the store before the task's loop closes."""
    if limit_store.instance is not None:
        await limit_store.instance.drain()


def reset_store() -> None:
    """Tests: start from empty counters (and the current settings)."""
    limit_store.reset()
