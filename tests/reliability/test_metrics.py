"""/metrics: not public by default, and counting what happened."""

from __future__ import annotations

import re

import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if not match:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_metrics_need_a_configured_token(gateway: Gateway, settings) -> None:
    import httpx

    settings.GATEWAY_METRICS_TOKEN = ""
    assert httpx.get(f"{gateway.url}/metrics").status_code == 404
    settings.GATEWAY_METRICS_TOKEN = "scrape-secret-123"
    assert httpx.get(f"{gateway.url}/metrics").status_code == 401
    assert httpx.get(f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {gateway.key}"}).status_code == 401
    assert httpx.get(f"{gateway.url}/metrics", headers={"Authorization": "Bearer scrape-secret-123"}).status_code == 200


def test_requests_tokens_streams_and_errors_are_counted(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    import httpx

    settings.GATEWAY_METRICS_TOKEN = "scrape-secret-123"

    def scrape() -> str:
        resp = httpx.get(f"{gateway.url}/metrics", headers={"Authorization": "Bearer scrape-secret-123"})
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        return resp.text

    before = scrape()
    scripted.enqueue(MODEL, Reply(text="one two three"), Reply(text="streamed words"), Reply(status=500))
    client = gateway.openai()
    created = client.responses.create(model=MODEL, input="hi")
    list(client.responses.create(model=MODEL, input="hi", stream=True))
    failed = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "x"})
    assert failed.status_code == 502
    gateway.http().post("/v1/responses", json={"model": "no-such-model", "input": "x"})
    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("gateway_requests_total", route="v1/responses", model=MODEL, status="200") == 2
    assert delta("gateway_requests_total", route="v1/responses", model=MODEL, status="502") == 1
    assert delta("gateway_requests_total", route="v1/responses", model="", status="404") == 1  # no client-typed label
    assert "no-such-model" not in after
    assert delta("gateway_tokens_total", model=MODEL, kind="output") >= created.usage.output_tokens
    assert delta("gateway_time_to_first_byte_seconds_count", model=MODEL) == 1
    assert delta("gateway_request_duration_seconds_count", route="v1/responses") == 4
    assert delta("gateway_upstream_errors_total", target=f"scripted:{MODEL}") == 1
    assert value(after, "gateway_open_streams") == 0
    assert "gateway_background_queued" in after and "gateway_worker_heartbeat_age_seconds" in after


def test_without_a_token_request_metrics_are_not_kept(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    """/metrics is a 404 without a token: a request's figures would cost CPU for nobody."""
    from responses_api.observability.metrics import REQUESTS

    def count() -> float:
        return REQUESTS.labels("v1/responses", MODEL, "200")._value.get()

    settings.GATEWAY_METRICS_TOKEN = ""
    before = count()
    scripted.enqueue(MODEL, Reply(text="not counted"), Reply(text="counted"))
    client = gateway.openai()
    client.responses.create(model=MODEL, input="hi")
    assert count() == before
    settings.GATEWAY_METRICS_TOKEN = "scrape-secret-123"
    client.responses.create(model=MODEL, input="hi")
    assert count() == before + 1
