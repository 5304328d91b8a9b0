"""Upstreams whose streams are typed SSE events (native Responses, Anthropic Messages): one call
type, given the dialect's decoder, for the stream's reading, stall and transport errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from ..domain import Target
from ..protocol.deltas import Delta, UpstreamFailed
from ..protocol.errors import UpstreamError
from .chat_completions import DataLines, Opened, StallGuard, _drain, parse_data, reading


class EventStreamCall:
    """`decoder()` makes an object with `feed(event) -> deltas` and `finished`; its `feed` may
    raise UpstreamFailed."""

    def __init__(
        self,
        target: Target,
        decoder: Callable[[], Any],
        *,
        opened: Opened | None = None,
        deltas: list[Delta] | None = None,
    ) -> None:
        self._target = target
        self._decoder = decoder
        self._response: aiohttp.ClientResponse | None = opened.response if opened else None
        self._guard: StallGuard | None = opened.guard if opened else None
        self._ready = deltas

    def failed(self, failure: UpstreamFailed) -> UpstreamError:
        return failed(self._target, failure)

    async def deltas(self) -> AsyncIterator[Delta]:
        if self._ready is not None:
            for delta in self._ready:
                yield delta
            return
        assert self._response is not None
        decoder = self._decoder()
        guard = self._guard
        lines = DataLines(self._response, guard)
        with reading(self._target, self._response, guard):
            while (payloads := await lines.next()) is not None:
                for payload in payloads:
                    if payload == b"[DONE]":
                        break
                    event = parse_data(payload)
                    if event is None:
                        raise UpstreamError(
                            f"Upstream '{self._target.label}' sent a malformed event.", code="upstream_malformed"
                        )
                    if not isinstance(event, dict):
                        continue
                    try:
                        for delta in decoder.feed(event):
                            yield delta
                    except UpstreamFailed as failure:
                        raise self.failed(failure) from None
                    if decoder.finished:
                        break
                else:
                    continue
                break  # [DONE] or the decoder's end
            if decoder.finished:
                if guard is not None:
                    guard.cancel()
                await _drain(self._response)
        if not decoder.finished:
            raise UpstreamError(
                f"Upstream '{self._target.label}' ended the stream before finishing.", code="upstream_truncated"
            )

    async def aclose(self) -> None:
        if self._response is not None:
            self._response.close()


def failed(target: Target, failure: UpstreamFailed) -> UpstreamError:
    return UpstreamError(f"Upstream '{target.label}' failed ({failure.code}): {failure.message}", code="upstream_error")
