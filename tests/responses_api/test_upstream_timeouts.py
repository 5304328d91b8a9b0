"""Per-provider upstream timeouts: connect, first byte, silence between chunks."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from responses_api.protocol.errors import UpstreamTimeout
from responses_api.upstreams import open_call
from tests.responses_api.test_upstream_client import _read_request, _upstream
from tests.support.harness import MODEL, Gateway, make_route
from tests.support.stream_validator import parse_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(text: str) -> bytes:
    payload = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    event = f"data: {json.dumps(payload)}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(event), event)


def done() -> bytes:
    stop = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    events = f"data: {json.dumps(stop)}\n\ndata: [DONE]\n\n".encode()
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)


def hanging(before_hang: list[bytes], gaps: float = 0.0):
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        for part in before_hang:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(gaps)
        await asyncio.sleep(30)  # hung: the socket stays open, nothing more comes
        writer.close()

    return serve


async def test_no_response_headers_within_first_byte_timeout() -> None:
    async with _upstream(hanging([]), stream=True, first_byte_timeout=0.3, idle_timeout=5) as (target, request):
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as info:
            await open_call(target, request)
    # Under the 5 s idle limit (the one that would end it otherwise), whatever the machine's load.
    assert time.monotonic() - started < 4.5
    assert "first_byte_timeout" in info.value.message and info.value.status == 504
    assert info.value.code == "upstream_timeout" and "provider 'p'" in info.value.message


async def test_headers_but_no_first_chunk_within_first_byte_timeout() -> None:
    async with _upstream(hanging([SSE_HEAD]), stream=True, first_byte_timeout=0.4, idle_timeout=5) as (target, request):
        started = time.monotonic()
        call = await open_call(target, request)
        with pytest.raises(UpstreamTimeout) as info:
            [d async for d in call.deltas()]
    assert 0.3 < time.monotonic() - started < 4.5  # under the 5 s idle limit
    assert "first_byte_timeout" in info.value.message and "provider 'p'" in info.value.message


async def test_silence_mid_stream_ends_at_idle_timeout_after_the_partial_answer() -> None:
    parts = [SSE_HEAD, chunk("Hel"), chunk("lo")]
    async with _upstream(hanging(parts), stream=True, first_byte_timeout=5, idle_timeout=0.4) as (target, request):
        call = await open_call(target, request)
        got = []
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as info:
            async for delta in call.deltas():
                got.append(delta)
    assert 0.3 < time.monotonic() - started < 4.5  # not the 5 s first-byte limit
    assert "idle_timeout" in info.value.message
    assert "Hello" in "".join(getattr(d, "text", "") or "" for d in got)


async def test_a_slow_but_steady_stream_is_not_cut() -> None:
    # 12 chunks 0.1 s apart: 1.2 s in all, longer than both limits, never silent for 0.35 s.
    parts = [SSE_HEAD, *(chunk(str(i)) for i in range(12)), done()]
    async with _upstream(hanging(parts, gaps=0.1), stream=True, first_byte_timeout=0.35, idle_timeout=0.35) as (
        target,
        request,
    ):
        call = await open_call(target, request)
        deltas = [d async for d in call.deltas()]
    assert "".join(getattr(d, "text", "") or "" for d in deltas) == "01234567891011"


async def test_a_non_streamed_answer_has_the_whole_timeout() -> None:
    async with _upstream(hanging([]), stream=False, timeout=0.3, first_byte_timeout=5) as (target, request):
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as info:
            await open_call(target, request)
    assert time.monotonic() - started < 4.5 and "(timeout)" in info.value.message  # not the 5 s first-byte limit


async def test_connect_timeout_bounds_an_unanswered_connect() -> None:
    # 10.255.255.1 is unroutable on this machine: the SYN goes nowhere. (If the sandbox
    # answers it with an immediate refusal instead, that is an upstream_unreachable, also fast.)
    from responses_api.domain import ProviderConfig, Target
    from responses_api.protocol.errors import UpstreamError
    from responses_api.protocol.request import parse_create_request
    from responses_api.upstreams import UpstreamRequest
    from responses_api.upstreams.http import close_session

    target = Target(
        ProviderConfig(
            name="p",
            kind="chat_completions",
            base_url="http://10.255.255.1:9/v1",
            api_key=None,
            timeout=30,
            connect_timeout=0.3,
        ),
        "m",
        1,
    )
    request = UpstreamRequest(
        request=parse_create_request({"model": "m", "input": "hi", "stream": True}), items=[], tools=[], stream=True
    )
    started = time.monotonic()
    try:
        with pytest.raises(UpstreamError):
            await open_call(target, request)
    finally:
        await close_session()
    assert time.monotonic() - started < 15  # the connect limit, not the 30 s timeout


# -- through the gateway: 504 before the first byte, error + response.failed after ----------
@pytest.fixture
def impatient_route(gateway: Gateway, scripted: ScriptedUpstream) -> str:
    make_route(
        scripted.base_url,
        name="impatient",
        upstream_model=MODEL,
        provider_name="impatient",
        first_byte_timeout=0.5,
        idle_timeout=0.5,
        timeout=0.5,
    )
    return "impatient"


def test_a_hung_upstream_is_a_504_before_the_first_byte(
    gateway: Gateway, scripted: ScriptedUpstream, impatient_route: str
) -> None:
    from responses_api.models import Response

    for stream in (False, True):
        scripted.enqueue(MODEL, Reply(text="late", delay=10))
        started = time.monotonic()
        resp = gateway.http().post("/v1/responses", json={"model": impatient_route, "input": "hi", "stream": stream})
        assert time.monotonic() - started < 8  # the 0.5 s limit, not the 10 s answer
        assert resp.status_code == 504, resp.text
        assert resp.json()["error"]["code"] == "upstream_timeout"
    assert not Response.objects.filter(status__in=("queued", "in_progress")).exists()


def test_an_upstream_that_stalls_mid_stream_ends_failed(
    gateway: Gateway, scripted: ScriptedUpstream, impatient_route: str
) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="one two three four", chunk_chars=4, interval=2.0))
    started = time.monotonic()
    with gateway.http().stream(
        "POST", "/v1/responses", json={"model": impatient_route, "input": "hi", "stream": True}
    ) as resp:
        events = parse_sse(resp.iter_bytes())
    assert time.monotonic() - started < 7  # the 0.5 s idle limit, not the ~10 s of the whole answer
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "upstream_timeout"
    final = events[-1]["response"]
    assert final["error"]["code"] == "upstream_timeout"
    assert Response.objects.get(id=final["id"]).status == "failed"
