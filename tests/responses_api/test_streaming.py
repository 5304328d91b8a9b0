"""POST /v1/responses with stream: true: exact SSE, failures mid-stream, disconnects, keep-alives."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import parse_sse, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "type": "function",
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
]


def stream_raw(gateway: Gateway, body: dict) -> tuple[httpx.Response, bytes]:
    with gateway.http() as http, http.stream("POST", "/v1/responses", json=body | {"stream": True}) as r:
        raw = r.read()
    return r, raw


def stream_and_validate(gateway: Gateway, body: dict) -> dict:
    """Stream through raw HTTP, validate strictly, and check GET returns the terminal response."""
    r, raw = stream_raw(gateway, body)
    assert r.status_code == 200, raw
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
    terminal = validate_sse(raw)
    if body.get("store", True):
        with gateway.http() as http:
            stored = http.get(f"/v1/responses/{terminal['id']}").json()
        validate_sse(raw, final_response=stored)
    return terminal


CASES = {
    "text": Reply(text="The quick brown fox jumps over the lazy dog."),
    "tool_call": Reply(
        tool_calls=[{"id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}], chunk_chars=3
    ),
    "parallel_interleaved": Reply(
        tool_calls=[
            {"id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"id": "call_2", "name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
        ],
        interleave_tool_calls=True,
        chunk_chars=2,
    ),
    "reasoning_and_text": Reply(reasoning="Let me think about it.", text="Forty-two."),
    "reasoning_field": Reply(reasoning="Hmm.", reasoning_field="reasoning", text="Yes."),
    "think_tags": Reply(text="<think>private thoughts</think>The answer.", chunk_chars=3),
    "refusal": Reply(refusal="I can't help with that."),
    "truncated": Reply(text="This is cut off", finish_reason="length"),
    "content_filter": Reply(text="Some", finish_reason="content_filter"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_stream_shapes_are_strictly_valid(gateway: Gateway, scripted: ScriptedUpstream, case: str) -> None:
    scripted.enqueue(MODEL, CASES[case])
    terminal = stream_and_validate(gateway, {"model": MODEL, "input": "hi", "tools": TOOLS})
    types = [o["type"] for o in terminal["output"]]
    expected = {
        "text": ["message"],
        "tool_call": ["function_call"],
        "parallel_interleaved": ["function_call", "function_call"],
        "reasoning_and_text": ["reasoning", "message"],
        "reasoning_field": ["reasoning", "message"],
        "think_tags": ["reasoning", "message"],
        "refusal": ["message"],
        "truncated": ["message"],
        "content_filter": ["message"],
    }[case]
    assert types == expected
    if case == "parallel_interleaved":
        assert [o["arguments"] for o in terminal["output"]] == ['{"city":"Paris"}', '{"tz":"Europe/Paris"}']
    if case == "think_tags":
        assert terminal["output"][0]["content"][0]["text"] == "private thoughts"
        assert terminal["output"][1]["content"][0]["text"] == "The answer."
    if case in ("truncated", "content_filter"):
        assert terminal["status"] == "incomplete"
        assert terminal["incomplete_details"]["reason"] == (
            "max_output_tokens" if case == "truncated" else "content_filter"
        )
    else:
        assert terminal["status"] == "completed"
    assert terminal["usage"]["total_tokens"] > 0


@pytest.mark.parametrize(
    "case", ["text", "tool_call", "parallel_interleaved", "reasoning_and_text", "refusal", "truncated"]
)
def test_openai_sdk_stream_helper(gateway: Gateway, scripted: ScriptedUpstream, case: str) -> None:
    scripted.enqueue(MODEL, CASES[case])
    client = gateway.openai()
    with client.responses.stream(model=MODEL, input="hi", tools=TOOLS, max_output_tokens=64) as stream:
        events = list(stream)
        if case == "truncated":
            # The SDK's get_final_response() only accepts response.completed, and
            # OpenAI itself ends a truncated response with response.incomplete:
            # the full response is on that event.
            assert events[-1].type == "response.incomplete"
            final = events[-1].response
            assert final.incomplete_details.reason == "max_output_tokens"
        else:
            final = stream.get_final_response()
    assert events[0].type == "response.created"
    assert final.id and final.output
    if case == "text":
        assert final.output_text == CASES["text"].text
    if case == "parallel_interleaved":
        assert [o.call_id for o in final.output] == ["call_1", "call_2"]


def test_sdk_reports_mid_stream_upstream_failure(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="a long answer that will be cut", disconnect_after=3))
    client = gateway.openai()
    with pytest.raises(openai.APIError), client.responses.stream(model=MODEL, input="hi") as stream:
        for _ in stream:
            pass


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(text="a long answer that will be cut", disconnect_after=3), "upstream_connection_error"),
        (Reply(text="a long answer with garbage", malformed_after=3), "upstream_malformed"),
        (
            Reply(
                raw_chunks=[
                    {
                        "id": "x",
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
                    }
                ],
                raw_done=False,
            ),
            "upstream_truncated",
        ),
    ],
)
def test_mid_stream_failure_is_error_then_failed(
    gateway: Gateway, scripted: ScriptedUpstream, reply: Reply, code: str
) -> None:
    scripted.enqueue(MODEL, reply)
    r, raw = stream_raw(gateway, {"model": MODEL, "input": "hi"})
    assert r.status_code == 200
    terminal = validate_sse(raw)
    events = parse_sse(raw)
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-2]["code"] == code and events[-2]["error"]["code"] == code
    assert terminal["status"] == "failed" and terminal["error"]["code"] == code
    with gateway.http() as http:
        stored = http.get(f"/v1/responses/{terminal['id']}").json()
    assert stored["status"] == "failed"
    assert stored["output"] == terminal["output"]  # partial output kept
    assert stored["output"] and stored["output"][0]["status"] == "incomplete"


def test_upstream_timeout_mid_stream(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Provider

    Provider.objects.update(idle_timeout=0.5)  # streamed: the silence between chunks
    scripted.enqueue(MODEL, Reply(text="slow words here", chunk_chars=5, interval=1.5))
    r, raw = stream_raw(gateway, {"model": MODEL, "input": "hi"})
    terminal = validate_sse(raw)
    assert terminal["status"] == "failed" and terminal["error"]["code"] == "upstream_timeout"


def test_all_targets_failing_before_first_byte_is_a_plain_http_error(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(status=500))
    r, raw = stream_raw(gateway, {"model": MODEL, "input": "hi"})
    assert r.status_code == 502
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "upstream_error"


def test_client_disconnect_cancels_upstream_and_keeps_partial_output(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="word " * 200, chunk_chars=5, interval=0.05))
    with (
        gateway.http() as http,
        http.stream("POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}) as r,
    ):
        seen = b""
        for chunk in r.iter_raw():
            seen += chunk
            if seen.count(b"response.output_text.delta") >= 3:
                break
    closed_at = time.monotonic()
    assert scripted.wait_aborted(1, timeout=5)
    aborted_at = scripted.aborted[0][0]
    assert aborted_at - closed_at < 1.0, "the upstream request must be closed within 1 s"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        row = Response.objects.get()
        if row.status != "in_progress":
            break
        time.sleep(0.05)
    assert row.status == "cancelled"
    with gateway.http() as http:
        stored = http.get(f"/v1/responses/{row.id}").json()
    assert stored["status"] == "cancelled"
    assert stored["output"][0]["content"][0]["text"].startswith("word word")


def test_keepalive_comments_while_upstream_is_silent(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    settings.GATEWAY_SSE_KEEPALIVE_SECONDS = 0.1
    scripted.enqueue(MODEL, Reply(text="slow reply", chunk_chars=5, interval=0.5))
    r, raw = stream_raw(gateway, {"model": MODEL, "input": "hi"})
    assert b"\n\n: keep-alive\n\n" in raw
    validate_sse(raw)


def test_streaming_and_json_paths_store_the_same_response(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    reply = Reply(reasoning="think", text="Same answer", tool_calls=None)
    scripted.enqueue(MODEL, reply, reply)
    with gateway.http() as http:
        plain = http.post("/v1/responses", json={"model": MODEL, "input": "q"}).json()
    streamed = stream_and_validate(gateway, {"model": MODEL, "input": "q"})
    with gateway.http() as http:
        a = http.get(f"/v1/responses/{plain['id']}").json()
        b = http.get(f"/v1/responses/{streamed['id']}").json()

    def normalise(resp: dict) -> dict:
        resp = dict(resp, id="x", created_at=0, completed_at=0)
        resp["output"] = [dict(o, id="x") for o in resp["output"]]
        return resp

    assert normalise(a) == normalise(b)


def test_store_false_stream(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="ephemeral"))
    terminal = stream_and_validate(gateway, {"model": MODEL, "input": "q", "store": False})
    with gateway.http() as http:
        assert http.get(f"/v1/responses/{terminal['id']}").status_code == 404


def test_an_internal_bug_mid_stream_still_ends_the_response(
    gateway: Gateway, scripted: ScriptedUpstream, monkeypatch
) -> None:
    from responses_api.models import Response
    from responses_api.protocol import events

    original = events.EventBuilder._content

    def broken(self, text, item_type, part_kind):
        if "boom" in text:
            raise KeyError("a bug")
        return original(self, text, item_type, part_kind)

    monkeypatch.setattr(events.EventBuilder, "_content", broken)
    scripted.enqueue(MODEL, Reply(text="fine then boom", chunk_chars=5))
    r, raw = stream_raw(gateway, {"model": MODEL, "input": "hi"})
    terminal = validate_sse(raw)
    assert terminal["status"] == "failed" and terminal["error"]["code"] == "server_error"
    assert Response.objects.get(id=terminal["id"]).status == "failed"
