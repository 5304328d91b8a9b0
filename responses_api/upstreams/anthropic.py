"""Provider kind `anthropic`: Anthropic's Messages API (`POST {base_url}/messages`, e.g.
https://api.anthropic.com/v1). The request and the reading of its events are in
protocol/anthropic.py; the HTTP, timeouts and error mapping are the Chat Completions
adapter's. The key goes in `x-api-key`, the API version in `anthropic-version` (the
provider's `anthropic_version` option, default protocol.anthropic.API_VERSION)."""
from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

import aiohttp

from ..protocol import jsonlimits
from ..protocol.deltas import Delta
from ..protocol.errors import UpstreamError
from ..protocol.anthropic import API_VERSION, EventDecoder, UpstreamFailed, build_messages_request, message_to_deltas
from ..routing import Target
from .base import UpstreamRequest
from .chat_completions import (
    TRANSPORT_ERRORS, StallGuard, _drain, _first_byte_timeout, _lines, _post, error_for_status, transport_error,
)
from .http import get_session, proxy_for


class MessagesCall:
    def __init__(self, target: Target, response: aiohttp.ClientResponse | None, deltas: list[Delta] | None,
                 guard: StallGuard | None = None) -> None:
        self._target = target
        self._response = response
        self._ready = deltas
        self._guard = guard

    def _failed(self, failure: UpstreamFailed) -> UpstreamError:
        return UpstreamError(f"Upstream '{self._target.label}' failed ({failure.kind}): {failure.message}",
                             code="upstream_error")

    async def deltas(self) -> AsyncIterator[Delta]:
        if self._ready is not None:
            for delta in self._ready:
                yield delta
            return
        assert self._response is not None
        decoder = EventDecoder()
        guard = self._guard
        try:
            async for line in _lines(self._response, guard):
                if not line.startswith("data:"):
                    continue  # `event:` names (the data repeats them), comments, blank lines
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    event = jsonlimits.loads(payload, max_depth=None)
                except ValueError:
                    raise UpstreamError(f"Upstream '{self._target.label}' sent a malformed event.",
                                        code="upstream_malformed") from None
                if not isinstance(event, dict):
                    continue
                try:
                    for delta in decoder.feed(event):
                        yield delta
                except UpstreamFailed as failure:
                    raise self._failed(failure) from None
                if decoder.finished:
                    break
            if decoder.finished:
                if guard is not None:
                    guard.cancel()
                await _drain(self._response)
        except TRANSPORT_ERRORS as exc:
            if guard is not None and guard.stalled:
                raise guard.error(self._target) from None
            raise transport_error(self._target, exc) from exc
        finally:
            if guard is not None:
                guard.cancel()
            self._response.release()
        if guard is not None and guard.stalled:
            raise guard.error(self._target)
        if not decoder.finished:
            raise UpstreamError(f"Upstream '{self._target.label}' ended the stream before finishing.",
                                code="upstream_truncated")

    async def aclose(self) -> None:
        if self._response is not None:
            self._response.close()


async def open_messages(target: Target, request: UpstreamRequest) -> MessagesCall:
    provider = target.provider
    body = build_messages_request(request.request, request.items, upstream_model=target.upstream_model,
                                  stream=request.stream, tools=request.tools, options=provider.options)
    headers = {"content-type": "application/json",
               "anthropic-version": str(provider.options.get("anthropic_version") or API_VERSION),
               **provider.headers}
    if provider.api_key:
        headers["x-api-key"] = provider.api_key
    wait = max(provider.first_byte_timeout, provider.idle_timeout) if request.stream else provider.timeout
    first_byte = provider.first_byte_timeout if request.stream else provider.timeout
    timeout = aiohttp.ClientTimeout(total=None, connect=first_byte, sock_connect=provider.connect_timeout,
                                    sock_read=wait)
    url = f"{provider.base_url}/messages"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + first_byte
    try:
        async with asyncio.timeout_at(deadline):
            response = await _post(get_session(), url, json.dumps(body).encode(), headers, timeout, proxy_for(url))
    except TimeoutError:
        raise _first_byte_timeout(target, first_byte, request.stream) from None
    except TRANSPORT_ERRORS as exc:
        raise transport_error(target, exc) from exc
    try:
        if response.status != 200:
            raise error_for_status(target, response, await response.read())
        if request.stream:
            return MessagesCall(target, response, None, StallGuard(response, deadline, provider.idle_timeout))
        async with asyncio.timeout_at(deadline):
            raw = await response.read()
    except TimeoutError:
        response.close()
        raise _first_byte_timeout(target, first_byte, request.stream) from None
    except TRANSPORT_ERRORS as exc:
        response.close()
        raise transport_error(target, exc) from exc
    except BaseException:
        response.close()
        raise
    response.release()
    try:
        data = jsonlimits.loads(raw, max_depth=None)
    except ValueError:
        raise UpstreamError(f"Upstream '{target.label}' answered with something that is not JSON.",
                            code="upstream_malformed") from None
    if not isinstance(data, dict):
        raise UpstreamError(f"Upstream '{target.label}' answered with something that is not a message.",
                            code="upstream_malformed")
    return MessagesCall(target, None, message_to_deltas(data))
