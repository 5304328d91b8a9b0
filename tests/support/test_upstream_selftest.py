"""Self-tests for the scripted upstream server (tests/support/upstream.py).

Plain synchronous pytest + httpx against the real loopback server, no Django:
if these fail, gateway test failures are meaningless.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from responses_api.ops.processes import stop_process
from tests.support.upstream import Reply, ScriptedUpstream

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedUpstream]:
    # One server for the module: starting/stopping uvicorn costs ~0.1-0.2 s.
    with ScriptedUpstream() as upstream:
        yield upstream


@pytest.fixture()
def upstream(server: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    server.reset()
    server.latency = 0.0
    yield server
    server.reset()


@pytest.fixture()
def client(upstream: ScriptedUpstream) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=upstream.base_url, timeout=5.0) as c:
        yield c


def chat(model: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def sse_payloads(response: httpx.Response) -> list[str]:
    """Raw `data:` payloads of an SSE response, in order."""
    return [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]


def stream_chat(client: httpx.Client, body: dict[str, Any]) -> tuple[httpx.Response, list[str]]:
    with client.stream("POST", "/chat/completions", json={**body, "stream": True}) as response:
        return response, sse_payloads(response)


def json_chunks(payloads: list[str]) -> list[dict[str, Any]]:
    return [json.loads(p) for p in payloads if p != "[DONE]"]


def deltas(payloads: list[str]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in json_chunks(payloads) if c["choices"]]


def test_non_streaming_text(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="Hello there world"))
    r = client.post("/chat/completions", json=chat("m", "x" * 40))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "m"
    assert isinstance(body["created"], int)
    choice = body["choices"][0]
    assert choice == {
        "index": 0,
        "message": {"role": "assistant", "content": "Hello there world"},
        "finish_reason": "stop",
    }
    assert body["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_streaming_text_reassembles(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    upstream.enqueue("m", Reply(text=text, chunk_chars=5))
    response, payloads = stream_chat(client, chat("m"))
    assert response.headers["content-type"] == "text/event-stream"
    assert payloads[-1] == "[DONE]"
    chunks = json_chunks(payloads)
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert "usage" not in chunks[0]  # only with include_usage
    content = [d["content"] for d in deltas(payloads)[1:] if "content" in d]
    assert "".join(content) == text
    assert max(len(p) for p in content) == 5 and len(content) == 9


def test_reasoning_then_text(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(reasoning="think hard now", text="answer", chunk_chars=3))
    upstream.enqueue("m", Reply(reasoning="r", reasoning_field="reasoning", text="t"))
    upstream.enqueue("m", Reply(reasoning="a b c", text="d"))
    _, payloads = stream_chat(client, chat("m"))
    kinds = [next(iter(d)) for d in deltas(payloads)[1:-1]]
    assert kinds == ["reasoning_content"] * 5 + ["content"] * 2  # reasoning strictly first
    ds = deltas(payloads)
    assert "".join(d.get("reasoning_content", "") for d in ds) == "think hard now"
    assert "".join(d.get("content", "") for d in ds) == "answer"

    _, payloads = stream_chat(client, chat("m"))
    assert {"reasoning": "r"} in deltas(payloads)

    message = client.post("/chat/completions", json=chat("m")).json()
    assert message["choices"][0]["message"]["reasoning_content"] == "a b c"
    assert message["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3
    assert message["usage"]["completion_tokens"] == 4


def test_tool_calls_interleaved(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    calls: list[dict[str, Any]] = [
        {"id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris","unit":"c"}'},
        {"id": "call_b", "name": "get_time", "arguments": {"tz": "Europe/Paris"}},
    ]
    upstream.enqueue("m", Reply(tool_calls=calls, interleave_tool_calls=True, chunk_chars=4))
    _, payloads = stream_chat(client, chat("m"))
    tool_deltas = [d["tool_calls"][0] for d in deltas(payloads) if "tool_calls" in d]
    indices = [t["index"] for t in tool_deltas]
    # Alternates while both calls still have fragments.
    assert indices[:8] == [0, 1] * 4
    assembled: dict[int, dict[str, Any]] = {}
    for t in tool_deltas:
        if "id" in t:
            assert t["type"] == "function" and t["function"]["arguments"] == ""
            assembled[t["index"]] = {"id": t["id"], "name": t["function"]["name"], "arguments": ""}
        else:
            assert set(t) == {"index", "function"} and set(t["function"]) == {"arguments"}
            assembled[t["index"]]["arguments"] += t["function"]["arguments"]
    assert assembled[0] == {
        "id": "call_a",
        "name": "get_weather",
        "arguments": '{"city":"Paris","unit":"c"}',
    }
    assert assembled[1]["id"] == "call_b" and json.loads(assembled[1]["arguments"]) == {"tz": "Europe/Paris"}
    assert json_chunks(payloads)[-1]["choices"][0]["finish_reason"] == "tool_calls"

    upstream.enqueue("m", Reply(tool_calls=calls))
    message = client.post("/chat/completions", json=chat("m")).json()["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    assert message["message"]["content"] is None
    assert message["message"]["tool_calls"][0] == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"c"}'},
    }


def test_usage_chunk_with_include_usage(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.set_default("m", Reply(text="one two three"))
    _, payloads = stream_chat(client, chat("m", stream_options={"include_usage": True}))
    assert payloads[-1] == "[DONE]"
    chunks = json_chunks(payloads)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(c["usage"] is None for c in chunks[:-1])

    _, payloads = stream_chat(client, chat("m"))
    assert all(c["choices"] for c in json_chunks(payloads))

    upstream.enqueue("m", Reply(text="x", include_usage_chunk=True, usage={"prompt_tokens": 7}))
    _, payloads = stream_chat(client, chat("m"))
    assert json_chunks(payloads)[-1]["usage"] == {"prompt_tokens": 7}


def test_error_status(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    custom = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    upstream.enqueue("m", Reply(status=429, error_body=custom), Reply(status=500))
    r = client.post("/chat/completions", json=chat("m", stream=True))
    assert r.status_code == 429 and r.json() == custom
    r = client.post("/chat/completions", json=chat("m"))
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "scripted failure"
    assert r.json()["error"]["type"] == "server_error"


def test_unscripted_model_is_404(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    r = client.post("/chat/completions", json=chat("nope"))
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "model nope not scripted"


def test_delay_and_latency(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="late", delay=0.3))
    start = time.monotonic()
    assert client.post("/chat/completions", json=chat("m")).json()["choices"][0]["message"]["content"] == "late"
    assert time.monotonic() - start >= 0.3

    upstream.latency = 0.2
    start = time.monotonic()
    client.post("/chat/completions", json=chat("echo"))
    assert time.monotonic() - start >= 0.2


def test_interval_paces_chunks(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="abcdef", chunk_chars=2, interval=0.05))
    start = time.monotonic()
    stream_chat(client, chat("m"))
    # role, 3 content chunks, finish: 4 gaps.
    assert time.monotonic() - start >= 0.2


def test_disconnect_after_is_protocol_error(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="a" * 40, chunk_chars=4, disconnect_after=3))
    received: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", "/chat/completions", json=chat("m", stream=True)) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                received.append(line)
    assert len(received) == 3
    assert not any("[DONE]" in line for line in received)

    # Past the last chunk it still dies before [DONE] / end of the chunked body.
    upstream.enqueue("m", Reply(text="ab", disconnect_after=100))
    with pytest.raises(httpx.RemoteProtocolError):
        stream_chat(client, chat("m"))
    # The server stays healthy afterwards.
    assert client.post("/chat/completions", json=chat("echo")).status_code == 200


def test_malformed_chunk(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="abcdefgh", chunk_chars=4, malformed_after=2))
    _, payloads = stream_chat(client, chat("m"))
    assert payloads[2] == "{not json"
    assert payloads[-1] == "[DONE]"
    good = [p for p in payloads if p != "{not json"]
    assert "".join(d.get("content", "") for d in deltas(good)) == "abcdefgh"


def test_raw_chunks_and_raw_body(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue(
        "m",
        Reply(raw_chunks=[{"custom": 1}, "verbatim text"]),
        Reply(raw_chunks=["x"], raw_done=False),
        Reply(raw_body="<html>garbage"),
        Reply(raw_body={"weird": True}),
    )
    assert stream_chat(client, chat("m"))[1] == ['{"custom":1}', "verbatim text", "[DONE]"]
    assert stream_chat(client, chat("m"))[1] == ["x"]
    assert client.post("/chat/completions", json=chat("m")).text == "<html>garbage"
    assert client.post("/chat/completions", json=chat("m")).json() == {"weird": True}


def test_client_abort_detected(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="x" * 200, chunk_chars=1, interval=0.02))
    client.post("/chat/completions", json=chat("echo"))  # request index 0
    with client.stream("POST", "/chat/completions", json=chat("m", stream=True)) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        assert upstream.active_streams == 1
        before = time.monotonic()
    assert upstream.wait_aborted(1, timeout=2)
    ((when, index),) = upstream.aborted
    assert index == 1 and when >= before
    deadline = time.monotonic() + 2
    while upstream.active_streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.active_streams == 0
    assert not upstream.wait_aborted(2, timeout=0.05)


def test_client_abort_during_delay(upstream: ScriptedUpstream) -> None:
    upstream.enqueue("m", Reply(text="never", delay=2.0))
    with (
        httpx.Client(base_url=upstream.base_url, timeout=0.2) as short,
        pytest.raises(httpx.ReadTimeout),
    ):
        short.post("/chat/completions", json=chat("m", stream=True))
    assert upstream.wait_aborted(1, timeout=2)


def test_fifo_then_default(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="first"), Reply(text="second"))
    upstream.enqueue("m", Reply(text="third"))
    upstream.set_default("m", Reply(text="default"))
    upstream.enqueue("other", Reply(text="other"))

    def ask(model: str) -> str:
        body = client.post("/chat/completions", json=chat(model)).json()
        return str(body["choices"][0]["message"]["content"])

    assert [ask("m") for _ in range(5)] == ["first", "second", "third", "default", "default"]
    assert ask("other") == "other"
    assert client.post("/chat/completions", json=chat("other")).status_code == 404


def test_echo(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    messages = [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "older"},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hello "},
                {"type": "text", "text": "there"},
            ],
        },
    ]
    r = client.post("/chat/completions", json={"model": "echo", "messages": messages})
    assert r.json()["choices"][0]["message"]["content"] == "echo: hello there"
    _, payloads = stream_chat(client, {"model": "echo", "messages": messages})
    assert "".join(d.get("content", "") for d in deltas(payloads)) == "echo: hello there"


def test_records_requests(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("m", Reply(text="ok"))
    body = chat("m", temperature=0.5)
    client.post("/chat/completions", json=body, headers={"Authorization": "Bearer sk-test", "X-Trace": "1"})
    client.get("/models")
    first, second = upstream.requests
    assert first.path == "/v1/chat/completions" and first.method == "POST"
    assert first.body == body
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.headers["x-trace"] == "1"
    assert all(k == k.lower() for k in first.headers)
    assert second.path == "/v1/models" and second.method == "GET" and second.body == {}

    upstream.reset()
    assert upstream.requests == [] and upstream.aborted == []
    assert client.post("/chat/completions", json=chat("m")).status_code == 404  # scripts gone too


def test_models_and_unknown_routes(upstream: ScriptedUpstream, client: httpx.Client) -> None:
    upstream.enqueue("alpha", Reply(text="a"))
    upstream.set_default("beta", Reply(text="b"))
    r = client.get("/models")
    assert r.status_code == 200 and r.json()["object"] == "list"
    assert {m["id"] for m in r.json()["data"]} == {"alpha", "beta", "echo"}
    assert all(m["object"] == "model" for m in r.json()["data"])

    for method, path in [
        ("GET", "/responses"),
        ("POST", "/audio/speech"),
        ("GET", "/chat/completions"),
        ("GET", "/embeddings"),
    ]:
        r = client.request(method, path)
        assert r.status_code == 404 and "error" in r.json()
    # Embeddings: deterministic vectors, a token per word.
    r = client.post("/embeddings", json={"model": "alpha", "input": ["two words", "three more words"]})
    assert r.status_code == 200 and [len(d["embedding"]) for d in r.json()["data"]] == [4, 4]
    assert r.json()["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    r = client.post("/chat/completions", content=b"{broken")
    assert r.status_code == 400


def test_lifecycle_and_default_echo() -> None:
    upstream = ScriptedUpstream(default_echo=True)
    with pytest.raises(RuntimeError):
        _ = upstream.base_url
    with upstream:
        assert upstream.base_url == f"http://127.0.0.1:{upstream.port}/v1"
        r = httpx.post(upstream.base_url + "/chat/completions", json=chat("anything", "yo"))
        assert r.json()["choices"][0]["message"]["content"] == "echo: yo"
    with pytest.raises(httpx.ConnectError):
        httpx.post(upstream.base_url + "/chat/completions", json=chat("anything"), timeout=1)
    upstream.stop()  # idempotent


def test_stop_with_stream_in_flight() -> None:
    # stop() must not hang on a stream that would run for a long time.
    upstream = ScriptedUpstream().start()
    upstream.enqueue("m", Reply(text="x" * 1000, chunk_chars=1, interval=0.05))
    with (
        httpx.Client(base_url=upstream.base_url, timeout=5) as c,
        c.stream("POST", "/chat/completions", json=chat("m", stream=True)) as response,
    ):
        next(response.iter_lines())
        start = time.monotonic()
        upstream.stop()
        # Well short of the 50 s the stream would run (a bound on the behaviour; 2 s was a guess
        # at the machine's speed).
        assert time.monotonic() - start < 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_serves_echo_for_any_model() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.upstream", "--port", str(port), "--latency", "0.01"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json=chat("gpt-whatever", "ping"),
                )
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        assert r.json()["choices"][0]["message"]["content"] == "echo: ping"
    finally:
        stop_process(proc, timeout=5)
