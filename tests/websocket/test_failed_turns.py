"""A WebSocket turn that fails: its access-log line says why and whose (as HTTP's does), and
the connection still continues from a stored parent the failed turn made it forget."""

from __future__ import annotations

import time

import pytest

from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway, make_route
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.lanes import TERMINAL, read_until, responses, send, terminals
from tests.websocket.test_websocket_mode import socket

pytestmark = pytest.mark.embedded


def _lines(access_log: Lines, count: int) -> list[dict]:
    deadline = time.monotonic() + 5  # each line is written just after its turn's last frame
    while len(access_log.websocket_turns()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return access_log.websocket_turns()


def _ended(events: list[dict]) -> bool:
    """A create's last frame: its terminal event, or the error frame of one that made no response."""
    return bool(events) and (
        events[-1]["type"] in TERMINAL or (events[-1]["type"] == "error" and "status" in events[-1])
    )


def test_a_failed_turn_logs_its_error_code_and_tenant(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    make_route(
        scripted.base_url,
        name="impatient",
        upstream_model=MODEL,
        provider_name="impatient",
        first_byte_timeout=0.5,
        idle_timeout=0.5,
        timeout=0.5,
    )
    scripted.enqueue(
        MODEL,
        Reply(text="partial answer", disconnect_after=3),  # fails mid-stream: response.failed
        Reply(text="one two three four", chunk_chars=4, interval=2.0),  # stalls: upstream_timeout
        Reply(text="late", delay=3),  # no first byte: an error frame, no response
        Reply(text="fine"),
    )
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="a")
        (broken,) = responses(read_until(ws, terminals(1)))
        for _ in range(2):
            send(ws, type="response.create", model="impatient", input="b")
            read_until(ws, _ended)
        send(ws, type="response.create", model=MODEL, input="c")
        read_until(ws, terminals(1))
    assert broken["status"] == "failed"
    lines = _lines(access_log, 4)
    assert [line.get("response_status") for line in lines] == ["failed", "failed", None, "completed"]
    assert [line.get("error_code") for line in lines] == [
        broken["error"]["code"],
        "upstream_timeout",
        "upstream_timeout",
        None,
    ]
    assert {line.get("tenant") for line in lines} == {"acme"}


def test_a_stored_parent_a_failed_turn_evicted_is_loaded_from_storage(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """The eviction is from the connection's memory: a `store: true` parent is read from the
    database again, as HTTP and GET find it; a `store: false` one is gone (not found)."""
    from tests.support.harness import call

    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup", {}, "c1")]), Reply(text="answered from storage"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="look", tools=[tool], stream_id="agent")
        (first,) = responses(read_until(ws, terminals(1)))
        orphan = {"type": "function_call_output", "call_id": "other", "output": "x"}
        common = {"type": "response.create", "model": MODEL, "previous_response_id": first["id"], "tools": [tool]}
        send(ws, **common, input=[orphan], stream_id="agent")
        (refused,) = read_until(ws, lambda events: bool(events))
        assert (refused["status"], refused["error"]["param"], refused["stream_id"]) == (
            400,
            "input[0].call_id",
            "agent",
        )
        answer = {"type": "function_call_output", "call_id": "c1", "output": "found"}
        send(ws, **common, input=[answer], stream_id="agent")
        events = read_until(ws, _ended)
        assert events[-1]["type"] != "error", events[-1]
        (final,) = responses(events)
    assert final["status"] == "completed" and final["previous_response_id"] == first["id"]
    assert final["output"][0]["content"][0]["text"] == "answered from storage"
    sent = str(scripted.model_calls[-1].body)
    assert "look" in sent and "found" in sent  # the parent's context, read from the database
