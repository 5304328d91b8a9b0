"""Run sync ORM work from async code: one short call per transaction, connection released at once."""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections

T = TypeVar("T")


def _release(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        # Hand the connection back to the pool (or close it) so that no thread
        # holds one across an upstream call or a stream.
        for conn in connections.all(initialized_only=True):
            if not conn.in_atomic_block:
                conn.close()


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `fn` in the loop's default executor (not a per-request thread)."""
    return await sync_to_async(functools.partial(_release, fn), thread_sensitive=False)(*args, **kwargs)


__all__ = ["run", "close_old_connections"]
