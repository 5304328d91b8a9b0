"""What an upstream can tell about tokens: its context window (vLLM and SGLang report
`max_model_len` in /v1/models) and exact counts: vLLM's `POST /tokenize` takes the chat messages
and answers a `count`; llama.cpp's takes text only (`content`; sent messages it answers
`{"tokens": []}`), so there the messages go through its `POST /apply-template` (the model's own
chat template, which may drop what the model never sees, such as tools) and the prompt that
gives through `/tokenize`. All best effort: a short timeout, and an upstream that cannot answer
is remembered for a while, so a request never waits on it twice. A count is remembered by the
digest of what was counted, so asking again about an unchanged context costs no round trip."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from ..domain import Target
from ..protocol import jsonlimits
from ..protocol.chat import build_chat_request
from ..protocol.request import CreateRequest
from ..protocol.tools import Tool
from ..ttlcache import TTLCache
from .chat_completions import chat_options
from .dialects import dialect_of
from .http import get_session, provider_headers, proxy_for

log = logging.getLogger("gateway.upstreams")

REMEMBER_SECONDS = 600.0
_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
_windows: TTLCache[tuple[str, str], int | None] = TTLCache(lambda: REMEMBER_SECONDS)
_no_tokenizer: TTLCache[str, bool] = TTLCache(lambda: REMEMBER_SECONDS)
# base URL -> "vllm" or "llama.cpp": which tokenizer dialect the upstream answered in.
_dialects: TTLCache[str, str] = TTLCache(lambda: REMEMBER_SECONDS)
# (base URL, digest of the tokenizer's body) -> its count.
_counts: TTLCache[tuple[str, str], int] = TTLCache(lambda: REMEMBER_SECONDS)
VLLM, LLAMA_CPP = "vllm", "llama.cpp"


async def _get_json(target: Target, url: str, body: dict[str, Any] | None = None) -> Any:
    session = get_session()
    method = session.post if body is not None else session.get
    kwargs: dict[str, Any] = {
        "headers": provider_headers(target.provider, json_body=body is not None),
        "timeout": _TIMEOUT,
        "proxy": proxy_for(url),
        "allow_redirects": False,
    }
    if body is not None:
        kwargs["data"] = json.dumps(body).encode()
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
    """Exact input tokens of a Chat Completions request, where the upstream tokenizes (vLLM,
    llama.cpp: at the server's root); None where it cannot. Cached by content."""
    base = target.provider.base_url
    if _no_tokenizer.get(base) is not None:
        return None
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    body = {"model": target.upstream_model, "messages": chat_body["messages"], "add_generation_prompt": True}
    if chat_body.get("tools"):
        body["tools"] = chat_body["tools"]
    key = (base, hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest())
    cached = _counts.get(key)
    if cached is not None:
        return cached[0]
    known = _dialects.get(base)
    dialect = known[0] if known is not None else None
    count: int | None = None
    try:
        if dialect != LLAMA_CPP:
            answer = await _get_json(target, f"{root}/tokenize", body)
            count = answer.get("count") if isinstance(answer, dict) else None
            if isinstance(count, int):
                dialect = VLLM
            elif isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
                dialect, count = LLAMA_CPP, None  # text only: the template first
        if dialect == LLAMA_CPP:
            count = await _llama_cpp_count(target, root, body)
    except Exception:  # noqa: BLE001 - best effort
        count = None
    if not isinstance(count, int):
        _no_tokenizer.put(base, True)
        return None
    if dialect is not None:
        _dialects.put(base, dialect)
    return _counts.put(key, count)


async def _llama_cpp_count(target: Target, root: str, body: dict[str, Any]) -> int | None:
    templated = await _get_json(
        target, f"{root}/apply-template", {k: v for k, v in body.items() if k in ("messages", "tools")}
    )
    prompt = templated.get("prompt") if isinstance(templated, dict) else None
    if not isinstance(prompt, str):
        return None
    # add_special: the BOS token the server adds when it reads the prompt itself.
    answer = await _get_json(target, f"{root}/tokenize", {"content": prompt, "add_special": True})
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


def exact_counter(
    target: Target, req: CreateRequest, tools: list[Tool]
) -> Callable[[list[dict[str, Any]]], Awaitable[int | None]] | None:
    """How the engine asks `target` for the exact tokens of a context: its dialect's
    `exact_counter`; None for upstreams that do not tokenize (Responses, Anthropic)."""
    counter = dialect_of(target).exact_counter
    return counter(target, req, tools) if counter is not None else None


def chat_exact_counter(
    target: Target, req: CreateRequest, tools: list[Tool]
) -> Callable[[list[dict[str, Any]]], Awaitable[int | None]] | None:
    """A Chat Completions upstream's counter: the context as the Chat Completions request it
    would be sent, counted by the server's tokenizer."""
    options = chat_options(target.provider.options)

    async def count(items: list[dict[str, Any]]) -> int | None:
        chat = build_chat_request(
            req, items, upstream_model=target.upstream_model, stream=False, tools=tools, options=options
        )
        return await count_tokens(target, chat)

    return count
