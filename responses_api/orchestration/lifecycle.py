"""A web process's drain: what SIGTERM (a rolling deploy's stop) does before the server exits.

Serving, until SIGTERM. Then draining: `/readyz` answers 503 (a load balancer stops sending
here), new API requests and WebSocket handshakes get a retryable 503, idle WebSocket connections
are told `websocket_connection_limit_reached` and closed (clients reconnect elsewhere), open
streams and WebSocket turns get GATEWAY_DRAIN_SECONDS to finish. What still runs then ends
`failed` with the retryable `server_shutting_down`, stored so. Only then is the server asked
to stop (uvicorn's own SIGTERM handling), so it has nothing left to wait for. A second SIGTERM
stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from django.conf import settings

from ..protocol.errors import GatewayError
from ..store.outages import ServiceUnavailable

log = logging.getLogger("gateway.lifecycle")


class Stoppable(Protocol):
    @property
    def ended(self) -> bool: ...

    def request_stop(self, error: GatewayError) -> None: ...


class Drainable(Protocol):
    def drain(self) -> None: ...


_runs: weakref.WeakSet[Stoppable] = weakref.WeakSet()  # foreground runs of this process
_connections: weakref.WeakSet[Drainable] = weakref.WeakSet()  # WebSocket connections of this process
_draining = False
_task: asyncio.Task[None] | None = None


def draining() -> bool:
    return _draining


def shutting_down() -> ServiceUnavailable:
    """The answer to a request this process will not serve or finish: retry elsewhere."""
    return ServiceUnavailable(
        "This gateway process is shutting down; retry the request.",
        code="server_shutting_down",
        headers={"Retry-After": "1", "Connection": "close"},
    )


def track_run(run: Stoppable) -> None:
    _runs.add(run)


def track_connection(connection: Drainable) -> None:
    _connections.add(connection)
    if _draining:
        connection.drain()


def install_sigterm_drain() -> None:
    """Put the drain in front of the server's own SIGTERM handler (call from the running loop,
    after the server installed its handlers: the ASGI lifespan's startup)."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGTERM)

    def stop_server(signum: int, frame: Any) -> None:
        if callable(previous):
            previous(signum, frame)
        else:  # no server handler: the default action, now
            signal.signal(signal.SIGTERM, previous)
            os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if _draining:  # a second SIGTERM: stop now
            stop_server(signum, frame)
            return
        loop.call_soon_threadsafe(_start, lambda: stop_server(signum, None))

    signal.signal(signal.SIGTERM, on_sigterm)


def _start(then: Callable[[], None]) -> None:
    global _task
    if _task is None:
        _task = asyncio.ensure_future(drain(settings.GATEWAY_DRAIN_SECONDS, then))


async def drain(seconds: float, then: Callable[[], None] | None = None) -> None:
    """Stop taking work, let the running work end within `seconds`, fail what is left, then
    call `then` (the server's own stop)."""
    global _draining
    _draining = True
    started = time.monotonic()
    running = [run for run in list(_runs) if not run.ended]
    log.warning(
        "draining: %d responses and %d WebSocket connections open; %g s to finish",
        len(running),
        len(_connections),
        seconds,
    )
    for connection in list(_connections):
        connection.drain()
    deadline = started + seconds
    while time.monotonic() < deadline and any(not run.ended for run in list(_runs)):
        await asyncio.sleep(0.1)
    left = [run for run in list(_runs) if not run.ended]
    for run in left:
        run.request_stop(shutting_down())
    settle = time.monotonic() + 5  # their ends are stored
    while time.monotonic() < settle and any(not run.ended for run in left):
        await asyncio.sleep(0.05)
    log.warning("drained in %.1f s (%d responses ended as failed)", time.monotonic() - started, len(left))
    if then is not None:
        then()


def reset() -> None:
    """Tests: serving again."""
    global _draining, _task
    _draining, _task = False, None
