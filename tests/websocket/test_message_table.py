"""The client messages a connection serves are a table (api/websocket/messages.py, HANDLERS): a
message type is a handler and one entry. Here a test-only type, registered from the test, is
served on a live socket with nothing else changed: answered on its lane, its access-log line
written, what it raises answered as an error frame on its lane, and the connection stays open."""

from __future__ import annotations

import json
from typing import Any

import pytest

from responses_api.api.websocket import messages
from responses_api.api.websocket.connection import Connection
from responses_api.protocol.errors import InvalidRequest
from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import completed, socket

pytestmark = pytest.mark.embedded


async def echo(connection: Connection, message: dict[str, Any], incoming: messages.Incoming) -> None:
    """`test.echo`: says back what it was told, on the lane it names."""
    stream_id = incoming.read_lane(message)
    said = message.get("said")
    if not isinstance(said, str):
        raise InvalidRequest("'said' must be a string.", param="said")
    incoming.turn.kind = "test.echo"
    await connection.socket.emit({"type": "test.echoed", "said": said, "stream_id": stream_id})
    incoming.turn.log()


def test_a_message_type_registered_in_the_table_is_served(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(messages.HANDLERS, "test.echo", echo)
    scripted.enqueue(MODEL, Reply(text="still here"))
    with socket(gateway) as ws:
        ws.send(json.dumps({"type": "test.echo", "said": "hello", "stream_id": "side"}))
        assert json.loads(ws.recv(timeout=10)) == {"type": "test.echoed", "said": "hello", "stream_id": "side"}
        ws.send(json.dumps({"type": "test.echo", "said": 5, "stream_id": "side"}))
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["status"], error["stream_id"]) == ("error", 400, "side")
        assert error["error"]["param"] == "said"
        assert completed(ws, input="hi")["output"][0]["content"][0]["text"] == "still here"
    lines = [line for line in access_log.websocket_turns() if line["message_type"] == "test.echo"]
    assert [line["status"] for line in lines] == [200]
    failed = [line for line in access_log.websocket_turns() if line.get("error_param") == "said"]
    assert [(line["status"], line["stream_id"]) for line in failed] == [(400, "side")]


def test_the_table_serves_what_the_surface_says_is_served() -> None:
    """protocol/surface.py classifies each client message of the SDK; the table is what is
    served: the two agree (a type served is one handler and its entry here, and its row there)."""
    from responses_api.protocol import surface

    served = {name for name, entry in surface.CLIENT_EVENTS.items() if entry.treatment is surface.SERVED}
    assert set(messages.HANDLERS) == served
