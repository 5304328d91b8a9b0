"""`max_output_tokens` has OpenAI's floor of 16: a 400 naming it over HTTP and WebSocket, and
the same minimum in the OpenAPI document."""

from __future__ import annotations

import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_events
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import socket, turn

pytestmark = pytest.mark.embedded


def test_below_16_is_refused_naming_the_field(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    with gateway.http() as http:
        for stream in (False, True):
            r = http.post(
                "/v1/responses", json={"model": MODEL, "input": "x", "max_output_tokens": 15, "stream": stream}
            )
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "max_output_tokens"
            assert "16" in r.json()["error"]["message"]
        document = http.get("/v1/openapi.json").json()
    bound = document["components"]["schemas"]["CreateResponseBody"]["properties"]["max_output_tokens"]
    assert any(option.get("minimum") == 16 for option in bound.get("anyOf", [bound])), bound
    assert scripted.requests == []
    with socket(gateway) as ws:
        (error,) = turn(ws, model=MODEL, input="x", max_output_tokens=15)
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["param"] == "max_output_tokens"
        # 16 itself is accepted, and the connection stays usable.
        scripted.enqueue(MODEL, Reply(text="ok"))
        final = validate_events(turn(ws, model=MODEL, input="x", max_output_tokens=16))
    assert final["status"] == "completed" and final["max_output_tokens"] == 16
