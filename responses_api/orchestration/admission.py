"""What a request passes before any work: access to its model's route, the sealed items it
carries back (opened for the run, a 400 when not this gateway's), and the rate limits and
budget of its key and tenant (limits.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..domain import Principal, Route
from ..protocol.errors import InvalidRequest, NotFound
from ..protocol.request import CreateRequest
from ..protocol.tokens import DEFAULT_OUTPUT_RESERVE, estimate_request
from ..sealing import SealBroken, sealer
from ..store import db
from .limits import Grant, admit
from .routing import route_cached, route_get
from .windows import background_lease_seconds


async def route_for(principal: Principal, model: str) -> Route:
    if not principal.may_use(model):
        # Indistinguishable from an unknown model: a key learns nothing of others' routes.
        raise NotFound(
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    cached = route_cached(model)
    return cached if cached is not None else await db.run_shared(("route", model), route_get, model)


def open_sealed_reasoning(req: CreateRequest, tenant_id: int) -> CreateRequest:
    """Reasoning items a client carries back (store: false) get their text again from
    `encrypted_content`, which this gateway sealed for this tenant; anything else there is a 400.
    The result is `req` with those items opened (copies: the parsed request is not changed)."""
    opened: dict[int, dict[str, Any]] = {}
    for i, item in enumerate(req.input_items):
        if item["type"] == "compaction":
            try:  # checked here so a bad one is a 400 before any work; the engine opens it again
                sealer().unseal(item["encrypted_content"], tenant_id=tenant_id, purpose="compaction")
            except SealBroken:
                raise InvalidRequest(
                    "This compaction item's 'encrypted_content' was not produced by this gateway's "
                    "/v1/responses/compact for this key's tenant, or was altered.",
                    param=f"input[{i}].encrypted_content",
                    code="invalid_encrypted_content",
                ) from None
            continue
        if item["type"] != "reasoning" or "encrypted_content" not in item:
            continue
        try:
            payload = sealer().unseal(item["encrypted_content"], tenant_id=tenant_id, purpose="reasoning")
        except SealBroken:
            raise InvalidRequest(
                "This reasoning item's 'encrypted_content' was not produced by this gateway for this "
                "key's tenant, or was altered.",
                param=f"input[{i}].encrypted_content",
                code="invalid_encrypted_content",
            ) from None
        if not item.get("content") and isinstance(payload, dict) and payload.get("text"):
            opened[i] = {**item, "content": [{"type": "reasoning_text", "text": payload["text"]}]}
    if not opened:
        return req
    return dataclasses.replace(req, input_items=[opened.get(i, item) for i, item in enumerate(req.input_items)])


async def admit_request(
    principal: Principal, req: CreateRequest, route: Route, *, on_worker: bool = False
) -> Grant | None:
    """The rate limits and budget of the principal, for one create (None: it has none)."""
    if not principal.quotas and not principal.budgets:
        return None
    if not req.generate:  # a warm-up calls no model: one request, no tokens, no slot held
        return await admit(principal, concurrent=False)

    def estimate() -> int:  # the new input only: a chain's context is settled at the end
        tools = [t.schema() for t in req.tools]
        return estimate_request(req.input_items, req.instructions, tools)

    lease = background_lease_seconds(req.completion_window) if on_worker else None
    # A budget reserves the output a request may produce: its max_output_tokens (which the
    # tokens-per-minute limit counts too) or, without one, what the engine leaves room for in a
    # context window.
    output_reserve = 0 if req.max_output_tokens else DEFAULT_OUTPUT_RESERVE
    return await admit(
        principal,
        price=route.price,
        estimate=estimate,
        lease_seconds=lease,
        output_cap=req.max_output_tokens or 0,
        output_reserve=output_reserve,
    )
