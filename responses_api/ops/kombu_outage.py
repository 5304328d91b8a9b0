"""A broker outage must not kill the worker: kombu 5.7's Redis channel, closed after its
connection was lost, looks up the connection's parameters through a transport whose `client`
kombu itself has already cleared, and raises AttributeError ('NoneType' object has no attribute
'hostname') from `restore_unacked` and from `ack`. Celery treats that as an unrecoverable
error and the worker exits, while for a lost connection it reconnects.

`install()` makes that lookup raise what it means, a connection error, which Celery's
connection-loss handling already ignores and recovers from (tests/reliability/test_outages.py
restarts Redis under a busy worker). Remove it once kombu's channel keeps its parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    from kombu.transport import redis as transport
    from redis.exceptions import ConnectionError as RedisConnectionError

    connparams: Callable[..., dict[str, Any]] = transport.Channel._connparams  # kombu leaves it unannotated

    def _connparams(self: Any, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return connparams(self, asynchronous=asynchronous)

    transport.Channel._connparams = _connparams  # type: ignore[method-assign]  # patching kombu's transport is this module's point
    _installed = True
