"""`POST /v1/responses/input_tokens`: the input tokens a create request would send its routed
model, counted by the upstream where it can (upstreams/tokenize.py), else estimated."""

from __future__ import annotations

from typing import Any

from ..domain import Principal, Route
from ..protocol.chat import build_chat_request
from ..protocol.compaction import expand_compactions
from ..protocol.request import CreateRequest
from ..protocol.tokens import estimate_request
from ..sealing import sealer
from ..upstreams.chat_completions import chat_options
from ..upstreams.tokenize import count_tokens
from .admission import open_sealed_reasoning, route_for
from .assembly import request_context
from .limits import admit
from .prompts import apply_request_prompt


async def count_input_tokens(
    principal: Principal, req: CreateRequest, body: dict[str, Any] | None = None
) -> tuple[int, bool, dict[str, str]]:
    """The input tokens of `req` (protocol.request.parse_input_tokens_request), whether the
    count is exact (the upstream tokenized it) or the gateway's estimate, and the rate-limit
    headers of its admission.

    A count is admitted as a request (it may call the upstream's tokenizer): it takes one from
    the requests-per-minute limits, reserves no tokens and holds no concurrency slot.
    `body`: the body as sent, whose reusable `prompt` is applied as a create applies it."""
    if body is not None:
        counted = {k: v for k, v in body.items() if k not in ("stream", "background", "store")}
        req, _ = await apply_request_prompt(principal, req, counted)
    route = await route_for(principal, req.model)  # as a create: an unknown model is refused first
    grant = await admit(principal, concurrent=False)
    try:
        count, exact = await _count(principal, req, route)
    finally:
        if grant is not None:
            await grant.end(None)
    return count, exact, grant.headers if grant is not None else {}


async def _count(principal: Principal, req: CreateRequest, route: Route) -> tuple[int, bool]:
    req = open_sealed_reasoning(req, principal.tenant_id)
    context = await request_context(principal, req)
    unseal = sealer().unseal
    items = expand_compactions(
        context.items,
        lambda sealed: unseal(sealed, tenant_id=principal.tenant_id, purpose="compaction"),
        context.input_spans,
    )
    # What the first model call is offered: deferred tools wait for a search (tool_search.py).
    tools = [t for t in req.tools if not t.deferred]
    if route.targets:
        target = route.targets[0]
        chat = build_chat_request(
            req,
            items,
            upstream_model=target.upstream_model,
            stream=False,
            tools=tools,
            options=chat_options(target.provider.options),
        )
        exact = await count_tokens(target, chat)
        if exact is not None:
            return exact, True
    return estimate_request(items, req.instructions, [t.schema() for t in tools]), False
