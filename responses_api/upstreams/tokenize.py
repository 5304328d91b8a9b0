"""What an upstream can tell about tokens: its context window (vLLM and SGLang report
`max_model_len` in /v1/models) and exact counts (vLLM's `POST /tokenize` with chat messages).
Both are best effort: a short timeout, and an upstream that cannot answer is remembered for a
while, so a request never waits on it twice."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp

from ..domain import Target
from ..protocol import jsonlimits
from ..store.ttlcache import TTLCache
from .http import get_session, proxy_for

log = logging.getLogger("gateway.upstreams")

REMEMBER_SECONDS = 600.0
_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
_windows: TTLCache[tuple[str, str], int | None] = TTLCache(lambda: REMEMBER_SECONDS)
_no_tokenizer: TTLCache[str, bool] = TTLCache(lambda: REMEMBER_SECONDS)


def _headers(target: Target) -> dict[str, str]:
    headers = dict(target.provider.headers)
    if target.provider.api_key:
        headers["authorization"] = f"Bearer {target.provider.api_key}"
    return headers


async def _get_json(target: Target, url: str, body: dict[str, Any] | None = None) -> Any:
    session = get_session()
    method = session.post if body is not None else session.get
    kwargs: dict[str, Any] = {
        "headers": _headers(target),
        "timeout": _TIMEOUT,
        "proxy": proxy_for(url),
        "allow_redirects": False,
    }
    if body is not None:
        kwargs["data"] = json.dumps(body).encode()
        kwargs["headers"]["content-type"] = "application/json"
    async with method(url, **kwargs) as response:
        if response.status != 200:
            return None
        return jsonlimits.loads(await response.read(), max_depth=None)


async def context_window(target: Target) -> int | None:
    """The upstream model's context window, when its /v1/models says (cached)."""
    key = (target.provider.base_url, target.upstream_model)
    cached = _windows.get(key)
    if cached is not None:
        return cached[0]
    window: int | None = None
    try:
        listing = await _get_json(target, f"{target.provider.base_url}/models")
        for entry in (listing or {}).get("data") or []:
            if isinstance(entry, dict) and entry.get("id") == target.upstream_model:
                value = entry.get("max_model_len") or entry.get("context_length")
                window = value if isinstance(value, int) and value > 0 else None
    except Exception as exc:  # noqa: BLE001 - best effort
        log.info("could not learn the context window of %s: %s", target.label, type(exc).__name__)
    return _windows.put(key, window)


async def count_tokens(target: Target, chat_body: dict[str, Any]) -> int | None:
    """Exact input tokens of a Chat Completions request, where the upstream tokenizes
    (vLLM: POST /tokenize at the server's root); None where it cannot."""
    base = target.provider.base_url
    if _no_tokenizer.get(base) is not None:
        return None
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    body = {"model": target.upstream_model, "messages": chat_body["messages"], "add_generation_prompt": True}
    if chat_body.get("tools"):
        body["tools"] = chat_body["tools"]
    try:
        answer = await _get_json(target, f"{root}/tokenize", body)
    except Exception:  # noqa: BLE001 - best effort
        answer = None
    count = answer.get("count") if isinstance(answer, dict) else None
    if not isinstance(count, int):
        _no_tokenizer.put(base, True)
        return None
    return count
