"""One response of a lane (a turn): the key looked up again, the request started with the same
engine as HTTP (`gateway.start_response`), its events relayed with the lane's `stream_id`, or an
error frame; one access-log line each. A client that goes away cancels it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from ...domain import Principal
from ...engine.run import ResponseRun
from ...orchestration.gateway import start_response
from ...orchestration.worker import follow_log
from ...protocol.errors import AuthenticationFailed, GatewayError, ServerError
from ...protocol.request import parse_create_request
from ...store.outages import unavailable
from ..auth import principal_for
from ..steering import Steer, SteerQueue, unsupported_reason
from .access_log import TERMINAL, TurnRecord
from .context import converted_for, evict, prior_for, remember
from .frames import Closed, Socket, error_envelope
from .lanes import Lane
from .steers import Steering

log = logging.getLogger("gateway.websocket")

ON_WORKERS = "This model runs on background workers, which take no steering."


class Turns:
    """Runs a connection's responses. `principal` is the key's, as of its last look-up;
    `refuse_key` closes the connection when the key no longer authenticates."""

    def __init__(
        self,
        principal: Principal,
        raw_key: str | None,
        connection_id: str,
        socket: Socket,
        steering: Steering,
        lanes: Callable[[], Iterable[Lane]],
        refuse_key: Callable[[AuthenticationFailed], Awaitable[None]],
    ) -> None:
        self.principal = principal
        # The key of the handshake, looked up again for each create (None: the handshake's
        # principal is used throughout).
        self._raw_key = raw_key
        self._connection_id = connection_id
        self._socket = socket
        self._steering = steering
        self._lanes = lanes
        self._refuse_key = refuse_key

    async def turn(
        self, lane: Lane, body: dict[str, Any], committed: list[Steer] | None, successor: bool
    ) -> SteerQueue | None:
        """One response (its events, or an error frame). Each is observed like an HTTP request:
        one access-log line and the same metrics. `committed`: the steering input `body`
        carries, handed back if no response is created."""
        turn = TurnRecord(self._connection_id, self.principal.tenant_name, lane.stream_id)
        if successor:
            turn.kind = "response.create (steered successor)"
        previous = body.get("previous_response_id") if isinstance(body.get("previous_response_id"), str) else None
        queue: SteerQueue | None = None
        try:
            prior = prior_for(self._lanes(), lane, previous)
            principal = await self._authenticated()
            # Streamed: the row is written at the start, so the response can be cancelled.
            req = parse_create_request({**body, "stream": True})
            started = await start_response(principal, req, body, prior=prior)  # run None: on a worker
            turn.model = started.request.model  # a prompt's template may name it
            turn.ignored_fields = started.request.ignored_fields
            run = started.run
            if run is None:  # a route that runs on workers: relay its log
                queue = self._steering.open(started.response_id, lane, body, ON_WORKERS)
                await self._relay(follow_log(started.response_id), lane, previous, turn, queue)
                return queue
            queue = self._steering.open(started.response_id, lane, body, unsupported_reason(body))
            if queue.unsupported is None:
                run.steering = queue
            run.converted_prefix = converted_for(lane, previous)
            await run.connect()
            await self._relay(run.events(), lane, previous, turn, queue, run=run)
            return queue
        except Closed:
            turn.status = 499
            raise
        except Exception as exc:
            if isinstance(exc, GatewayError):
                error = exc
            else:
                error = unavailable(exc) or ServerError("The gateway failed to handle this request.")
                if error.status == 500:
                    log.exception("websocket turn failed")
            turn.fail(error)
            evict(lane, previous)
            await self._socket.emit(error_envelope(error, lane.stream_id))
            if committed and previous is not None:
                await self._steering.hand_back(committed, lane, previous, error.message)
            if isinstance(error, AuthenticationFailed):
                await self._refuse_key(error)
            return None
        finally:
            if queue is not None:
                self._steering.end(queue)
            turn.log()

    async def _authenticated(self) -> Principal:
        """The connection's key looked up again, as each HTTP request's is (auth.py: a cache
        hit costs a dict look-up): its expiry, revocation or new secret ends the connection
        (AuthenticationFailed), and each create gets the key's current limits and budgets."""
        if self._raw_key is not None:
            self.principal = await principal_for(self._raw_key)
        return self.principal

    async def _relay(
        self,
        events: AsyncIterator[dict[str, Any]],
        lane: Lane,
        previous: str | None,
        turn: TurnRecord,
        queue: SteerQueue,
        run: ResponseRun | None = None,
    ) -> None:
        """Send a response's events, each with the lane's stream_id; a client that goes away
        cancels it."""
        final: dict[str, Any] | None = None
        stream_id = lane.stream_id
        stream = events.__aiter__()
        closed = asyncio.ensure_future(self._socket.closed.wait())
        try:
            while True:
                step = asyncio.ensure_future(stream.__anext__())
                await asyncio.wait({step, closed}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():  # the client closed mid-response: stop it (stored cancelled)
                    step.cancel()
                    with contextlib.suppress(BaseException):
                        await step
                    raise Closed()
                try:
                    event = step.result()
                except StopAsyncIteration:
                    break
                if stream_id is not None:
                    event["stream_id"] = stream_id
                if event["type"] in TERMINAL:
                    final = event["response"]
                    queue.accepting = False  # decided: steering input from now on is too late
                    queue.status = final["status"]
                    queue.output = final.get("output") or []
                await self._socket.emit(event)
                turn.saw(event)
        finally:
            closed.cancel()
            if run is not None or final is None:
                with contextlib.suppress(BaseException):
                    await stream.aclose()  # type: ignore[attr-defined]  # async generators (run.events, follow_log)
        if final is None or final["status"] not in ("completed", "incomplete"):
            queue.status = final["status"] if final is not None else "failed"
            evict(lane, previous)
            return
        remember(lane, final, run)
