"""The surface classification on the wire (responses_api/protocol/surface.py): fields a route
accepts without applying are named in `x-gateway-ignored-fields` (HTTP) and on the turn's
access-log line (WebSocket); refused ones and the beta surface are a 400 naming them; the real
`openai` SDK is the client."""

from __future__ import annotations

import json
import time

import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.access_log import Lines
from tests.support.errors import error_body
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import completed, socket

pytestmark = pytest.mark.embedded


def test_fields_a_chat_route_does_not_apply_are_named_in_a_header(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="one"), Reply(text="two"))
    raw = gateway.openai().responses.with_raw_response.create(
        model=MODEL,
        input="hi",
        temperature=0.5,
        prompt_cache_key="k1",
        service_tier="fast",
        context_management=[{"type": "compaction", "compact_threshold": 1000}],
        extra_body={"client_metadata": {"x-codex-turn": "1"}, "sent_by_a_newer_sdk": True},
    )
    assert raw.parse().output_text == "one"
    assert set(raw.headers["x-gateway-ignored-fields"].split(",")) == {
        "prompt_cache_key",
        "service_tier",
        "client_metadata",
        "sent_by_a_newer_sdk",
    }
    sent = scripted.requests[-1].body
    assert sent["temperature"] == 0.5 and "prompt_cache_key" not in sent and "client_metadata" not in sent
    plain = gateway.openai().responses.with_raw_response.create(model=MODEL, input="hi", temperature=0.5)
    assert "x-gateway-ignored-fields" not in plain.headers


def test_a_lane_is_websocket_only(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """Over HTTP `stream_id` is a 400 naming it (tests/websocket/test_lanes.py: the lanes)."""
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "hi", "stream_id": "lane-1"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stream_id"
    assert "WebSocket" in resp.json()["error"]["message"]
    assert scripted.model_calls == []


def test_a_websocket_turn_names_what_it_did_not_apply_on_its_access_line(
    gateway: Gateway, scripted: ScriptedUpstream, access_log: Lines
) -> None:
    scripted.enqueue(MODEL, Reply(text="hello"))
    with socket(gateway) as ws:
        completed(ws, input="hi", stream=True, prompt_cache_key="k1", text={"verbosity": "low"})
    deadline = time.monotonic() + 5  # the line is written once the turn's last event is sent
    while not access_log.websocket_turns() and time.monotonic() < deadline:
        time.sleep(0.02)
    (line,) = access_log.websocket_turns()
    assert line["ignored_fields"] == ["prompt_cache_key", "text.verbosity"]


def test_the_beta_surface_is_a_400_naming_beta(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.beta.responses.create(model=MODEL, input="hi")  # POST /responses?beta=true
    assert error_body(refused.value)["param"] == "beta"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="hi", extra_headers={"openai-beta": "responses_multi_agent=v1"})
    assert gateway.http().get("/v1/responses/resp_1?beta=true").json()["error"]["param"] == "beta"
    assert scripted.model_calls == []
    url = gateway.url.replace("http://", "ws://") + "/v1/responses?beta=true"
    with pytest.raises(InvalidStatus) as denied:
        connect(url, additional_headers={"Authorization": f"Bearer {gateway.key}"}, open_timeout=10)
    assert denied.value.response.status_code == 400
    assert json.loads(denied.value.response.body)["error"]["param"] == "beta"


def test_codexs_own_beta_header_is_not_the_beta_surface(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="fine"))
    response = gateway.openai().responses.create(
        model=MODEL, input="hi", extra_headers={"openai-beta": "responses_websockets=2026-02-06"}
    )
    assert response.output_text == "fine"


def test_chat_completions_fields_a_translated_route_does_not_apply_are_named(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    provider = Provider.objects.create(name="native", kind="responses", base_url=scripted.base_url)
    RouteTarget.objects.create(route=ModelRoute.objects.create(name="native"), provider=provider, upstream_model="up")
    routing.clear_cache()
    scripted.set_default("up", Reply(text="translated"))
    scripted.enqueue(MODEL, Reply(text="as sent"))
    client = gateway.openai()
    messages = [{"role": "user", "content": "hi"}]
    raw = client.chat.completions.with_raw_response.create(model="native", messages=messages, seed=7, stop=["x"])
    assert raw.parse().choices[0].message.content == "translated"
    assert set(raw.headers["x-gateway-ignored-fields"].split(",")) == {"seed", "stop"}
    passed = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, seed=7)
    assert passed.parse().choices[0].message.content == "as sent"
    assert "x-gateway-ignored-fields" not in passed.headers and scripted.requests[-1].body["seed"] == 7
