"""WebSocket lanes (`stream_id`, openai SDK 3.57 `ResponseCreate.stream_id`) with a real client
through uvicorn, over a Chat Completions and an Anthropic upstream: creates of one lane run first
in, first out; lanes run concurrently on one connection; a lane may fork from another's response;
every event of a lane's response echoes its stream_id."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Pacing, Reply, ScriptedUpstream
from tests.websocket.lanes import TERMINAL, of_lane, read_until, responses, send, terminals
from tests.websocket.test_websocket_mode import socket

pytestmark = pytest.mark.embedded


def test_two_lanes_run_concurrently_and_echo_their_stream_id(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    model, upstream = upstream_model
    slow: Pacing = {"chunk_chars": 2, "interval": 0.05}
    scripted.enqueue(
        upstream, Reply(text="alpha beta gamma " * 3, **slow), Reply(text="delta epsilon zeta " * 3, **slow)
    )
    with socket(gateway) as ws:
        send(ws, type="response.create", model=model, input="one", stream_id="agent-a")
        send(ws, type="response.create", model=model, input="two", stream_id="agent.b_2")
        events = read_until(ws, terminals(2))
    assert {e.get("stream_id") for e in events} == {"agent-a", "agent.b_2"}  # every event says its lane
    a, b = of_lane(events, "agent-a"), of_lane(events, "agent.b_2")
    (first_a,), (first_b,) = responses(a), responses(b)
    assert first_a["status"] == first_b["status"] == "completed"
    assert {first_a["output"][0]["content"][0]["text"], first_b["output"][0]["content"][0]["text"]} == {
        "alpha beta gamma " * 3,
        "delta epsilon zeta " * 3,
    }
    # Truly concurrent: both lanes streamed text before either ended.
    first_end = next(i for i, e in enumerate(events) if e["type"] in TERMINAL)
    lanes_with_text = {e["stream_id"] for e in events[:first_end] if e["type"] == "response.output_text.delta"}
    assert lanes_with_text == {"agent-a", "agent.b_2"}


def test_one_lane_runs_its_creates_first_in_first_out(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    scripted.enqueue(MODEL, Reply(text="slow first", chunk_chars=2, interval=0.05), Reply(text="second"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="a", stream_id="lane")
        send(ws, type="response.create", model=MODEL, input="b", stream_id="lane")
        events = read_until(ws, terminals(2))
    assert {e["stream_id"] for e in events} == {"lane"}
    first, second = responses(events)  # one after the other: never interleaved
    assert (first["output"][0]["content"][0]["text"], second["output"][0]["content"][0]["text"]) == (
        "slow first",
        "second",
    )
    assert "stream_id" not in first  # WebSocket envelope only: the Response is HTTP's
    # One access-log line per response, naming its lane.
    deadline = time.monotonic() + 5  # each line is written just after its terminal event is sent
    while len(access_log.websocket_turns()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    lines = [(line["stream_id"], line["response_id"]) for line in access_log.websocket_turns()]
    assert lines == [("lane", first["id"]), ("lane", second["id"])]


def test_a_lane_forks_from_another_lanes_store_false_response(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    model, upstream = upstream_model
    scripted.enqueue(upstream, Reply(text="base answer"), Reply(text="fork answer"), Reply(text="main again"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=model, input="start", store=False, stream_id="main")
        (base,) = responses(read_until(ws, terminals(1)))
        common = {"type": "response.create", "model": model, "store": False, "previous_response_id": base["id"]}
        send(ws, **common, input="fork it", stream_id="fork")
        (fork,) = responses(read_until(ws, terminals(1)))
        # The fork did not take the source lane's memory: main still continues from base.
        send(ws, **common, input="go on", stream_id="main")
        (main,) = responses(read_until(ws, terminals(1)))
    assert fork["previous_response_id"] == main["previous_response_id"] == base["id"]
    assert (fork["status"], main["status"]) == ("completed", "completed")
    texts = [str(request.body) for request in scripted.model_calls[-2:]]
    assert all("start" in text and "base answer" in text for text in texts)  # the context, from memory


def test_a_failed_fork_evicts_the_parent_only_in_its_lane(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="base"), Reply(status=500), Reply(text="main goes on"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="start", store=False, stream_id="main")
        (base,) = responses(read_until(ws, terminals(1)))
        common = {"type": "response.create", "model": MODEL, "store": False, "previous_response_id": base["id"]}
        send(ws, **common, input="fork", stream_id="fork")
        (failed,) = read_until(ws, lambda events: bool(events))
        assert (failed["type"], failed["status"], failed["stream_id"]) == ("error", 502, "fork")
        send(ws, **common, input="fork again", stream_id="fork")
        (again,) = read_until(ws, lambda events: bool(events))
        assert (again["error"]["code"], again["stream_id"]) == ("previous_response_not_found", "fork")
        send(ws, **common, input="go on", stream_id="main")
        (main,) = responses(read_until(ws, terminals(1)))
    assert main["output"][0]["content"][0]["text"] == "main goes on"


def test_named_lanes_are_limited_and_checked(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    settings.GATEWAY_WS_MAX_STREAMS = 2
    scripted.set_default(MODEL, Reply(text="ok"))
    with socket(gateway) as ws:
        for stream_id in ("s1", "s2", None, "s1"):  # the default lane does not count
            lane = {"stream_id": stream_id} if stream_id else {}
            send(ws, type="response.create", model=MODEL, input="hi", **lane)
            (final,) = responses(read_until(ws, terminals(1)))
            assert final["status"] == "completed"
        send(ws, type="response.create", model=MODEL, input="hi", stream_id="s3")
        (refused,) = read_until(ws, lambda events: bool(events))
        assert refused["status"] == 400 and refused["stream_id"] == "s3"
        assert (refused["error"]["code"], refused["error"]["param"]) == ("websocket_stream_limit_reached", "stream_id")
        for bad in ("has space", "", "x" * 257, 7):
            send(ws, type="response.create", model=MODEL, input="hi", stream_id=bad)
            (invalid,) = read_until(ws, lambda events: bool(events))
            assert (invalid["status"], invalid["error"]["code"]) == (400, "invalid_stream_id")
            assert "stream_id" not in invalid  # not a lane
        send(ws, type="response.create", model=MODEL, input="still open", stream_id="s2")
        assert responses(read_until(ws, terminals(1)))[0]["status"] == "completed"


def test_active_responses_are_limited_and_the_rest_wait(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    settings.GATEWAY_WS_MAX_ACTIVE_RESPONSES = 1
    scripted.enqueue(MODEL, Reply(text="first of all", chunk_chars=2, interval=0.03), Reply(text="then me"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="a", stream_id="a")
        send(ws, type="response.create", model=MODEL, input="b", stream_id="b")
        events = read_until(ws, terminals(2))
    first_end = next(i for i, e in enumerate(events) if e["type"] in TERMINAL)
    assert {e["stream_id"] for e in events[: first_end + 1]} == {"a"}  # b waited for the slot
    assert [r["status"] for r in responses(events)] == ["completed", "completed"]


def test_the_queue_bounds_count_creates_waiting_in_every_lane(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    settings.GATEWAY_WS_MAX_ACTIVE_RESPONSES = 1
    settings.GATEWAY_WS_MAX_QUEUED_MESSAGES = 2
    scripted.enqueue(MODEL, Reply(text="slow " * 20, chunk_chars=5, interval=0.1))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="go", stream_id="running")
        read_until(ws, lambda events: any(e["type"] == "response.created" for e in events))
        for lane in ("b", "c", "d", "e"):
            send(ws, type="response.create", model="no-such-model", input="x", stream_id=lane)
        events = read_until(ws, terminals(1))
        events += read_until(ws, lambda more: len(more) == 2)  # the two queued ones, answered in turn
    refusals = [e for e in events if e["type"] == "error" and e["error"]["code"] == "websocket_queue_full"]
    assert [e["stream_id"] for e in refusals] == ["d", "e"]  # each on the lane of the create it refused
    answered = [e for e in events if e["type"] == "error" and e["error"]["code"] != "websocket_queue_full"]
    assert [(e["status"], e["stream_id"]) for e in answered] == [(404, "b"), (404, "c")]


def test_each_lanes_response_takes_its_own_concurrency_slot(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """Rate limits and concurrency count per response, as on HTTP: with one concurrent request
    allowed, a second lane's create while the first runs is refused (429, on its lane)."""
    from responses_api.models import ApiKey
    from tests.responses_api.test_rate_limits import key_id, set_limits

    set_limits(ApiKey, key_id(gateway.key), max_concurrent_requests=1)
    scripted.enqueue(MODEL, Reply(text="holding the slot", chunk_chars=2, interval=0.05), Reply(text="after"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="a", stream_id="a")
        events = read_until(ws, lambda events: any(e["type"] == "response.output_text.delta" for e in events))
        send(ws, type="response.create", model=MODEL, input="b", stream_id="b")
        events += read_until(ws, lambda more: any(e.get("stream_id") == "b" for e in more))
        refused = next(e for e in events if e.get("stream_id") == "b")
        assert (refused["type"], refused["status"], refused["error"]["code"]) == ("error", 429, "rate_limit_exceeded")
        events += read_until(ws, terminals(1))
        assert responses(of_lane(events, "a"))[0]["status"] == "completed"


def test_the_openai_sdk_session_runs_two_lanes_at_once(
    gateway: Gateway, scripted: ScriptedUpstream, upstream_model: tuple[str, str]
) -> None:
    import openai
    from openai.lib.responses_websocket import AsyncResponsesWebSocketSession, ResponsesWebSocketLimits

    model, upstream = upstream_model
    slow: Pacing = {"chunk_chars": 3, "interval": 0.02}
    scripted.enqueue(upstream, Reply(text="from one lane", **slow), Reply(text="from one lane", **slow))
    limits = ResponsesWebSocketLimits(
        max_lanes=4, max_events_per_lane=1000, max_events=2000, max_bytes_per_lane=2**24, max_bytes=2**25
    )

    async def run() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
        async with (
            client.responses.connect() as connection,
            AsyncResponsesWebSocketSession(connection, limits=limits) as session,
        ):
            lanes = [session.lane("planner"), session.lane("coder")]
            for lane in lanes:
                await lane.send({"type": "response.create", "model": model, "input": "hi"})
            return list(await asyncio.gather(*(lane.get_final_response() for lane in lanes)))

    finals = asyncio.run(run())
    assert [r.status for r in finals] == ["completed", "completed"]
    assert [r.output_text for r in finals] == ["from one lane", "from one lane"]
    assert finals[0].id != finals[1].id


def test_a_burst_on_as_many_lanes_as_allowed_runs_whole(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    """The documented limits together (16 responses at once, 16 creates waiting, 32 named lanes):
    34 creates on 34 lanes in one burst, sent faster than the lanes start, run 32 to completion;
    the 2 past the lane limit are refused as such, each on its own lane."""
    settings.GATEWAY_WS_MAX_ACTIVE_RESPONSES = 16
    settings.GATEWAY_WS_MAX_QUEUED_MESSAGES = 16
    settings.GATEWAY_WS_MAX_STREAMS = 32
    scripted.set_default(MODEL, Reply(text="a lane's answer", chunk_chars=4, interval=0.02))
    lanes = [f"lane-{n}" for n in range(34)]
    with socket(gateway) as ws:
        for stream_id in lanes:
            send(ws, type="response.create", model=MODEL, input="hi", stream_id=stream_id)
        events = read_until(
            ws, lambda events: sum(e["type"] in TERMINAL or "status" in e for e in events) >= 34, timeout=60
        )
    refusals = [e for e in events if e["type"] == "error" and "status" in e]
    assert [(e["error"]["code"], e["stream_id"]) for e in refusals] == [
        ("websocket_stream_limit_reached", "lane-32"),
        ("websocket_stream_limit_reached", "lane-33"),
    ]
    finals = {lane: responses(of_lane(events, lane)) for lane in lanes[:32]}
    assert all(len(f) == 1 and f[0]["status"] == "completed" for f in finals.values())


def test_every_refusal_frame_names_the_lane_of_the_create_it_refused(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    """Refused before it is parsed (too large, not JSON, the queue full), a create's error frame
    still carries its stream_id, read without parsing; when it cannot be told, the message says so."""
    import json

    settings.GATEWAY_MAX_REQUEST_BYTES = 4000
    settings.GATEWAY_WS_MAX_ACTIVE_RESPONSES = 1
    settings.GATEWAY_WS_MAX_QUEUED_MESSAGES = 1
    scripted.enqueue(MODEL, Reply(text="slow " * 40, chunk_chars=5, interval=0.1))

    def refusal(ws: Any) -> dict[str, Any]:
        events = read_until(ws, lambda events: any(e["type"] == "error" and "status" in e for e in events))
        return events[-1]  # (the running response's events may come before it)

    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="x" * 5000, stream_id="big")
        big = refusal(ws)
        assert (big["error"]["code"], big["stream_id"]) == ("request_too_large", "big")
        ws.send('{"type": "response.create", "stream_id": "broken", "input": ')
        broken = refusal(ws)
        assert (broken["status"], broken["stream_id"]) == (400, "broken")
        send(ws, type="response.create", model=MODEL, input="go", stream_id="running")
        read_until(ws, lambda events: any(e["type"] == "response.created" for e in events))
        send(ws, type="response.create", model="no-such-model", input="x", stream_id="waiting")  # queued
        ws.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": MODEL,
                    "input": "x",
                    "stream_id": "mine",
                    "metadata": {"stream_id": "theirs"},
                }
            )
        )
        unreadable = refusal(ws)
        assert unreadable["error"]["code"] == "websocket_queue_full" and "stream_id" not in unreadable
        assert "stream_id could not be read" in unreadable["error"]["message"]
        send(ws, type="response.create", model=MODEL, input="x", stream_id="running")
        full = refusal(ws)
        assert (full["error"]["code"], full["stream_id"]) == ("websocket_queue_full", "running")
        read_until(ws, terminals(1))  # the running response ends before the socket closes
