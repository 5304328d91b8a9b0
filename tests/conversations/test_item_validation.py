"""Items added to a conversation are validated and normalised as the `input` items of
POST /v1/responses are (one parser, protocol/items.py): the same item is refused by both with
the same `param`. Also what a 400 echoes of a request."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

BOGUS = [
    ({"type": "message", "role": "assistant", "content": "x", "status": "bogus-status"}, "status"),
    ({"type": "message", "role": "assistant", "content": "x", "id": 777001}, "id"),
    ({"type": "message", "role": "user", "content": "x", "id": 777001}, "id"),
    ({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "status": "done"}, "status"),
    ({"type": "function_call_output", "call_id": "c1", "output": "ok", "status": ["completed"]}, "status"),
    ({"type": "function_call", "call_id": "c1", "name": "f" * 5000, "arguments": "{}"}, "name"),
]


@pytest.mark.parametrize(("item", "field"), BOGUS, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BOGUS)])
def test_a_bad_item_is_refused_alike_by_responses_and_conversations(
    gateway: Gateway, scripted: ScriptedUpstream, item: dict[str, Any], field: str
) -> None:
    scripted.set_default(MODEL, Reply(text="should not be called"))
    with gateway.http() as http:
        conv = http.post("/v1/conversations", json={}).json()["id"]
        for path, body, param in (
            ("/v1/responses", {"model": MODEL, "input": [item]}, f"input[0].{field}"),
            (f"/v1/conversations/{conv}/items", {"items": [item]}, f"items[0].{field}"),
            ("/v1/conversations", {"items": [item]}, f"items[0].{field}"),
        ):
            answer = http.post(path, json=body)
            assert answer.status_code == 400, (path, answer.text)
            assert answer.json()["error"]["param"] == param, (path, answer.text)
            assert len(answer.text) < 1000, "the 5,000-character name is not echoed"
        assert http.get(f"/v1/conversations/{conv}/items").json()["data"] == []
    assert scripted.requests == []


def test_a_400_does_not_echo_an_over_long_field_whole(gateway: Gateway) -> None:
    key = "k" * 5000
    with gateway.http() as http:
        answer = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "metadata": {key: "v"}})
    assert answer.status_code == 400
    param = answer.json()["error"]["param"]
    assert param.startswith("metadata.kkk") and len(param) <= 256
    assert len(answer.text) < 1000
