"""Provider kind `responses`: an upstream that speaks /v1/responses itself, scripted on
loopback. The gateway keeps the state (the upstream gets the whole context with store: false)
and re-issues its own events, checked by the strict stream validator; the openai SDK is the
client, with the same code as against a Chat Completions route."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.errors import error_body
from tests.support.harness import Gateway, call
from tests.support.stream_validator import validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

NATIVE = "native-model"


@pytest.fixture
def native(gateway: Gateway, scripted: ScriptedUpstream) -> Gateway:
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    provider = Provider.objects.create(name="native", kind="responses", base_url=scripted.base_url)
    route = ModelRoute.objects.create(name=NATIVE)
    RouteTarget.objects.create(route=route, provider=provider, upstream_model="up-native")
    routing.clear_cache()
    return gateway


def sent(scripted: ScriptedUpstream) -> list[dict]:
    return [r.body for r in scripted.requests if r.path == "/v1/responses"]


def test_a_text_answer_streamed_and_not(native: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default("up-native", Reply(text="Hello from a native upstream.", chunk_chars=5))
    client = native.openai()
    response = client.responses.create(model=NATIVE, input="hi", instructions="Be brief.", max_output_tokens=50)
    assert response.output_text == "Hello from a native upstream." and response.status == "completed"
    validate_response_object(native.http().get(f"/v1/responses/{response.id}").json())
    (body,) = sent(scripted)
    assert body["store"] is False and body["model"] == "up-native" and body["instructions"] == "Be brief."
    assert body["max_output_tokens"] == 50 and "previous_response_id" not in body
    assert body["input"] == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    with native.http() as http:
        raw = http.post("/v1/responses", json={"model": NATIVE, "input": "again", "stream": True}).content
    final = validate_sse(raw)
    assert final["output"][0]["content"][0]["text"] == "Hello from a native upstream."
    assert final["usage"]["input_tokens"] > 0 and final["model"] == NATIVE


def test_the_gateway_keeps_the_chain_and_sends_the_whole_context(native: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default("up-native", Reply(echo=True))
    client = native.openai()
    first = client.responses.create(model=NATIVE, input="one")
    second = client.responses.create(model=NATIVE, input="two", previous_response_id=first.id)
    assert second.output_text == "echo: two"
    body = sent(scripted)[-1]
    assert "previous_response_id" not in body and body["store"] is False
    assert [(i["type"], i.get("role")) for i in body["input"]] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert body["input"][1]["content"] == [{"type": "output_text", "text": "echo: one"}]
    assert not any("id" in item for item in body["input"])  # the upstream never saw the gateway's ids
    assert client.responses.retrieve(second.id).previous_response_id == first.id


def test_a_function_call_and_its_output(native: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(
        "up-native", Reply(tool_calls=[call("lookup", {"q": "x"}, "call_9")], chunk_chars=3), Reply(text="Found it.")
    )
    tools = [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        }
    ]
    client = native.openai()
    with native.http() as http:
        raw = http.post(
            "/v1/responses", json={"model": NATIVE, "input": "find x", "tools": tools, "stream": True}
        ).content
    first = validate_sse(raw)
    (fc,) = [i for i in first["output"] if i["type"] == "function_call"]
    assert (fc["name"], fc["call_id"], json.loads(fc["arguments"])) == ("lookup", "call_9", {"q": "x"})
    body = sent(scripted)[-1]
    assert body["tools"][0]["name"] == "lookup" and body["tools"][0]["type"] == "function"
    answer = client.responses.create(
        model=NATIVE,
        previous_response_id=first["id"],
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "call_9", "output": "x is 42"}],
    )
    assert answer.output_text == "Found it."
    items = sent(scripted)[-1]["input"]
    assert items[-2] == {"type": "function_call", "call_id": "call_9", "name": "lookup", "arguments": '{"q": "x"}'}
    assert items[-1] == {"type": "function_call_output", "call_id": "call_9", "output": "x is 42"}


def test_reasoning_usage_and_an_incomplete_answer(native: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(
        "up-native",
        Reply(
            reasoning="Think first.",
            text="Cut",
            finish_reason="length",
            usage={
                "prompt_tokens": 12,
                "completion_tokens": 7,
                "total_tokens": 19,
                "completion_tokens_details": {"reasoning_tokens": 3},
            },
        ),
    )
    with native.http() as http:
        raw = http.post(
            "/v1/responses", json={"model": NATIVE, "input": "q", "stream": True, "reasoning": {"effort": "low"}}
        ).content
    final = validate_sse(raw)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["input_tokens"] == 12 and final["usage"]["output_tokens"] == 7
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 3
    assert sent(scripted)[-1]["reasoning"] == {"effort": "low"}


def test_upstream_errors_and_a_dropped_stream(native: Gateway, scripted: ScriptedUpstream) -> None:
    client = native.openai()
    scripted.enqueue("up-native", Reply(status=400, error_body={"error": {"message": "bad input"}}))
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=NATIVE, input="x")
    assert error_body(bad.value)["code"] == "upstream_bad_request"
    scripted.enqueue("up-native", Reply(status=500))
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model=NATIVE, input="x")
    scripted.enqueue("up-native", Reply(text="partial answer that breaks", chunk_chars=4, disconnect_after=6))
    with native.http() as http:
        raw = http.post("/v1/responses", json={"model": NATIVE, "input": "x", "stream": True}).content
    final = validate_sse(raw)
    assert final["status"] == "failed" and final["error"]["code"].startswith("upstream")
    failed: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "status": "in_progress"}},
        {
            "type": "response.failed",
            "sequence_number": 1,
            "response": {"id": "r", "status": "failed", "error": {"code": "server_error", "message": "overloaded"}},
        },
    ]
    scripted.enqueue("up-native", Reply(raw_chunks=failed, raw_done=False))
    with native.http() as http:
        raw = http.post("/v1/responses", json={"model": NATIVE, "input": "x", "stream": True}).content
    final = validate_sse(raw)
    assert final["status"] == "failed" and "overloaded" in final["error"]["message"]


def test_unknown_upstream_events_are_skipped(native: Gateway, scripted: ScriptedUpstream) -> None:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.some_future_event", "sequence_number": 1, "payload": {"x": 1}},
        {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0, "delta": "fine"},
        {
            "type": "response.completed",
            "sequence_number": 3,
            "response": {
                "id": "r",
                "status": "completed",
                "output": [],
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        },
    ]
    scripted.enqueue("up-native", Reply(raw_chunks=events, raw_done=False))
    with native.http() as http:
        raw = http.post("/v1/responses", json={"model": NATIVE, "input": "x", "stream": True}).content
    assert validate_sse(raw)["output"][0]["content"][0]["text"] == "fine"


def test_hosted_tools_go_to_the_upstream_and_their_items_come_back(native: Gateway, scripted: ScriptedUpstream) -> None:
    """A hosted tool no registry tool serves is run by a native upstream itself: sent on as the
    client sent it, its call item relayed (its progress events are not)."""
    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "gateway news"},
    }
    message = {
        "type": "message",
        "id": "msg_up",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Here is the news.", "annotations": []}],
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**search, "status": "in_progress"}},
        {"type": "response.web_search_call.searching", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.output_item.done", "output_index": 0, "item": search},
        {"type": "response.output_item.added", "output_index": 1, "item": {**message, "content": []}},
        {"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Here is the news."},
        {"type": "response.output_item.done", "output_index": 1, "item": message},
        {
            "type": "response.completed",
            "response": {
                "id": "r",
                "status": "completed",
                "output": [search, message],
                "usage": {"input_tokens": 30, "output_tokens": 5},
            },
        },
    ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    scripted.enqueue("up-native", Reply(raw_chunks=events, raw_done=False))
    with native.http() as http:
        reply = http.post(
            "/v1/responses",
            json={
                "model": NATIVE,
                "input": "news?",
                "stream": True,
                "tools": [{"type": "web_search", "search_context_size": "low"}],
            },
        )
    assert "x-gateway-dropped-tools" not in reply.headers
    final = validate_sse(reply.content)
    assert [i["type"] for i in final["output"]] == ["web_search_call", "message"]
    assert final["output"][0]["action"] == {"type": "search", "query": "gateway news"}
    assert {"type": "web_search", "search_context_size": "low"} in final["tools"]
    body = sent(scripted)[-1]
    assert body["tools"] == [{"type": "web_search", "search_context_size": "low"}]
    stored = native.http().get(f"/v1/responses/{final['id']}").json()
    assert [i["type"] for i in stored["output"]] == ["web_search_call", "message"]
    # Continuing: the hosted call is not sent back (the upstream, storing nothing, could not
    # resolve its id); the answer it led to is. A hosted tool_choice goes on as the client sent it.
    scripted.enqueue("up-native", Reply(text="More."))
    native.openai().responses.create(
        model=NATIVE,
        input="more",
        previous_response_id=final["id"],
        tools=[{"type": "web_search"}],
        tool_choice={"type": "web_search"},
    )
    body = sent(scripted)[-1]
    assert [i["type"] for i in body["input"]] == ["message", "message", "message"]
    assert body["tool_choice"] == {"type": "web_search"}


def test_hosted_tool_search_over_a_native_upstream(native: Gateway, scripted: ScriptedUpstream) -> None:
    """The gateway serves `tool_search` itself on a native Responses upstream too: the upstream is
    offered a `tool_search` function (never OpenAI's hosted tool), sees the search as a function
    call and its result, and is offered the found tool on the next call."""
    deferred = [
        {
            "type": "function",
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "defer_loading": True,
        }
        for name, description in (("lookup", "Look up a customer record."), ("refund", "Refund a payment."))
    ]
    scripted.enqueue(
        "up-native",
        Reply(tool_calls=[call("tool_search", {"query": "customer record"}, "s1")]),
        Reply(tool_calls=[call("lookup", {"q": "ada"}, "c1")]),
    )
    client = native.openai()
    resp = client.responses.create(model=NATIVE, input="Find Ada.", tools=[{"type": "tool_search"}, *deferred])
    assert [o.type for o in resp.output] == ["tool_search_call", "tool_search_output", "function_call"]
    assert [t.name for t in resp.output[1].tools] == ["lookup"]  # "refund" does not match
    first, second = sent(scripted)[-2:]
    assert [t["name"] for t in first["tools"]] == ["tool_search"] and first["tools"][0]["type"] == "function"
    assert [t["name"] for t in second["tools"]] == ["tool_search", "lookup"]
    assert [i["type"] for i in second["input"]][-2:] == ["function_call", "function_call_output"]
    assert "lookup" in second["input"][-1]["output"]
    assert {t.type for t in resp.tools} == {"tool_search", "function"}
    assert all(t.defer_loading for t in resp.tools if t.type == "function")
