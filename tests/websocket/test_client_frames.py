"""WebSocket mode as OpenAI's own clients speak it: `stream: true` on every frame (Codex, the
Agents SDK), Codex's warm-up (`generate: false`), a `response.steer` after its response ended,
and each turn observed like an HTTP request (access log, metrics)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_events
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import completed, socket, turn

pytestmark = pytest.mark.embedded


def test_stream_true_and_stream_options_are_accepted_as_codex_sends_them(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(text="hello"))
    with socket(gateway) as ws:
        final = completed(ws, input="hi", stream=True, stream_options={"include_obfuscation": False}, background=False)
    assert final["output"][0]["content"][0]["text"] == "hello"


@pytest.mark.parametrize(("field", "value"), [("stream", False), ("background", True)])
def test_what_contradicts_the_socket_is_refused_naming_the_field(gateway: Gateway, field: str, value: bool) -> None:
    with socket(gateway) as ws:
        events = turn(ws, model=MODEL, input="x", **{field: value})
        assert events == [
            {
                "type": "error",
                "status": 400,
                "error": {
                    "type": "invalid_request_error",
                    "code": "invalid_request",
                    "message": events[0]["error"]["message"],
                    "param": field,
                },
            }
        ]


def test_an_unknown_message_type_is_named_and_the_connection_stays_open(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.enqueue(MODEL, Reply(text="still here"))
    with socket(gateway) as ws:
        ws.send(json.dumps({"type": "response.cancel"}))
        error = json.loads(ws.recv(timeout=10))
        assert (error["status"], error["error"]["param"]) == (400, "type")
        assert "'response.cancel'" in error["error"]["message"]
        assert completed(ws, input="hi")["output"][0]["content"][0]["text"] == "still here"


def test_a_steer_after_the_response_ended_is_handed_back(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="base"))
    with socket(gateway) as ws:
        base = completed(ws, input="start")
        steer = {"type": "response.steer", "previous_response_id": base["id"], "input": "go left"}
        ws.send(json.dumps(steer))
        failed = json.loads(ws.recv(timeout=10))
    assert failed["type"] == "response.steer.failed"
    assert failed["error"]["code"] == "response_already_completed"
    assert failed["error"]["type"] == "invalid_request_error"
    assert failed["steer"] == {"input": "go left", "previous_response_id": base["id"]}
    from openai.types.responses.response_steer_failed_event import ResponseSteerFailedEvent

    ResponseSteerFailedEvent.model_validate(failed)  # the newest SDK parses it


def test_a_warm_up_calls_no_model_and_is_the_context_of_the_next_turn(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="answered"))
    with socket(gateway) as ws:
        events = turn(ws, model=MODEL, input="the context", instructions="be brief", generate=False, stream=True)
        warm = validate_events(events)
        assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.completed"]
        assert warm["output"] == [] and warm["status"] == "completed"
        usage = warm["usage"]
        assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (0, 0, 0)
        assert scripted.model_calls == []  # no upstream call
        nxt = completed(ws, input="the question", previous_response_id=warm["id"])
    assert nxt["output"][0]["content"][0]["text"] == "answered"
    (request,) = scripted.model_calls
    assert [m["content"] for m in request.body["messages"] if m["role"] == "user"] == ["the context", "the question"]
    row = Response.objects.get(id=warm["id"])
    assert (row.status, row.input_tokens, row.output_tokens) == ("completed", 0, 0)


def test_a_cache_prewarm_is_a_warm_up_too(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    with socket(gateway) as ws:
        events = turn(ws, model=MODEL, input="x", prompt_cache_options={"prewarm": True}, store=False)
    assert validate_events(events)["output"] == []
    assert scripted.model_calls == []


def test_a_warm_up_takes_one_request_and_no_tokens(gateway: Gateway, scripted: ScriptedUpstream, fresh_limits) -> None:
    from responses_api.models import ApiKey
    from tests.responses_api.test_rate_limits import key_id, set_limits

    key, _ = make_key(tenant="warm")
    set_limits(ApiKey, key_id(key), requests_per_minute=2, tokens_per_minute=50)
    with socket(gateway, key) as ws:
        for _ in range(2):
            completed(ws, input="a long context " * 200, generate=False)  # far more than 50 tokens
        refused = turn(ws, model=MODEL, input="x", generate=False)
    assert refused[-1]["status"] == 429 and "requests per minute" in refused[-1]["error"]["message"]
    assert scripted.model_calls == []


def test_each_turn_has_an_access_line_and_request_metrics(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    access_log: Lines,
    settings,
) -> None:
    from prometheus_client import REGISTRY

    settings.GATEWAY_METRICS_TOKEN = "scrape-secret-ws"  # request metrics are kept only when readable

    from responses_api.api.websocket import WEBSOCKET_ROUTE
    from responses_api.observability.metrics import REQUESTS

    def count(status: str, model: str = MODEL) -> float:
        return REQUESTS.labels(WEBSOCKET_ROUTE, model, status)._value.get()

    before_ok, before_bad = count("200"), count("400", "")
    scripted.enqueue(MODEL, Reply(text="fine"))
    with socket(gateway) as ws:
        good = completed(ws, input="hi")
        turn(ws, model=MODEL, input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}])
        opened = REGISTRY.get_sample_value("gateway_open_websockets")
        assert opened is not None and opened >= 1
    lines = access_log.websocket_turns()
    ok = next(line for line in lines if line.get("response_id") == good["id"])
    assert (ok["status"], ok["model"], ok["response_status"]) == (200, MODEL, "completed")
    assert ok["input_tokens"] == good["usage"]["input_tokens"] and ok["first_byte_ms"] is not None
    bad = next(line for line in lines if line["status"] == 400)
    assert (bad["error_code"], bad["error_param"]) == ("invalid_request", "input[0].call_id")
    # As over HTTP, a model label only for a turn that reached a route and ran.
    assert count("200") == before_ok + 1 and count("400", "") == before_bad + 1


CODEX_171_HEADERS = {
    "originator": "codex_cli_rs",
    "version": "0.171.0",
    "session_id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
    "x-codex-window-id": "w-1",
    "x-codex-installation-id": "inst-1",
    "x-codex-turn-metadata": '{"turn_id":"t-1"}',
    "x-codex-beta-features": "remote_compaction_v2",
    "x-codex-root-turn-id": "t-1",
    "x-codex-inference-call-id": "call-1",
    "x-codex-routing-hint": "incremental",
    "x-openai-subagent": "review",
}


def test_a_codex_0171_frame_with_request_country_is_served_and_its_fields_classified(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    """Codex 0.171's `response.create` (its `request_country` field, after `client_metadata` and
    `access_programs`) over a handshake with its `x-codex-*` headers: served; the field is in the
    surface table (announced on the turn's access-log line), and so is each header."""
    from websockets.sync.client import connect

    from responses_api.protocol import surface

    scripted.enqueue(MODEL, Reply(text="from codex"))
    frame = {
        "type": "response.create",
        "model": MODEL,
        "instructions": "You are Codex.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
        "stream": True,
        "include": [],
        "prompt_cache_key": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "client_metadata": {"x-codex-turn-metadata": '{"turn_id":"t-1"}'},
        "request_country": "US",
    }
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {gateway.key}", **CODEX_171_HEADERS}
    with connect(url, additional_headers=headers, open_timeout=10) as ws:
        ws.send(json.dumps(frame))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(json.loads(ws.recv(timeout=30)))
    final = validate_events(events)
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "from codex"
    assert "request_country" not in scripted.model_calls[-1].body  # sent to no upstream
    assert surface.REQUEST_FIELDS["request_country"].treatment is surface.Treatment.ANNOUNCED
    assert set(CODEX_171_HEADERS) <= set(surface.CLIENT_HEADERS)
    import time

    deadline = time.monotonic() + 5  # the line is written just after the terminal event is sent
    while not access_log.websocket_turns() and time.monotonic() < deadline:
        time.sleep(0.02)
    (line,) = [line for line in access_log.websocket_turns() if line.get("response_id") == final["id"]]
    assert "request_country" in line["ignored_fields"]
