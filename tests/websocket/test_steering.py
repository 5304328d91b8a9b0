"""Steering over WebSocket (`response.steer`, openai SDK 3.57) with a real client through
uvicorn, over a Chat Completions and an Anthropic upstream: input accepted while a response runs
is committed at a safe boundary by a successor response chained to it; a response that stops
for client tool output keeps it queued (`response.steer.pending`) for the explicit continuation;
input that cannot be committed comes back in `response.steer.failed` with the SDK's code."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from websockets.sync.client import ClientConnection

from tests.support.harness import MODEL, Gateway, McpServerProcess, call
from tests.support.upstream import Pacing, Reply, ScriptedUpstream
from tests.tool_registry.test_mcp import adhoc
from tests.websocket.lanes import of_lane, read_until, responses, seen, send, terminals
from tests.websocket.test_websocket_mode import socket

pytestmark = pytest.mark.embedded

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SLOW: Pacing = {"chunk_chars": 2, "interval": 0.05}


def steer(ws: ClientConnection, previous: str, input: Any) -> None:
    send(ws, type="response.steer", previous_response_id=previous, input=input)


def one(ws: ClientConnection) -> dict[str, Any]:
    (event,) = read_until(ws, lambda events: bool(events))
    return event


def sdk_parses(event: dict[str, Any]) -> None:
    from openai.types.responses.response_steer_accepted_event import ResponseSteerAcceptedEvent
    from openai.types.responses.response_steer_failed_event import ResponseSteerFailedEvent
    from openai.types.responses.response_steer_pending_event import ResponseSteerPendingEvent

    kinds: dict[str, type[BaseModel]] = {
        "response.steer.accepted": ResponseSteerAcceptedEvent,
        "response.steer.pending": ResponseSteerPendingEvent,
        "response.steer.failed": ResponseSteerFailedEvent,
    }
    kinds[event["type"]].model_validate(event)


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user turns' texts an upstream request carried (Chat Completions or Anthropic)."""
    texts = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts += [part["text"] for part in content if part.get("type") in ("text", "input_text")]
    return texts


def test_steering_between_the_model_calls_of_a_tool_loop(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str], mcp_server: McpServerProcess
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(upstream, Reply(tool_calls=[call("slow", {"seconds": 1.0}, "c1")]), Reply(text="Turning left."))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=model, input="drive", tools=[adhoc(mcp_server)], stream_id="car")
        events = read_until(ws, seen("response.mcp_call.in_progress"))  # the server tool runs
        steered_id = events[0]["response"]["id"]
        steer(ws, steered_id, "turn left instead")
        events += read_until(ws, terminals(2))
    (accepted,) = [e for e in events if e["type"] == "response.steer.accepted"]
    sdk_parses(accepted)
    assert accepted["stream_id"] == "car" and accepted["steer"]["previous_response_id"] == steered_id
    assert accepted["steer"]["id"].startswith("steer_")
    assert all(e["stream_id"] == "car" for e in events)
    steered, successor = responses(events)
    # The tool call the loop was running finished; the next model call did not happen.
    assert (steered["status"], steered["incomplete_details"]) == ("incomplete", {"reason": "steered"})
    assert [(i["type"], i.get("status")) for i in steered["output"]][-1] == ("mcp_call", "completed")
    # The successor: chained to it, the same settings, the queued input committed.
    assert successor["previous_response_id"] == steered_id and successor["status"] == "completed"
    assert successor["output"][-1]["content"][0]["text"] == "Turning left."
    assert successor["model"] == steered["model"] and successor["tools"] == steered["tools"]
    assert user_texts(scripted.model_calls[-1].body) == ["drive", "turn left instead"]
    stored = gateway.openai().responses.input_items.list(successor["id"])
    assert [item.content[0].text for item in stored.data] == ["turn left instead"]
    again = gateway.openai().responses.retrieve(steered_id)
    assert again.status == "incomplete" and again.incomplete_details.reason == "steered"


