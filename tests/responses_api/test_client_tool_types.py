"""A client tool type is one entry of one table (protocol/client_tool_types.py).

A test-only type, registered from here and nowhere else, works end to end through the gateway
with the real openai SDK and the scripted upstream: it is offered to the model as the function
its entry describes, the model's call comes back to the client as the type's own item, the
client's output replays to the model as a tool message, and the admin's history shows both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from responses_api.protocol.client_tool_types import (
    CLIENT_TOOL_TYPES,
    ClientToolType,
    NewCall,
    OfferedFunction,
)
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def _stamp_call(call: NewCall) -> dict[str, Any]:
    return {**call.head(), "stamp": {"text": str(call.args.get("text") or "")}}


# The whole test-only type: nothing else in the gateway names it.
STAMP = ClientToolType(
    kind="test_stamp",
    tool_types=("test_stamp",),
    call_type="test_stamp_call",
    output_type="test_stamp_call_output",
    call_id_prefix="tst",
    output_id_prefix="tsto",
    call_fields={"call_id": str, "stamp": dict},
    output_fields={"call_id": str, "output": str},
    make_call=_stamp_call,
    as_function_call=lambda item: ("test_stamp", {"text": item["stamp"]["text"]}),
    shown="stamp",
    function=OfferedFunction(
        "Stamp a text on the user's paper.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    output_text=lambda item: f"stamped: {item['output']}",
)


@pytest.fixture
def stamp() -> Iterator[ClientToolType]:
    CLIENT_TOOL_TYPES.register(STAMP)
    try:
        yield STAMP
    finally:
        CLIENT_TOOL_TYPES.unregister(STAMP.kind)


@pytest.fixture
def _plain_static_storage(settings: Any) -> None:  # pytest-django's settings fixture
    # The admin's pages render `{% static %}` without collectstatic's manifest (tests/admin/conftest.py).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.mark.usefixtures("_plain_static_storage")
def test_a_client_tool_type_added_in_one_entry_works_end_to_end(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    stamp: ClientToolType,
    admin_client: Client,
) -> None:
    client = gateway.openai()
    tools: Any = [{"type": "test_stamp"}]
    scripted.enqueue(MODEL, Reply(tool_calls=[{"id": "call_st", "name": "test_stamp", "arguments": {"text": "ok"}}]))
    first = client.responses.create(model=MODEL, input="stamp it", tools=tools)

    # Offered to the model as the entry's function.
    [offered] = scripted.requests[-1].body["tools"]
    assert offered["function"]["name"] == "test_stamp"
    assert offered["function"]["description"] == "Stamp a text on the user's paper."
    assert offered["function"]["parameters"] == stamp.function.parameters  # type: ignore[union-attr]
    # The call is handed to the client as the type's own item, and the tool reported as sent.
    with gateway.http() as http:
        body = http.get(f"/v1/responses/{first.id}").json()
    [call] = body["output"]
    assert call["type"] == "test_stamp_call" and call["id"].startswith("tst_")
    assert (call["call_id"], call["status"], call["stamp"]) == ("call_st", "completed", {"text": "ok"})
    assert body["tools"] == [{"type": "test_stamp"}]

    # The client's output goes back to the model as the tool message the entry writes.
    scripted.enqueue(MODEL, Reply(text="Stamped."))
    output: Any = [{"type": "test_stamp_call_output", "call_id": "call_st", "output": "paper 1"}]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input=output, tools=tools)
    assert second.output_text == "Stamped."
    messages = scripted.requests[-1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "test_stamp", "arguments": json.dumps({"text": "ok"})}
    assert messages[2] == {"role": "tool", "tool_call_id": "call_st", "content": "stamped: paper 1"}
    with gateway.http() as http:
        [given] = http.get(f"/v1/responses/{second.id}/input_items").json()["data"]
    assert given["type"] == "test_stamp_call_output" and given["id"].startswith("tsto_")

    # An output that answers no call is refused, naming the field, before any model call.
    with gateway.http() as http:
        orphan = http.post(
            "/v1/responses",
            json={"model": MODEL, "input": [{**output[0], "call_id": "nope"}], "tools": tools},
        )
    assert orphan.status_code == 400 and orphan.json()["error"]["param"] == "input[0].call_id"

    # The admin's history shows the call (the field its entry names) and the output's text.
    page = admin_client.get(reverse("admin:responses_api_response_conversation", args=[quote(second.id)]))
    html = page.content.decode()
    assert page.status_code == 200
    call_card = html[html.index('id="call-call_st"') :]
    assert '<span class="gw-name">test_stamp</span>' in call_card
    assert "&quot;text&quot;: &quot;ok&quot;" in call_card[: call_card.index("</pre>")]
    assert '<pre class="gw-code">stamped: paper 1</pre>' in html


def test_a_registered_type_is_gone_once_unregistered(stamp: ClientToolType) -> None:
    from responses_api.protocol.errors import InvalidRequest
    from responses_api.protocol.tools import normalize_tools

    assert [t.name for t in normalize_tools([{"type": "test_stamp"}])] == ["test_stamp"]
    with pytest.raises(ValueError, match="clashes"):
        CLIENT_TOOL_TYPES.register(stamp)
    CLIENT_TOOL_TYPES.unregister(stamp.kind)
    try:
        with pytest.raises(InvalidRequest):
            normalize_tools([{"type": "test_stamp"}])
    finally:
        CLIENT_TOOL_TYPES.register(stamp)  # the fixture unregisters it
