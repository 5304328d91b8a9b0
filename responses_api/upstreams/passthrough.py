"""`/v1/chat/completions` and `/v1/embeddings` passed through to Chat Completions upstreams:
the body as the client sent it (with the route's upstream model), the answer as the upstream
sent it, streamed chunk by chunk; the gateway adds keys, routing, allowlists, fallback before
the first byte, timeouts and usage accounting."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..domain import Target
from ..protocol.errors import GatewayError, InvalidRequest, UpstreamTimeout
from .chat_completions import TRANSPORT_ERRORS, _upstream_message, error_for_status, transport_error
from .http import get_session, provider_headers, proxy_for


@dataclass(slots=True)
class Forwarded:
    target: Target
    response: aiohttp.ClientResponse


async def forward(
    target: Target, path: str, body: dict[str, Any], *, stream: bool, headers: dict[str, str] | None = None
) -> Forwarded:
    """Send the body to the target; the open response (status 200), or a GatewayError.
    `headers`: the dialect's own (Anthropic's key header and version), else OpenAI's bearer key."""
    provider = target.provider
    headers = provider_headers(provider) if headers is None else headers
    first_byte = provider.first_byte_timeout if stream else provider.timeout
    limit = "first_byte_timeout" if stream else "timeout"
    timeout = aiohttp.ClientTimeout(
        total=None,
        sock_connect=provider.connect_timeout,
        sock_read=max(first_byte, provider.idle_timeout) if stream else first_byte,
    )
    url = f"{provider.base_url}{path}"
    try:
        async with asyncio.timeout(first_byte):
            response = await get_session().post(
                url,
                data=json.dumps({**body, "model": target.upstream_model}).encode(),
                headers=headers,
                timeout=timeout,
                proxy=proxy_for(url),
                allow_redirects=False,
            )
    except TimeoutError:
        raise UpstreamTimeout(
            f"Upstream '{target.label}' of provider '{target.provider.name}' did not answer within {first_byte:g} s "
            f"({limit})."
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise transport_error(target, exc) from exc
    if response.status == 501:
        # Not Implemented: the upstream lacks the endpoint (llama.cpp's server answers embeddings
        # this way unless started with --embeddings, which then refuses completions). The
        # client's request cannot be served by this model: a 400, not an outage.
        try:
            detail = _upstream_message(response, await response.read())
        finally:
            response.release()
        raise InvalidRequest(
            f"Upstream '{target.label}' does not serve {path}: {detail}", param="model", code="model_not_supported"
        )
    if response.status != 200:
        try:
            raise error_for_status(target, response, await response.read())
        finally:
            response.release()
    return Forwarded(target, response)


async def body_chunks(forwarded: Forwarded, usage: dict[str, Any]) -> AsyncIterator[bytes]:
    """The streamed answer as it arrives; `usage` gets the last usage object seen in it."""
    response = forwarded.response
    pending = b""
    try:
        async for chunk in response.content.iter_any():
            yield chunk
            pending = _scan_usage(pending + chunk, usage)
    except TRANSPORT_ERRORS:
        return  # the upstream went away mid-stream: the client sees the stream end, as from the upstream
    finally:
        response.release()


def _scan_usage(data: bytes, usage: dict[str, Any]) -> bytes:
    """Read complete `data:` lines for a usage object; return the incomplete tail."""
    *lines, tail = data.split(b"\n")
    for line in lines:
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                found = json.loads(line[5:]).get("usage")
            except ValueError:
                continue
            if isinstance(found, dict):
                usage.clear()
                usage.update(found)
    return tail[-65536:]


def usage_tokens(usage: dict[str, Any] | None) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return (prompt if isinstance(prompt, int) else None, completion if isinstance(completion, int) else None)


__all__ = ["Forwarded", "forward", "body_chunks", "usage_tokens", "GatewayError"]
