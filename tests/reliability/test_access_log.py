"""Every /v1/responses access-log line says which response, how it ended, and why it failed."""

from __future__ import annotations

import pytest

from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def test_a_400_line_names_the_error_code_and_param(gateway: Gateway, access_log: Lines) -> None:
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "hi", "stream_options": 5})
    assert resp.status_code == 400
    (line,) = access_log.for_request(resp.headers["x-request-id"])
    assert (line["status"], line["error_code"], line["error_param"]) == (
        400,
        resp.json()["error"]["code"],
        "stream_options",
    )


def test_a_stored_create_line_has_the_response_and_its_tokens(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    scripted.enqueue(MODEL, Reply(text="hello there"))
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "hi"})
    body = resp.json()
    (line,) = access_log.for_request(resp.headers["x-request-id"])
    assert line["response_id"] == body["id"] and line["response_status"] == "completed"
    assert line["model"] == MODEL
    assert (line["input_tokens"], line["output_tokens"]) == (
        body["usage"]["input_tokens"],
        body["usage"]["output_tokens"],
    )
    assert line["latency_ms"] > 0


def test_a_streamed_line_is_written_at_the_end_with_the_final_state(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    scripted.enqueue(MODEL, Reply(text="a slow answer", chunk_chars=2, interval=0.05))
    with gateway.http().stream("POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}) as resp:
        request_id = resp.headers["x-request-id"]
        lines = resp.iter_lines()
        assert next(lines).startswith("event: response.created")
        early = access_log.for_request(request_id, timeout=0.2)
        assert early == [], {
            k: v for k, v in early[0].items() if k in ("response_status", "latency_ms", "first_byte_ms", "stream_end")
        }
        raw = "\n".join(lines)
    (line,) = access_log.for_request(request_id)
    assert "stream_end" not in line
    assert line["response_status"] == "completed" and line["response_id"].startswith("resp_")
    assert line["response_id"] in raw
    assert line["output_tokens"] > 0 and line["input_tokens"] > 0
    assert 0 < line["first_byte_ms"] < line["latency_ms"]
    assert line["latency_ms"] >= 250  # the whole stream, not the time to its headers


def test_a_stream_the_client_leaves_is_logged_as_such(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    scripted.enqueue(MODEL, Reply(text="a long and slow answer " * 20, chunk_chars=2, interval=0.05))
    with gateway.http().stream("POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}) as resp:
        request_id = resp.headers["x-request-id"]
        lines = resp.iter_lines()
        while "response.output_text.delta" not in next(lines):
            pass
    (line,) = access_log.for_request(request_id)
    assert line["stream_end"] == "client_disconnected"
    assert line["status"] == 200 and line["response_id"].startswith("resp_")
    assert 0 < line["first_byte_ms"] < line["latency_ms"]


def test_a_stream_that_fails_logs_the_error(gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines) -> None:
    scripted.enqueue(MODEL, Reply(text="partial answer", disconnect_after=3))
    with gateway.http().stream("POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}) as resp:
        request_id = resp.headers["x-request-id"]
        raw = "".join(resp.iter_text())
    assert "response.failed" in raw
    (line,) = access_log.for_request(request_id)
    assert line["status"] == 200 and line["response_status"] == "failed"
    assert line["error_code"] and line["error_code"] in raw


def test_reads_of_a_response_name_it(gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines) -> None:
    scripted.enqueue(MODEL, Reply(text="x"))
    created = gateway.openai().responses.create(model=MODEL, input="hi")
    resp = gateway.http().get(f"/v1/responses/{created.id}")
    (line,) = access_log.for_request(resp.headers["x-request-id"])
    assert line["response_id"] == created.id
    missing = gateway.http().get("/v1/responses/resp_missing")
    (line,) = access_log.for_request(missing.headers["x-request-id"])
    assert (line["status"], line["response_id"], line["error_param"]) == (
        404,
        "resp_missing",
        missing.json()["error"]["param"],
    )


def test_a_timed_out_upstream_line_names_the_error_code(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    """Before the first byte, streamed or not, and mid-stream: a line of a failed response says why."""
    from tests.support.harness import make_route

    make_route(
        scripted.base_url,
        name="impatient",
        upstream_model=MODEL,
        provider_name="impatient",
        first_byte_timeout=0.5,
        idle_timeout=0.5,
        timeout=0.5,
    )
    stall = Reply(text="one two three four", chunk_chars=4, interval=2.0)
    for stream, reply in ((False, Reply(text="late", delay=3)), (True, Reply(text="late", delay=3)), (True, stall)):
        scripted.enqueue(MODEL, reply)
        resp = gateway.http().post("/v1/responses", json={"model": "impatient", "input": "hi", "stream": stream})
        (line,) = access_log.for_request(resp.headers["x-request-id"])
        assert line.get("error_code") == "upstream_timeout", (stream, reply.delay, line)
        assert line["tenant"] == "acme"
