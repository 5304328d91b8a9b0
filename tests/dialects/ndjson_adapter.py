"""The test-only "ndjson" dialect's adapter: opens a call on the wire format of
ndjson_protocol.py with the shared upstream plumbing (headers, POST, timeouts, stall guard,
transport errors) and reads its lines as neutral deltas."""

from __future__ import annotations

from collections.abc import AsyncIterator

from responses_api.domain import Target
from responses_api.protocol import jsonlimits
from responses_api.protocol.deltas import Delta, UpstreamFailed
from responses_api.protocol.errors import UpstreamError
from responses_api.upstreams.base import UpstreamRequest
from responses_api.upstreams.chat_completions import Opened, post_json, reading
from responses_api.upstreams.events import failed
from responses_api.upstreams.http import provider_headers

from .ndjson_protocol import LineDecoder, build_request


class NdjsonCall:
    def __init__(self, target: Target, opened: Opened) -> None:
        self._target = target
        self._response = opened.response
        self._guard = opened.guard

    async def deltas(self) -> AsyncIterator[Delta]:
        decoder = LineDecoder()
        pending = b""
        with reading(self._target, self._response, self._guard):
            while not decoder.finished and (chunk := await self._response.content.readany()):
                self._guard.chunk()
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        event = jsonlimits.loads(line, max_depth=None)
                    except ValueError:
                        raise UpstreamError(
                            f"Upstream '{self._target.label}' sent a malformed line.", code="upstream_malformed"
                        ) from None
                    try:
                        for delta in decoder.feed(event):
                            yield delta
                    except UpstreamFailed as failure:
                        raise failed(self._target, failure) from None
        if not decoder.finished:
            raise UpstreamError(
                f"Upstream '{self._target.label}' ended the stream before finishing.", code="upstream_truncated"
            )

    async def aclose(self) -> None:
        self._response.close()


async def open_ndjson(target: Target, request: UpstreamRequest) -> NdjsonCall:
    provider = target.provider
    body = build_request(request.request, request.items, model=target.upstream_model, tools=request.tools)
    # The wire is always a stream of lines; a call the client does not stream reads it whole.
    opened = await post_json(target, f"{provider.base_url}/generate", body, provider_headers(provider), stream=True)
    return NdjsonCall(target, opened)