def test_steering_a_single_model_call_after_its_current_message(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(
            text="Let me look up the weather for you.", tool_calls=[call("get_weather", {"city": "Oslo"}, "c1")], **SLOW
        ),
        Reply(text="Then Bergen it is."),
    )
    with socket(gateway) as ws:
        send(ws, type="response.create", model=model, input="weather?", tools=[WEATHER], instructions="be brief")
        events = read_until(ws, seen("response.output_text.delta"))
        steer(ws, events[0]["response"]["id"], [{"type": "message", "role": "user", "content": "Bergen, not Oslo"}])
        events += read_until(ws, terminals(2))
    assert "stream_id" not in events[0]  # the default lane
    steered, successor = responses(events)
    assert steered["incomplete_details"] == {"reason": "steered"}
    # It stopped after the message, before the model's tool call: no call is left unanswered.
    assert [(i["type"], i["status"]) for i in steered["output"]] == [("message", "completed")]
    assert steered["output"][0]["content"][0]["text"] == "Let me look up the weather for you."
    assert successor["previous_response_id"] == steered["id"] and successor["instructions"] == "be brief"
    assert successor["output"][0]["content"][0]["text"] == "Then Bergen it is."
    assert user_texts(scripted.model_calls[-1].body) == ["weather?", "Bergen, not Oslo"]


def test_a_response_that_completes_first_is_followed_by_a_successor(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(
        MODEL, Reply(text="a plain answer, told slowly and at some length", **SLOW), Reply(text="and the follow-up")
    )
    with socket(gateway) as ws:  # store: false: the successor continues from the lane's memory
        send(ws, type="response.create", model=MODEL, input="q", stream_id="s", store=False)
        events = read_until(ws, seen("response.output_text.delta"))
        steer(ws, events[0]["response"]["id"], "also this")
        events += read_until(ws, terminals(2))
    first, successor = responses(events)
    assert (
        first["status"] == "completed"
        and first["output"][0]["content"][0]["text"] == "a plain answer, told slowly and at some length"
    )
    assert successor["previous_response_id"] == first["id"]
    assert successor["output"][0]["content"][0]["text"] == "and the follow-up"
    created = [i for i, e in enumerate(events) if e["type"] == "response.created"]
    accepted = next(i for i, e in enumerate(events) if e["type"] == "response.steer.accepted")
    assert created[0] < accepted < created[1]  # accepted, then committed by the successor's created
    assert successor["store"] is False
    messages = scripted.model_calls[-1].body["messages"]
    assert [m["content"] for m in messages] == ["q", "a plain answer, told slowly and at some length", "also this"]


def test_a_continuation_that_carried_pending_input_and_failed_hands_it_back(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("get_weather", {"city": "Oslo, Norway"}, "c1")], **SLOW))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="weather?", tools=[WEATHER])
        events = read_until(ws, seen("response.function_call_arguments.delta"))
        parent = events[0]["response"]["id"]
        steer(ws, parent, "in Celsius")
        events += read_until(ws, seen("response.steer.pending"))
        # An output that answers no call: the continuation is refused before it exists.
        orphan = {"type": "function_call_output", "call_id": "nope", "output": "x"}
        send(ws, type="response.create", model=MODEL, tools=[WEATHER], previous_response_id=parent, input=[orphan])
        refused, failed = read_until(ws, lambda more: len(more) == 2)
    assert (refused["type"], refused["status"]) == ("error", 400)
    accepted = next(e for e in events if e["type"] == "response.steer.accepted")
    assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"] == {"id": accepted["steer"]["id"], "input": "in Celsius", "previous_response_id": parent}


def test_a_response_waiting_for_client_tool_output_keeps_the_input_pending(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[call("get_weather", {"city": "Oslo, Norway, Europe"}, "c1")], **SLOW),
        Reply(text="Sunny in Oslo; and yes, a jacket."),
    )
    with socket(gateway) as ws:
        send(ws, type="response.create", model=model, input="weather?", tools=[WEATHER], stream_id="w")
        events = read_until(ws, seen("response.function_call_arguments.delta"))
        parent = events[0]["response"]["id"]
        steer(ws, parent, "do I need a jacket?")
        events += read_until(ws, seen("response.steer.pending"))
        (first,) = responses(events)
        assert first["status"] == "completed" and first["output"][-1]["type"] == "function_call"
        pending = events[-1]
        sdk_parses(pending)
        assert pending["reason"] == "waiting_for_required_input" and pending["stream_id"] == "w"
        assert pending["required_input"] == [{"type": "function_call_output", "call_id": "c1", "name": "get_weather"}]
        accepted = next(e for e in events if e["type"] == "response.steer.accepted")
        assert pending["steer"] == accepted["steer"] == {"id": accepted["steer"]["id"], "previous_response_id": parent}
        with pytest.raises(TimeoutError):  # no automatic successor: the client owes the output
            ws.recv(timeout=0.5)
        answer = {**pending["required_input"][0], "output": "sunny"}
        answer.pop("name")
        send(
            ws,
            type="response.create",
            model=model,
            tools=[WEATHER],
            previous_response_id=parent,
            input=[answer],
            stream_id="w",
        )
        (second,) = responses(read_until(ws, terminals(1)))
    assert second["previous_response_id"] == parent
    assert second["output"][0]["content"][0]["text"] == "Sunny in Oslo; and yes, a jacket."
    # The queued input went in first, after only the output its call needs right after it.
    assert user_texts(scripted.model_calls[-1].body)[-1] == "do I need a jacket?"
    stored = gateway.openai().responses.input_items.list(second["id"], order="asc")
    assert [item.type for item in stored.data] == ["function_call_output", "message"]


