"""WebSocket mode of /v1/responses with a real WebSocket client (the `websockets` library)
through uvicorn: every message sequence checked by the strict stream validator."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.support.harness import MODEL, Gateway, call
from tests.support.stream_validator import validate_events
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


@contextmanager
def socket(gateway: Gateway, key: str | None = None) -> Iterator[ClientConnection]:
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    ws = connect(
        url, additional_headers={"Authorization": f"Bearer {key or gateway.key}"}, open_timeout=10, max_size=None
    )
    with ws:  # (`with connect(...) as ws` types ws as the base Connection)
        yield ws


def turn(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    """Send one response.create; the messages up to the terminal event or an error envelope."""
    ws.send(json.dumps({"type": "response.create", **body}))
    events = []
    while True:
        event = json.loads(ws.recv(timeout=30))
        events.append(event)
        if event["type"] in TERMINAL or (event["type"] == "error" and "status" in event):
            return events


def completed(ws: ClientConnection, **body: Any) -> dict[str, Any]:
    events = turn(ws, model=MODEL, **body)
    final = validate_events(events)
    assert final["status"] == "completed", final
    return final


def test_sequential_responses_on_one_socket_carry_the_sse_events(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="first answer"), Reply(text="second answer"))
    with socket(gateway) as ws:
        first = completed(ws, input="one")
        second = completed(ws, input="two", previous_response_id=first["id"])
    assert first["output"][0]["content"][0]["text"] == "first answer"
    assert second["previous_response_id"] == first["id"]
    # The continuation sent the upstream the whole context, read from the socket's memory.
    messages = scripted.requests[-1].body["messages"]
    assert [m["content"] for m in messages if m["role"] in ("user", "assistant")] == ["one", "first answer", "two"]
    # Both stored like HTTP ones, chain included.
    again = gateway.openai().responses.retrieve(second["id"])
    assert again.output_text == "second answer" and again.previous_response_id == first["id"]


def test_messages_sent_while_a_response_runs_wait_their_turn(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="slow one", chunk_chars=2, interval=0.05), Reply(text="next"))
    with socket(gateway) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "a"}))
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "b"}))
        events: list[dict[str, Any]] = []
        while sum(e["type"] in TERMINAL for e in events) < 2:
            events.append(json.loads(ws.recv(timeout=30)))
    split = next(i for i, e in enumerate(events) if e["type"] in TERMINAL) + 1
    first, second = validate_events(events[:split]), validate_events(events[split:])  # never interleaved
    assert (first["output"][0]["content"][0]["text"], second["output"][0]["content"][0]["text"]) == ("slow one", "next")


def test_store_false_chains_continue_on_the_socket_only(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("lookup", {"q": "x"}, "c1")]), Reply(text="found it"))
    tool = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    with socket(gateway) as ws:
        first = completed(ws, input="find x", store=False, tools=[tool])
        assert first["output"][-1]["type"] == "function_call"
        second = completed(
            ws,
            previous_response_id=first["id"],
            store=False,
            tools=[tool],
            input=[{"type": "function_call_output", "call_id": "c1", "output": "x=1"}],
        )
        assert second["output"][0]["content"][0]["text"] == "found it"
    messages = scripted.requests[-1].body["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "x=1"}
    # Nothing was stored, and a new connection (or HTTP) cannot continue it.
    with socket(gateway) as ws:
        events = turn(ws, model=MODEL, input="more", previous_response_id=second["id"])
    assert events == [
        {
            "type": "error",
            "status": 400,
            "error": {
                "type": "invalid_request_error",
                "code": "previous_response_not_found",
                "message": events[0]["error"]["message"],
                "param": "previous_response_id",
            },
        }
    ]


def test_an_older_stored_response_is_hydrated_from_the_database(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="stored answer"), Reply(text="other"), Reply(text="resumed"))
    with socket(gateway) as ws:
        stored = completed(ws, input="remember me")
    with socket(gateway) as ws:  # a reconnect: the new socket knows nothing yet
        completed(ws, input="unrelated")
        resumed = completed(ws, input="and now?", previous_response_id=stored["id"])
    assert resumed["output"][0]["content"][0]["text"] == "resumed"
    contents = [m["content"] for m in scripted.requests[-1].body["messages"]]
    assert contents == ["remember me", "stored answer", "and now?"]


def test_a_failed_continuation_evicts_the_id_and_the_connection_stays_open(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(text="base"), Reply(status=500), Reply(text="fresh"))
    with socket(gateway) as ws:
        base = completed(ws, input="start", store=False)
        failed = turn(ws, model=MODEL, input="next", previous_response_id=base["id"], store=False)
        assert failed[-1]["type"] == "error" and failed[-1]["status"] == 502
        again = turn(ws, model=MODEL, input="retry", previous_response_id=base["id"], store=False)
        assert again[-1]["error"]["code"] == "previous_response_not_found"
        fresh = completed(ws, input="new start")  # still open, still serving
    assert fresh["output"][0]["content"][0]["text"] == "fresh"


def test_bad_messages_get_an_error_and_the_connection_stays_open(gateway: Gateway) -> None:
    # `stream`, `stream_options` and `background`: tests/websocket/test_client_frames.py.
    with socket(gateway) as ws:
        ws.send("{not json")
        bad = json.loads(ws.recv(timeout=10))
        assert bad["type"] == "error" and bad["status"] == 400 and "not valid JSON" in bad["error"]["message"]
        ws.send(json.dumps({"type": "response.cancel"}))
        assert json.loads(ws.recv(timeout=10))["error"]["param"] == "type"


def test_authentication_happens_at_the_handshake(gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    for headers in ({}, {"Authorization": "Bearer sk-gw-wrong"}):
        with pytest.raises(InvalidStatus) as info:
            connect(url, additional_headers=headers, open_timeout=10)
        assert info.value.response.status_code == 401
        assert json.loads(info.value.response.body)["error"]["code"] == "invalid_api_key"
    with pytest.raises(InvalidStatus):
        connect(
            gateway.url.replace("http://", "ws://") + "/v1/models",
            open_timeout=10,
            additional_headers={"Authorization": f"Bearer {gateway.key}"},
        )
    # A refused handshake is the client's business: no ERROR line for operators (uvicorn
    # writes one after every refusal unless the gateway says it was deliberate).
    time.sleep(0.2)  # uvicorn logs after the application returned, in the server's thread
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("change", ["expired", "revoked", "regenerated"])
def test_a_key_that_stops_authenticating_ends_the_connection_at_the_next_create(
    gateway: Gateway, scripted: ScriptedUpstream, change: str
) -> None:
    """The key is looked up again for each create, as over HTTP: a key that expires is refused at
    once, a revoked or regenerated one once the key cache (GATEWAY_CACHE_SECONDS) lets it go;
    the create gets the handshake's 401 as an error frame, then the connection closes."""
    import dataclasses

    from responses_api.api import auth
    from responses_api.models import ApiKey
    from responses_api.store.services import api_key_regenerate, api_key_revoke, hash_key
    from tests.support.harness import make_key

    raw, _ = make_key(name="ws-key")
    key = ApiKey.objects.get(secret_hash=hash_key(raw))
    scripted.enqueue(MODEL, Reply(text="while valid"))
    with socket(gateway, raw) as ws:
        completed(ws, input="one")
        if change == "expired":  # the entry stays cached, its expiry now behind it
            cached = auth.cached_principal(raw)
            assert cached is not None
            auth._cache.put(hash_key(raw), dataclasses.replace(cached, expires_at=time.time() - 1))
        else:
            api_key_revoke(key=key) if change == "revoked" else api_key_regenerate(key=key)
            auth.clear_cache()  # GATEWAY_CACHE_SECONDS passed
        events = turn(ws, model=MODEL, input="two")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    with pytest.raises(InvalidStatus) as refused, socket(gateway, raw):  # the handshake's answer to it now
        pass
    body = json.loads(refused.value.response.body)
    assert events == [{"type": "error", "status": 401, "error": {**body["error"], "param": None}}]
    assert body["error"]["code"] == ("api_key_expired" if change == "expired" else "invalid_api_key")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert len(scripted.model_calls) == 1  # the refused create reached no upstream


