"""A WebSocket turn that fails: its access-log line says why and whose (as HTTP's does), and
the connection still continues from a stored parent the failed turn made it forget."""

from __future__ import annotations

import time

import pytest

from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway, make_route
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.lanes import read_until, responses, send, terminals
from tests.websocket.test_websocket_mode import socket

pytestmark = pytest.mark.embedded


def _lines(access_log: Lines, count: int) -> list[dict]:
    deadline = time.monotonic() + 5  # each line is written just after its turn's last frame
    while len(access_log.websocket_turns()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return access_log.websocket_turns()


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
            read_until(ws, lambda events: events[-1]["type"] in ("response.failed", "error") if events else False)
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
