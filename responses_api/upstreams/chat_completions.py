"""OpenAI-compatible Chat Completions upstreams (OpenAI, vLLM, Ollama, llama.cpp, ...)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from ..domain import Target
from ..protocol import jsonlimits
from ..protocol.batches import flatten
from ..protocol.chat import (
    ChatOptions,
    ChunkDecoder,
    applied_fields,
    build_chat_request,
    completion_to_deltas,
    reasoning_text,
)
from ..protocol.deltas import Delta
from ..protocol.errors import (
    GatewayError,
    InvalidRequest,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ..protocol.request import CreateRequest
from ..protocol.wirejson import dumpb
from .base import UpstreamRequest
from .http import get_session, provider_headers, proxy_for

log = logging.getLogger("gateway.upstreams")


def chat_options(options: dict[str, Any]) -> ChatOptions:
    known = {k: v for k, v in options.items() if k in ChatOptions.__dataclass_fields__}
    return ChatOptions(**known)


def chat_applied_fields(target: Target, req: CreateRequest) -> frozenset[str]:
    return applied_fields(req, chat_options(target.provider.options))


def chat_withheld_reasoning(target: Target, request: UpstreamRequest) -> list[str]:
    """All reasoning items, unless the provider takes reasoning back (`send_reasoning`), and
    then those with no text."""
    send_back = chat_options(target.provider.options).send_reasoning
    return [
        item["id"]
        for item in request.items
        if item.get("type") == "reasoning" and item.get("id") and not (send_back and reasoning_text(item))
    ]


def _upstream_message(response: aiohttp.ClientResponse, body: bytes) -> str:
    try:
        data = jsonlimits.loads(body, max_depth=None)
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    except ValueError:
        pass
    return body[:300].decode("utf-8", "replace") or response.reason or ""


def error_for_status(target: Target, response: aiohttp.ClientResponse, body: bytes) -> GatewayError:
    status = response.status
    detail = _upstream_message(response, body)
    if status == 400 or status == 422:
        # The request itself was refused (context too long, unsupported value): the client's to fix.
        return InvalidRequest(f"The upstream model rejected the request: {detail}", code="upstream_bad_request")
    if status == 429:
        headers = {"Retry-After": response.headers["retry-after"]} if "retry-after" in response.headers else {}
        return RateLimited(f"The upstream is rate limiting: {detail}", headers=headers)
    if status == 503:
        return UpstreamUnavailable(f"Upstream '{target.label}' is unavailable: {detail}")
    if status == 504:
        return UpstreamTimeout(f"Upstream '{target.label}' timed out: {detail}")
    return UpstreamError(f"Upstream '{target.label}' answered HTTP {status}: {detail}")


# What a failed exchange with an upstream can raise (timeouts are TimeoutError).
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)


def transport_error(target: Target, exc: Exception) -> GatewayError:
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"Upstream '{target.label}' did not answer in time ({type(exc).__name__}).")
    if isinstance(exc, aiohttp.ClientConnectorError):
        errno = getattr(exc.os_error, "errno", None)
        reason = os.strerror(errno) if errno else type(exc.os_error).__name__  # "Connection refused"
        # The client learns which provider and model, not where the operator keeps it: the
        # address goes to the log line and the route health (operator_detail).
        where = f"at {_shown_url(target.provider.base_url)}"
        log.warning("upstream %s: cannot connect %s: %s", target.label, where, reason)
        return UpstreamError(
            f"Cannot connect to provider '{target.provider.name}' (model '{target.upstream_model}'): {reason}.",
            code="upstream_unreachable",
            operator_detail=f"cannot connect {where}: {reason}",
        )
    return UpstreamError(
        f"The connection to upstream '{target.label}' failed: {type(exc).__name__}.",
        code="upstream_connection_error",
    )


def _shown_url(base_url: str) -> str:
    """A provider's base_url as the operator's log and route health show it: without
    user:password, query or fragment."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class StallGuard:
    """Ends a stream whose upstream falls silent: no first chunk by `first_deadline`, or
    `idle` seconds without one after that. One timer per stream, re-armed only when it
    fires (a chunk just notes the time), so relaying a chunk costs no timer work."""

    def __init__(self, response: aiohttp.ClientResponse, first_deadline: float, idle: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._response = response
        self._idle = idle
        self.last_chunk: float | None = None
        self.stalled: str | None = None  # "first_byte" or "idle" once it fired
        self._timer = self._loop.call_at(first_deadline, self._check)

    def chunk(self) -> None:
        now = self._loop.time()
        if self.last_chunk is None:  # the first chunk: from now on the idle limit applies
            self._timer.cancel()
            self._timer = self._loop.call_at(now + self._idle, self._check)
        self.last_chunk = now

    def _check(self) -> None:
        if self.last_chunk is None:
            self.stalled = "first_byte"
        else:
            due = self.last_chunk + self._idle
            if due > self._loop.time():
                self._timer = self._loop.call_at(due, self._check)
                return
            self.stalled = "idle"
        self._response.close()  # the pending read ends; the reader reports the timeout

    def cancel(self) -> None:
        self._timer.cancel()

    def error(self, target: Target) -> UpstreamTimeout:
        provider = target.provider
        if self.stalled == "first_byte":
            return UpstreamTimeout(
                f"Upstream '{target.label}' of provider '{provider.name}' sent nothing within "
                f"{provider.first_byte_timeout:g} s (first_byte_timeout)."
            )
        return UpstreamTimeout(
            f"Upstream '{target.label}' fell silent for {provider.idle_timeout:g} s mid-stream (idle_timeout)."
        )


class ChatCompletionCall:
    def __init__(
        self,
        target: Target,
        response: aiohttp.ClientResponse | None,
        deltas: list[Delta] | None,
        guard: StallGuard | None = None,
    ):
        self._target = target
        self._response = response  # streaming: open response whose body is still to read
        self._ready = deltas  # non-streaming: the whole answer, already decoded
        self._guard = guard

    def deltas(self) -> AsyncIterator[Delta]:
        return flatten(self.delta_batches())

    async def delta_batches(self) -> AsyncGenerator[list[Delta], None]:
        """The deltas of each network read together (a burst of chunks the gateway reads at
        once becomes one batch, and the client gets its events in one write), never empty."""
        if self._ready is not None:
            if self._ready:
                yield self._ready
            return
        assert self._response is not None
        decoder = ChunkDecoder()
        done = False
        guard = self._guard
        lines = DataLines(self._response, guard)
        with reading(self._target, self._response, guard):
            while (payloads := await lines.next()) is not None:
                batch: list[Delta] = []
                failure: Exception | None = None
                for payload in payloads:
                    if payload == b"[DONE]":
                        done = True
                        break
                    chunk = parse_data(payload)
                    if chunk is None:
                        failure = UpstreamError(
                            f"Upstream '{self._target.label}' sent a malformed stream chunk.",
                            code="upstream_malformed",
                        )
                        break
                    try:
                        batch += decoder.feed(chunk)
                    except Exception as exc:  # noqa: BLE001 - raised below, after what came before it
                        failure = exc
                        break
                if batch:
                    yield batch
                if failure is not None:
                    raise failure
                if done:
                    break
            if done:
                if guard is not None:
                    guard.cancel()
                await _drain(self._response)
        if not done and decoder.finish is None:
            raise UpstreamError(
                f"Upstream '{self._target.label}' ended the stream before finishing.",
                code="upstream_truncated",
            )
        closing = list(decoder.close())
        if closing:  # a batch is never empty
            yield closing

    async def aclose(self) -> None:
        if self._response is not None:
            self._response.close()  # mid-stream: drop the connection, the upstream stops generating


@contextlib.contextmanager
def reading(target: Target, response: aiohttp.ClientResponse, guard: StallGuard | None) -> Iterator[None]:
    """Around the reading of an upstream stream, whatever its dialect: a transport failure or a
    stall becomes the gateway's error, and the response goes back to the pool (or is closed)."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        if guard is not None and guard.stalled:
            raise guard.error(target) from None
        raise transport_error(target, exc) from exc
    finally:
        if guard is not None:
            guard.cancel()
        response.release()
    if guard is not None and guard.stalled:  # the stall closed the body: it read as a clean end
        raise guard.error(target)


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read what follows `[DONE]` (normally only the end of the chunked body), so that the
    connection goes back to the pool instead of being closed: a TLS upstream would otherwise
    pay a new handshake per stream. A server that lingers after `[DONE]` is not waited for."""
    try:
        async with asyncio.timeout(0.2):
            while await response.content.readany():
                pass
    except (TimeoutError, *TRANSPORT_ERRORS):
        response.close()


class DataLines:
    """The values of an SSE body's `data:` lines, stripped, a list per read from the network
    that holds any (a relayed token costs one read, not a step per line). Comments, `event:`
    names and blank lines are left out: every dialect's data repeats what they say.

    `await lines.next()` is one coroutine step per read where it was two async generators
    stacked (a read, then a split): each async generator level costs every relayed token a
    step of its own (bench/README.md, performance round 5b)."""

    __slots__ = ("_content", "_guard", "_pending", "_failure", "_ended")

    def __init__(self, response: aiohttp.ClientResponse, guard: StallGuard | None = None) -> None:
        self._content = response.content
        self._guard = guard
        self._pending = b""
        self._failure: BaseException | None = None
        self._ended = False

    async def next(self) -> list[bytes] | None:
        """The data values of the next read(s) holding at least one; None at the end of the body."""
        content = self._content
        while True:
            if self._failure is not None:
                raise self._failure
            if self._ended:
                return None
            try:
                chunk = await content.readany()
            except TRANSPORT_ERRORS as exc:
                # aiohttp raises a lost connection before handing out the bytes that came with
                # it; they are the upstream's last words (a partial answer is kept): them first.
                chunk = _held_back(content)
                if not chunk:
                    raise
                self._failure = exc
            if not chunk:
                self._ended = True
                pending, self._pending = self._pending, b""
                return [pending[5:].strip()] if pending.startswith(b"data:") else None
            if self._guard is not None:
                self._guard.chunk()
            pending = self._pending
            lines = (pending + chunk).split(b"\n") if pending else chunk.split(b"\n")
            self._pending = lines.pop()
            payloads = [line[5:].strip() for line in lines if line.startswith(b"data:")]
            if payloads:
                return payloads


def _held_back(content: aiohttp.StreamReader) -> bytes:
    buffered = getattr(content, "_buffer", None)
    if not buffered:
        return b""
    rest = b"".join(buffered)
    buffered.clear()
    return rest


def parse_data(payload: bytes) -> Any:
    """A `data:` line's JSON, or None when it is not JSON. Bytes that are not UTF-8 become
    U+FFFD, as a text decoder would have made them."""
    try:
        return jsonlimits.loads(payload, max_depth=None)
    except UnicodeDecodeError:
        try:
            return jsonlimits.loads(payload.decode("utf-8", "replace"), max_depth=None)
        except ValueError:
            return None
    except ValueError:
        return None


async def open_chat_completion(target: Target, request: UpstreamRequest) -> ChatCompletionCall:
    provider = target.provider
    body = build_chat_request(
        request.request,
        request.items,
        upstream_model=target.upstream_model,
        stream=request.stream,
        tools=request.tools,
        options=chat_options(provider.options),
        prefix=request.prefix,
        scope=target.label,
    )
    headers = provider_headers(provider)
    opened = await post_json(target, f"{provider.base_url}/chat/completions", body, headers, stream=request.stream)
    if isinstance(opened, Opened):
        return ChatCompletionCall(target, opened.response, None, opened.guard)
    return ChatCompletionCall(target, None, completion_to_deltas(opened))


@dataclass(slots=True)
class Opened:
    """A streamed answer whose headers came (status 200); its body is still to read."""

    response: aiohttp.ClientResponse
    guard: StallGuard


async def post_json(
    target: Target, url: str, body: dict[str, Any], headers: dict[str, str], *, stream: bool
) -> Opened | Any:
    """POST the body; for a stream the open response, otherwise the decoded JSON answer. Every
    failure before that is a GatewayError (HTTP status, transport, first-byte timeout, not JSON).

    Streamed: the response headers and then the first chunk within first_byte_timeout, then
    chunks at most idle_timeout apart (StallGuard). Not streamed: the whole answer within
    `timeout`. aiohttp's per-read limit only backs these up. Shared by every adapter."""
    provider = target.provider
    wait = max(provider.first_byte_timeout, provider.idle_timeout) if stream else provider.timeout
    first_byte = provider.first_byte_timeout if stream else provider.timeout
    # A stream's reads are timed by its StallGuard alone: aiohttp's per-read limit would
    # re-arm a timer for every chunk (bench: a relayed token's CPU). A whole answer is timed by
    # the deadline below, which no single read can outlast either.
    timeout = aiohttp.ClientTimeout(
        total=None, connect=first_byte, sock_connect=provider.connect_timeout, sock_read=None
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + first_byte
    try:
        async with asyncio.timeout_at(deadline):
            response = await _post(get_session(), url, dumpb(body), headers, timeout, proxy_for(url))
    except TimeoutError:
        raise _first_byte_timeout(target, first_byte, stream) from None
    except TRANSPORT_ERRORS as exc:
        raise transport_error(target, exc) from exc
    try:
        if response.status != 200:
            async with asyncio.timeout(wait):
                error_body = await response.read()
            raise error_for_status(target, response, error_body)
        if stream:
            return Opened(response, StallGuard(response, deadline, provider.idle_timeout))
        async with asyncio.timeout_at(deadline):
            raw = await response.read()
    except TimeoutError:
        response.close()
        raise _first_byte_timeout(target, first_byte, stream) from None
    except TRANSPORT_ERRORS as exc:
        response.close()
        raise transport_error(target, exc) from exc
    except BaseException:
        response.close()
        raise
    response.release()
    try:
        return jsonlimits.loads(raw, max_depth=None)
    except ValueError:
        raise UpstreamError(
            f"Upstream '{target.label}' answered with something that is not JSON.", code="upstream_malformed"
        ) from None


def _first_byte_timeout(target: Target, seconds: float, stream: bool) -> UpstreamTimeout:
    limit = "first_byte_timeout" if stream else "timeout"
    # The provider's name and the setting: what an operator raises (admin or config file) when a
    # slow model, such as the bundled one on a busy machine, needs longer.
    return UpstreamTimeout(
        f"Upstream '{target.label}' of provider '{target.provider.name}' did not answer within {seconds:g} s ({limit})."
    )


async def _post(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
    proxy: str | None,
) -> aiohttp.ClientResponse:
    try:
        return await session.post(
            url, data=payload, headers=headers, timeout=timeout, proxy=proxy, allow_redirects=False
        )
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise  # not a pooled connection: no new connection to try
        # A pooled keep-alive connection the server had already closed or reset
        # (llama.cpp's server closes after a stream; uvicorn-based servers such as
        # vLLM after 5 s idle): it never saw the request, so sending it once more
        # on a fresh connection is safe.
        return await session.post(
            url, data=payload, headers=headers, timeout=timeout, proxy=proxy, allow_redirects=False
        )
