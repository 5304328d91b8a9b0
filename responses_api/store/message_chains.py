"""Where the Messages front door remembers its stored turns (orchestration/message_turns.py):
a turn's response id under the digest of the messages it was sent, so that the next request of
the same conversation, served by any process, chains onto it. In Redis when REDIS_URL is set
(every web process sees every turn; one MGET per request), else in this process's memory."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from django.conf import settings

from ..ttlcache import TTLCache
from .redis_clients import async_client
from .redis_or_memory import RedisOrMemory


class Turn(NamedTuple):
    response_id: str
    messages: int  # how many messages it was sent
    system: bytes  # the digest of its system prompt


def _seconds() -> float:
    return float(settings.GATEWAY_MESSAGES_CHAIN_SECONDS)


class ChainStore:
    async def first(self, tenant_id: int, digests: list[bytes]) -> Turn | None:
        """The turn remembered under the first of `digests` that has one."""
        raise NotImplementedError

    async def remember(self, tenant_id: int, digest: bytes, turn: Turn) -> None:
        raise NotImplementedError


class MemoryChainStore(ChainStore):
    def __init__(self) -> None:
        self._turns: TTLCache[tuple[int, bytes], Turn] = TTLCache(_seconds)

    async def first(self, tenant_id: int, digests: list[bytes]) -> Turn | None:
        for digest in digests:
            found = self._turns.get((tenant_id, digest))
            if found is not None:
                return found[0]
        return None

    async def remember(self, tenant_id: int, digest: bytes, turn: Turn) -> None:
        self._turns.put((tenant_id, digest), turn)


class RedisChainStore(ChainStore):
    def __init__(self, url: str) -> None:
        self.url = url

    @staticmethod
    def _key(tenant_id: int, digest: bytes) -> str:
        # The tenant as a hash tag: one request's keys share a slot (an MGET on Redis Cluster).
        return f"gw:mt:{{t{tenant_id}}}:{digest.hex()}"

    async def first(self, tenant_id: int, digests: list[bytes]) -> Turn | None:
        if not digests:
            return None
        values: list[Any] = await async_client(self.url).mget([self._key(tenant_id, d) for d in digests])
        for value in values:
            if value is not None:
                response_id, messages, system = json.loads(value)
                return Turn(str(response_id), int(messages), bytes.fromhex(system))
        return None

    async def remember(self, tenant_id: int, digest: bytes, turn: Turn) -> None:
        value = json.dumps([turn.response_id, turn.messages, turn.system.hex()])
        await async_client(self.url).set(self._key(tenant_id, digest), value, ex=max(1, int(_seconds())))


chain_store: RedisOrMemory[ChainStore] = RedisOrMemory(RedisChainStore, MemoryChainStore)
