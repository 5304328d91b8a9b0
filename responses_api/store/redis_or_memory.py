"""The choice every shared store makes once per process: Redis when REDIS_URL is set (every
process sees the same state), else this process's memory (the embedded mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from django.conf import settings

T = TypeVar("T")


class RedisOrMemory(Generic[T]):
    """Call it for the process's store, made on first use, not at import: settings are read
    then (tests change REDIS_URL between tests, and `reset` makes the next call choose again)."""

    __slots__ = ("_memory", "_redis", "instance")

    def __init__(self, redis: Callable[[str], T], memory: Callable[[], T]) -> None:
        self._redis = redis
        self._memory = memory
        self.instance: T | None = None  # tests may set one (a Redis nothing listens on)

    def __call__(self) -> T:
        if self.instance is None:
            self.instance = self._redis(settings.REDIS_URL) if settings.REDIS_URL else self._memory()
        return self.instance

    def reset(self) -> None:
        self.instance = None
