"""/v1 on Django REST framework: every endpoint is a DRF view dispatched on the event loop,
with the protocol's parsing, rendering and error body."""

from __future__ import annotations

import json

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def _v1_routes(patterns: list, prefix: str = "") -> list[tuple[str, object]]:
    routes: list[tuple[str, object]] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            routes += _v1_routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            routes.append((prefix + str(pattern.pattern), pattern.callback))
    return [(route, callback) for route, callback in routes if route.startswith("v1/")]


def test_every_v1_endpoint_is_a_drf_view_served_by_the_fast_lane() -> None:
    from responses_api.api.drf import ApiView
    from responses_api.api.drf_policies import (
        ApiKeyHeaderAuthentication,
        BearerKeyAuthentication,
        HasApiKey,
        KeyOrStaffSessionAuthentication,
    )

    # The history's read endpoints also take a staff session on GET/HEAD (tests/history/test_staff_browsing.py).
    browsable = {"v1/responses", "v1/responses/<str:response_id>/thread", "v1/usage"}
    # What Anthropic's clients call take their key header too (`x-api-key`; api/messages_views.py).
    anthropic = {"v1/messages", "v1/messages/count_tokens", "v1/models", "v1/models/<path:model>"}
    views = {}
    for route, callback in _v1_routes(get_resolver().url_patterns):
        if route in ("v1/^.*$", "v1/openapi.json", "v1/docs", "v1/docs/redoc.standalone.js"):
            continue  # the unknown-URL answer and the public API documentation
        view = getattr(callback, "cls", None)
        assert view is not None and issubclass(view, ApiView), route
        views[route] = view
        assert getattr(callback, "fast_lane", False), route
        expected = (
            KeyOrStaffSessionAuthentication
            if route in browsable
            else ApiKeyHeaderAuthentication
            if route in anthropic
            else BearerKeyAuthentication
        )
        assert view.authentication_classes == (expected,), route
        assert HasApiKey in view.permission_classes
    assert "v1/responses" in views and "v1/conversations/<str:conversation_id>/items" in views


def test_a_body_is_json_whatever_its_label_and_however_it_is_sent(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default(MODEL, Reply(text="hello"))
    body = json.dumps({"model": MODEL, "input": "hi"}).encode()
    with gateway.http() as http:
        unlabelled = http.post("/v1/responses", content=body, headers={"content-type": ""})
        form_label = http.post(  # what `curl -d` sends
            "/v1/responses", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
        )
        chunked = http.post("/v1/responses", content=iter([body[:10], body[10:]]))
        event_stream_accept = http.post(
            "/v1/responses", json={"model": MODEL, "input": "hi"}, headers={"accept": "text/event-stream"}
        )
    for r in (unlabelled, form_label, chunked, event_stream_accept):
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        assert r.json()["status"] == "completed"


def test_drf_errors_have_the_protocols_body(gateway: Gateway) -> None:
    with gateway.http() as http:
        wrong_method = http.put("/v1/responses", json={})
        options = http.options("/v1/models")
        bad_json = http.post("/v1/responses", content=b'{"model": ', headers={"content-type": "application/json"})
        too_deep = http.post("/v1/responses", content=b"[" * 5000 + b"]" * 5000)
        no_key = http.get("/v1/models", headers={"authorization": ""})
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"] == {
        "message": "Method PUT not allowed.",
        "type": "invalid_request_error",
        "param": None,
        "code": "method_not_allowed",
    }
    assert set(wrong_method.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    assert options.status_code == 405 and options.json()["error"]["code"] == "method_not_allowed"
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    assert too_deep.status_code == 400 and "at most" in too_deep.json()["error"]["message"]
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "invalid_api_key"


def test_a_throttle_class_plugs_into_the_async_dispatch(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Operators' own DRF policies (here a throttle, async or plain) run in the same dispatch."""
    from responses_api.api import views

    class OnePerKey:
        seen: set[int] = set()

        async def allow_request(self, request, view) -> bool:
            key = request.user.key_id
            if key in self.seen:
                return False
            self.seen.add(key)
            return True

        def wait(self) -> float:
            return 7.0

    monkeypatch.setattr(views.ModelsView, "throttle_classes", (OnePerKey,))
    with gateway.http() as http:
        first = http.get("/v1/models")
        second = http.get("/v1/models")
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.json()["error"]["type"] == "rate_limit_error"
    assert second.json()["error"]["code"] == "throttled"
    assert second.headers["retry-after"] == "7"