def test_an_approval_request_is_a_required_input_stub(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 1, "b": 2}, "c1")], **SLOW))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="add", tools=[adhoc(mcp_server, require_approval="always")])
        events = read_until(ws, seen("response.output_item.added"))
        steer(ws, events[0]["response"]["id"], "and explain")
        events += read_until(ws, seen("response.steer.pending"))
    (final,) = responses(events)
    (request,) = [i for i in final["output"] if i["type"] == "mcp_approval_request"]
    assert events[-1]["required_input"] == [{"type": "mcp_approval_response", "approval_request_id": request["id"]}]
    sdk_parses(events[-1])


def test_each_failure_code_hands_the_input_back(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    settings.GATEWAY_WS_MAX_PENDING_STEERS = 1
    scripted.enqueue(MODEL, Reply(text="slowly answering " * 4, **SLOW), Reply(text="next"))
    with socket(gateway) as ws:
        steer(ws, "resp_unknown", "hello")
        failed = one(ws)
        assert failed["error"]["code"] == "response_not_found"
        assert failed["steer"] == {"input": "hello", "previous_response_id": "resp_unknown"}  # no id: never accepted
        send(ws, type="response.create", model=MODEL, input="q", stream_id="lane")
        events = read_until(ws, seen("response.output_text.delta"))
        running = events[0]["response"]["id"]
        bad_inputs: list[Any] = [
            "",
            [],
            [{"role": "assistant", "content": "x"}],
            [{"type": "function_call_output", "call_id": "c", "output": "o"}],
            [{"role": "user", "content": "x", "id": "msg_1"}],
            [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
        ]
        for bad in bad_inputs:
            steer(ws, running, bad)
        send(ws, type="response.steer", previous_response_id=running, input="x", stream_id="lane")
        steer(ws, running, "first")
        steer(ws, running, "second")
        events += read_until(ws, terminals(2))
    answers = [e for e in events if e["type"].startswith("response.steer.")]
    for answer in answers:
        assert answer["stream_id"] == "lane"  # the target's lane
    for answer in answers[7:]:  # (an invalid input handed back is not a valid ResponseSteerInput)
        sdk_parses(answer)
    codes = [(a["type"], a.get("error", {}).get("code")) for a in answers]
    assert codes == [("response.steer.failed", "invalid_input")] * 7 + [
        ("response.steer.accepted", None),
        ("response.steer.failed", "too_many_pending_steers"),
    ]
    assert [a["steer"]["input"] for a in answers[:6]] == bad_inputs  # each handed back as sent
    assert answers[-1]["steer"] == {"input": "second", "previous_response_id": running}
    _, successor = responses(of_lane(events, "lane"))
    assert user_texts(scripted.model_calls[-1].body)[-1] == "first"


def test_too_late_and_unsupported_steers_are_refused(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(
        MODEL,
        Reply(text="done"),
        Reply(text="this stream breaks " * 5, disconnect_after=12, **SLOW),
        Reply(text="in a conversation " * 3, **SLOW),
        Reply(text="compacting " * 3, **SLOW),
    )
    conversation = gateway.openai().conversations.create()
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="q")
        (done,) = responses(read_until(ws, terminals(1)))
        steer(ws, done["id"], "late")
        assert one(ws)["error"]["code"] == "response_already_completed"

        send(ws, type="response.create", model=MODEL, input="q")
        events = read_until(ws, seen("response.output_text.delta"))
        steer(ws, events[0]["response"]["id"], "accepted, then lost")
        events += read_until(ws, lambda more: any(e["type"] == "response.steer.failed" for e in more))
        (broken,) = responses([e for e in events if not e["type"].startswith("response.steer.")])
        assert broken["status"] == "failed"
        accepted = next(e for e in events if e["type"] == "response.steer.accepted")
        lost = events[-1]
        assert lost["error"]["code"] == "response_not_active" and lost["steer"]["id"] == accepted["steer"]["id"]
        assert lost["steer"]["input"] == "accepted, then lost"
        steer(ws, broken["id"], "after the failure")
        assert one(ws)["error"]["code"] == "response_not_active"

        for bound in (
            {"conversation": conversation.id},
            {"context_management": [{"type": "compaction", "compact_threshold": 100000}]},
        ):
            send(ws, type="response.create", model=MODEL, input="q", **bound)
            events = read_until(ws, seen("response.output_text.delta"))
            steer(ws, events[0]["response"]["id"], "not here")
            events += read_until(ws, terminals(1))
            refused = next(e for e in events if e["type"] == "response.steer.failed")
            assert refused["error"]["code"] == "steering_not_supported", bound
            sdk_parses(refused)


def test_a_successor_that_cannot_be_created_returns_the_input(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey
    from tests.responses_api.test_rate_limits import key_id, set_limits

    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=1)
    scripted.enqueue(MODEL, Reply(text="the only one this minute, and a slow one", **SLOW))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="q", stream_id="l")
        events = read_until(ws, seen("response.output_text.delta"))
        steer(ws, events[0]["response"]["id"], "more")
        events += read_until(ws, seen("response.steer.failed"))
    (first,) = responses(events)
    refused = next(e for e in events if e["type"] == "error")
    assert (refused["status"], refused["error"]["code"], refused["stream_id"]) == (429, "rate_limit_exceeded", "l")
    accepted, failed = (e for e in events if e["type"].startswith("response.steer."))
    assert failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"] == {"id": accepted["steer"]["id"], "input": "more", "previous_response_id": first["id"]}


def test_the_openai_sdk_connection_steers(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="first words of many more to come", **SLOW), Reply(text="steered answer"))
    events: list[Any] = []
    with gateway.openai().responses.connect() as connection:
        connection.response.create(model=MODEL, input="talk", stream_id="sdk")
        while sum(e.type in ("response.completed", "response.incomplete") for e in events) < 2:
            event = connection.recv()  # the SDK parses every event, the steering ones included
            events.append(event)
            if event.type == "response.created" and len(events) == 1:
                connection.response.steer(input="shorter please", previous_response_id=event.response.id)
    assert {getattr(e, "stream_id", None) for e in events} == {"sdk"}
    kinds = [e.type for e in events]
    assert "response.steer.accepted" in kinds and kinds.count("response.created") == 2
    successor = events[-1].response
    assert successor.previous_response_id == events[0].response.id and successor.output_text == "steered answer"


