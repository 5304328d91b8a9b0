"""The async orchestration between views (or workers) and the engine: prepare a run."""
from __future__ import annotations

import time
from datetime import datetime, timezone as dt_timezone
from typing import Any

from . import db, services
from .auth import Principal, authenticate_key, cached_principal
from .engine import ResponseJob, ResponseRun
from .protocol.errors import NotFound
from .protocol.ids import new_id
from .protocol.request import CreateRequest
from .protocol.response import request_params
from .routing import Route, route_cached, route_get


async def principal_for(raw_key: str) -> Principal:
    return cached_principal(raw_key) or await db.run(authenticate_key, raw_key)


async def route_for(principal: Principal, model: str) -> Route:
    if not principal.may_use(model):
        # Indistinguishable from an unknown model: a key learns nothing of others' routes.
        raise NotFound(
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model", code="model_not_found",
        )
    return route_cached(model) or await db.run(route_get, model)


class DatabasePersistence:
    """Stores the terminal state (store: true) or nothing at all (store: false)."""

    def __init__(self, *, tenant_id: int, input_items: list[dict[str, Any]], store: bool) -> None:
        self.tenant_id = tenant_id
        self.input_items = input_items
        self.store = store

    async def finish(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        if not self.store:
            return
        await db.run(
            services.response_finish,
            tenant_id=self.tenant_id,
            response=response,
            input_items=self.input_items,
            upstream=upstream,
            latency_ms=latency_ms,
        )


async def prepare_run(principal: Principal, req: CreateRequest) -> ResponseRun:
    """Validate access, load the chain, insert the open row: one thread hop at most."""
    route = await route_for(principal, req.model)
    response_id = new_id("resp")
    now = time.time()
    params = request_params(req)
    needs_db = req.store or req.previous_response_id or any(
        i["type"] == "item_reference" for i in req.input_items
    )
    if needs_db:
        begin = await db.run(
            services.response_begin,
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            response_id=response_id,
            created_at=datetime.fromtimestamp(now, dt_timezone.utc),
            model=req.model,
            previous_response_id=req.previous_response_id,
            input_items=req.input_items,
            params=params,
            status="in_progress",
            store=req.store,
        )
        context = begin.context
    else:
        context = list(req.input_items)
    job = ResponseJob(
        response_id=response_id,
        created_at=int(now),
        tenant_id=principal.tenant_id,
        request=req,
        params=params,
        route=route,
        context=context,
        input_items=req.input_items,
    )
    persistence = DatabasePersistence(
        tenant_id=principal.tenant_id, input_items=req.input_items, store=req.store
    )
    return ResponseRun(job, persistence)
