"""A create's reusable prompt (`prompt: {id, version, variables}`), applied before anything
else of the create flow looks at the request (routing, tool planning, admission, a worker's
job): the template is read from the registry (store/selectors.py, cached for
GATEWAY_CACHE_SECONDS like routes and tools: versions are immutable, only a prompt's default
version and a new version take that long to be seen), applied to the body as sent
(protocol/prompts.py), and the body parsed again."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings

from ..domain import Principal
from ..protocol.errors import InvalidRequest, NotFound
from ..protocol.prompts import PromptTemplate, apply_prompt, prompt_ref
from ..protocol.request import CreateRequest, parse_create_request
from ..store import db, selectors
from ..ttlcache import TTLCache

# (tenant, prompt id, version or None): the template, or the 404 a look-up answered (message,
# param): an unknown id is remembered too, so a client retrying a wrong id costs no query each time.
_templates: TTLCache[tuple[int, str, int | None], PromptTemplate | tuple[str, str | None]] = TTLCache(
    lambda: settings.GATEWAY_CACHE_SECONDS
)


def clear_cache() -> None:
    _templates.clear()


def _lookup(*, tenant_id: int, prompt_id: str, version: int | None) -> PromptTemplate | tuple[str, str | None]:
    try:
        return selectors.prompt_template(tenant_id=tenant_id, prompt_id=prompt_id, version=version)
    except NotFound as exc:
        return exc.message, exc.param


async def apply_request_prompt(
    principal: Principal, req: CreateRequest, body: dict[str, Any]
) -> tuple[CreateRequest, dict[str, Any]]:
    """`req` and `body` with the create's prompt applied (unchanged without one). Raises the
    4xx of an unknown prompt or version, or of a variable missing or unknown, before any
    upstream call."""
    ref = prompt_ref(body)
    if ref is None:
        return req, body
    found = await db.run_cached(
        _templates,
        (principal.tenant_id, ref.id, ref.version),
        _lookup,
        tenant_id=principal.tenant_id,
        prompt_id=ref.id,
        version=ref.version,
    )
    if isinstance(found, tuple):
        raise NotFound(found[0], param=found[1])
    applied = apply_prompt(body, found, ref)
    if not applied.get("model"):  # said here: the parser's message would not name the prompt
        raise InvalidRequest(
            f"Missing required parameter: 'model' (prompt '{ref.id}' version {found.version} names none).",
            param="model",
        )
    # Parsed without `prompt`, so strictly (model, input and tool_choice as any create's); the
    # view parsed a WebSocket's body with `stream: true`, the applied one keeps what it parsed.
    # The body returned (a worker's job) has no `prompt` either: the echo is the request's.
    echo = applied.pop("prompt")
    parsed = parse_create_request({**applied, "stream": req.stream})
    return dataclasses.replace(parsed, prompt=echo), applied