def test_a_response_run_by_a_worker_takes_no_steering(gateway: Gateway, scripted: ScriptedUpstream, worker) -> None:
    from responses_api.models import ModelRoute
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(run_on_worker=True)
    routing.clear_cache()
    scripted.enqueue(MODEL, Reply(text="from a worker, slowly", **SLOW))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="q", stream_id="bg")
        events = read_until(ws, seen("response.output_text.delta"))
        steer(ws, events[0]["response"]["id"], "faster")
        events += read_until(ws, terminals(1))
    refused = next(e for e in events if e["type"] == "response.steer.failed")
    assert (refused["error"]["code"], refused["stream_id"]) == ("steering_not_supported", "bg")
    assert {e["stream_id"] for e in events} == {"bg"}  # the worker's events, relayed on the lane
    (final,) = responses(events)
    assert final["status"] == "completed"


def test_steering_input_held_by_a_connection_is_bounded_in_bytes(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    settings.GATEWAY_WS_MAX_QUEUED_BYTES = 400
    scripted.enqueue(MODEL, Reply(text="slowly answering " * 4, **SLOW), Reply(text="next"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="q")
        events = read_until(ws, seen("response.output_text.delta"))
        running = events[0]["response"]["id"]
        steer(ws, running, "x" * 200)
        steer(ws, running, "y" * 200)  # the two would hold more than 400 bytes
        events += read_until(ws, terminals(2))
    first, second = (e for e in events if e["type"].startswith("response.steer."))
    assert first["type"] == "response.steer.accepted"
    assert (second["type"], second["error"]["code"]) == ("response.steer.failed", "too_many_pending_steers")
    _, successor = responses(events)
    assert successor["status"] == "completed"  # committed: the bytes are free again