def test_each_create_gets_the_keys_current_settings(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """A change to the key (here: the models it may use) reaches an open connection's next create
    once the key cache lets it go, and a refusal that is not about the key keeps it open."""
    from responses_api.api import auth
    from responses_api.models import ApiKey
    from responses_api.store.services import hash_key

    scripted.enqueue(MODEL, Reply(text="allowed"), Reply(text="allowed again"))
    with socket(gateway) as ws:
        completed(ws, input="one")
        ApiKey.objects.filter(secret_hash=hash_key(gateway.key)).update(allowed_models=["another-model"])
        auth.clear_cache()
        events = turn(ws, model=MODEL, input="two")
        assert [(e["type"], e["status"], e["error"]["code"]) for e in events] == [("error", 404, "model_not_found")]
        ApiKey.objects.filter(secret_hash=hash_key(gateway.key)).update(allowed_models=[])
        auth.clear_cache()
        completed(ws, input="three")


def test_a_client_that_closes_mid_response_cancels_it(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="word " * 200, chunk_chars=5, interval=0.05))
    with socket(gateway) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "talk"}))
        seen: list[dict[str, Any]] = []
        while sum(e["type"] == "response.output_text.delta" for e in seen) < 3:
            seen.append(json.loads(ws.recv(timeout=30)))
    response_id = seen[0]["response"]["id"]
    deadline = time.monotonic() + 10
    while Response.objects.get(id=response_id).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.1)
    row = Response.objects.get(id=response_id)
    assert row.status == "cancelled"
    aborted = scripted.aborted
    assert aborted, "the upstream request was not closed"


