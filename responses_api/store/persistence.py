"""The store side of a run: `DatabasePersistence`, what the engine calls to write a response.

Used by the web path and the worker alike (assembly.py builds both runs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..models import Response, UsageRecord
from ..protocol.errors import GatewayError
from . import db, services
from .outages import unavailable
from .usage import usage_writer

log = logging.getLogger("gateway.persistence")


class Settles(Protocol):
    """What a run's admission holds (orchestration/limits.py `Grant`): settled with the real
    usage, and released, when the response is stored."""

    async def end(self, usage: dict[str, Any] | None, *, cache_write_1h_tokens: int = 0) -> None: ...


class DatabasePersistence:
    """Stores the response (store: true), or only its usage (store: false).

    `create_row`: the request-time fields of a row not yet written. A stream's
    row is inserted by `open()`, while the upstream call is being opened, so it
    is visible (in_progress) from the first event on and can be cancelled; a
    non-streaming create writes its row once, in `finish()`."""

    def __init__(
        self,
        *,
        tenant_id: int,
        input_items: list[dict[str, Any]],
        store: bool,
        create_row: dict[str, Any] | None = None,
        insert_at_open: bool = False,
        conversation_id: str | None = None,
        grant: Settles | None = None,
        stored_output: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        api_key_id: int | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.api_key_id = api_key_id  # whose usage a store: false response is
        self.grant = grant  # the rate limits this run holds: settled and released at its end
        self.tenant_id = tenant_id
        self.input_items = input_items
        self.store = store
        # A /compact run: its row keeps the response this makes of the run's (its output), no input.
        self.stored_output = stored_output
        self.create_row = create_row
        self.insert_at_open = insert_at_open

    async def open(self) -> None:
        if not (self.store and self.insert_at_open and self.create_row is not None):
            return
        try:
            if db.native_async():
                await db.fetch_one(*services.insert_statement(row=self.create_row, status=Response.Status.IN_PROGRESS))
            else:
                await db.run(services.response_insert, row=self.create_row, status=Response.Status.IN_PROGRESS)
        except Exception as exc:
            outage = unavailable(exc)
            if outage is None:
                raise
            # The insert may have committed before the connection broke (the client gets a
            # 503 either way): end that row, if it exists, once the database answers again.
            log.warning(
                "response %s: its row may be half-written; it is ended once the database is back", self.create_row["id"]
            )
            task = asyncio.ensure_future(_fail_if_written(self.create_row["id"], outage))
            _background.add(task)
            task.add_done_callback(_background.discard)
            raise outage from exc
        self.create_row = None  # finish() updates the row from now on

    async def finish(
        self,
        response: dict[str, Any],
        *,
        upstream: str,
        latency_ms: int,
        input_items: list[dict[str, Any]] | None = None,
        cache_write_1h_tokens: int = 0,
    ) -> None:
        """`cache_write_1h_tokens`: the 1-hour part of the usage's cache writes (not shown in
        the public usage; kept on the row and the usage record for pricing)."""
        try:
            await self._write(
                response,
                upstream=upstream,
                latency_ms=latency_ms,
                input_items=input_items,
                cache_write_1h_tokens=cache_write_1h_tokens,
            )
        finally:
            if self.grant is not None:  # after the write: a budget seeded from the store then counts it
                await self.grant.end(response.get("usage"), cache_write_1h_tokens=cache_write_1h_tokens)

    async def _write(
        self,
        response: dict[str, Any],
        *,
        upstream: str,
        latency_ms: int,
        input_items: list[dict[str, Any]] | None,
        cache_write_1h_tokens: int = 0,
    ) -> None:
        if not self.store:  # no response row (a conversation keeps only its items): a usage record
            self._record_usage(
                response, upstream=upstream, latency_ms=latency_ms, cache_write_1h_tokens=cache_write_1h_tokens
            )
            if self.conversation_id is None:
                return
        input_items = self.input_items if input_items is None else input_items
        if self.stored_output is not None:
            response, input_items = self.stored_output(response), []
        fields: dict[str, Any] = dict(
            tenant_id=self.tenant_id,
            response=response,
            input_items=input_items,
            upstream=upstream,
            latency_ms=latency_ms,
            create_row=self.create_row,
            cache_write_1h_tokens=cache_write_1h_tokens,
        )
        try:
            if self.conversation_id is not None:  # with the conversation's append, one transaction
                await db.run(
                    services.response_finish_in_conversation,
                    **fields,
                    conversation_id=self.conversation_id,
                    store=self.store,
                )
            elif db.native_async() and services.item_sequence_known():
                await db.fetch_one(*services.finish_statement(**fields))
            else:  # SQLite, or the first write of this process (it looks up the item sequence)
                await db.run(services.response_finish, **fields)
        except Exception as exc:
            outage = unavailable(exc)
            if outage is not None:
                raise outage from exc
            raise

    def _record_usage(
        self, response: dict[str, Any], *, upstream: str, latency_ms: int, cache_write_1h_tokens: int = 0
    ) -> None:
        """A `store: false` response keeps no row, but its tokens were spent: the usage API and
        the budgets (seeded from the database) count them. Written after the answer, in a batch
        (store/usage.py): nothing a client waits for."""
        usage = response.get("usage") or {}
        inputs = usage.get("input_tokens_details") or {}
        usage_writer.add(
            tenant_id=self.tenant_id,
            api_key_id=self.api_key_id,
            endpoint=UsageRecord.Endpoint.UNSTORED_RESPONSE,
            model=str(response.get("model") or ""),
            upstream=upstream,
            status=200,  # the client got the response; its own status says how it ended
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cached_tokens=inputs.get("cached_tokens"),
            cache_write_tokens=inputs.get("cache_write_tokens"),
            cache_write_1h_tokens=cache_write_1h_tokens if usage else None,
            latency_ms=latency_ms,
        )

    async def finish_failed(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        await self.finish({**response, "output": []}, upstream=upstream, latency_ms=latency_ms, input_items=[])


_background: set[asyncio.Task[None]] = set()  # the loop holds tasks only weakly


async def _fail_if_written(response_id: str, error: GatewayError, attempts: int = 20) -> None:
    delay = 0.5
    for _ in range(attempts):
        await asyncio.sleep(delay)
        try:
            await db.run(services.response_end_open, response_id=response_id, error=error.as_response_error())
            return
        except Exception:  # noqa: BLE001 - still down: wait and try again
            delay = min(delay * 2, 5.0)
    log.warning("response %s: could not check for a half-written row; the reaper will end it", response_id)