def test_the_connection_limit_and_idle_time(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    settings.GATEWAY_WS_MAX_SECONDS = 1.5
    scripted.enqueue(MODEL, Reply(text="in time"))
    with socket(gateway) as ws:
        completed(ws, input="quick")
        envelope = json.loads(ws.recv(timeout=10))
        assert envelope["type"] == "error" and envelope["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    settings.GATEWAY_WS_MAX_SECONDS = 3600
    settings.GATEWAY_WS_IDLE_SECONDS = 0.5
    with socket(gateway) as ws:
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "websocket_idle_timeout"


def test_connections_per_key_are_limited(gateway: Gateway, settings) -> None:
    settings.GATEWAY_WS_MAX_CONNECTIONS_PER_KEY = 2
    with socket(gateway), socket(gateway):
        with pytest.raises(InvalidStatus) as info, socket(gateway):
            pass
        assert info.value.response.status_code == 429
    with socket(gateway):  # released when closed
        pass


def test_a_flood_behind_a_running_turn_is_refused_past_the_queue_bounds(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    """150 messages of 1 MiB behind a running turn: the connection keeps reading (a close would
    still be seen), queues at most GATEWAY_WS_MAX_QUEUED_MESSAGES / _BYTES, refuses the rest with
    a named 429, and the process does not grow by the flood (on 75d8303: by 158 MiB)."""
    import os

    def rss() -> int:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    settings.GATEWAY_WS_MAX_QUEUED_MESSAGES = 16
    settings.GATEWAY_WS_MAX_QUEUED_BYTES = 16 * 1024 * 1024
    scripted.enqueue(MODEL, Reply(text="slow " * 120, chunk_chars=5, interval=0.25))  # 30 s
    frame = json.dumps({"type": "response.create", "model": "no-such-model", "input": "x" * (1024 * 1024)})
    with socket(gateway) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "go"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "response.created"
        before = rss()
        for _ in range(150):
            ws.send(frame)
        events: list[dict[str, Any]] = []

        def count(code: str) -> int:
            return sum(e["type"] == "error" and e["error"]["code"] == code for e in events)

        while count("websocket_queue_full") < 150 - 16:
            events.append(json.loads(ws.recv(timeout=30)))
        grown = rss() - before
        assert not any(e["type"] in TERMINAL for e in events)  # the running turn was still running
    # Closing still cancels the running turn at once, the queue full behind it.
    assert scripted.wait_aborted(timeout=5), "the upstream request was not closed"
    refusals = [e for e in events if e["type"] == "error" and e["error"]["code"] == "websocket_queue_full"]
    assert len(refusals) == 134
    assert {(e["status"], e["headers"]["retry-after"]) for e in refusals} == {(429, "1")}
    assert grown < 80 * 1024 * 1024, f"the process grew by {grown / 2**20:.0f} MiB"
