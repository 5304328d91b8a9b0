"""Cache writes counted on every upstream kind: `usage.input_tokens_details.cache_write_tokens`
from Anthropic's `cache_creation_input_tokens` (its 1-hour part kept on the row and the usage
record, not shown), from a native Responses upstream's own count and buckets, and from a Chat
Completions upstream's `prompt_tokens_details.cache_write_tokens`; stored, read back, and on the
usage record of a `store: false` response."""

from __future__ import annotations

import pytest

from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

ANTHROPIC_USAGE = {
    "input_tokens": 10,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 200,
    "cache_creation": {"ephemeral_5m_input_tokens": 150, "ephemeral_1h_input_tokens": 50},
    "output_tokens": 3,
}


def _usage_records(server) -> list:
    from responses_api.models import UsageRecord
    from responses_api.store.usage import usage_writer

    server.call(usage_writer.flush())  # written in batches: now
    return list(UsageRecord.objects.filter(endpoint=UsageRecord.Endpoint.UNSTORED_RESPONSE))


def test_anthropic_cache_writes_are_counted_stored_and_recorded(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
    gateway_server,
) -> None:
    from responses_api.models import Response

    scripted.set_default("claude-up", Reply(text="Cached.", usage=ANTHROPIC_USAGE))
    client = anthropic.openai()
    response = client.responses.create(model=CLAUDE, input="hi")
    assert response.usage is not None
    details = response.usage.input_tokens_details
    assert (response.usage.input_tokens, details.cached_tokens, details.cache_write_tokens) == (310, 100, 200)
    assert details.cache_write_tokens_details is None  # Anthropic's 5m/1h are not the SDK's buckets
    row = Response.objects.get(id=response.id)
    assert (row.cached_tokens, row.cache_write_tokens, row.cache_write_1h_tokens) == (100, 200, 50)
    stored = anthropic.http().get(f"/v1/responses/{response.id}").json()
    assert stored["usage"]["input_tokens_details"] == {"cached_tokens": 100, "cache_write_tokens": 200}

    with anthropic.http() as http:  # streamed: the same counts on the terminal event
        raw = http.post("/v1/responses", json={"model": CLAUDE, "input": "hi", "stream": True}).content
    assert validate_sse(raw)["usage"]["input_tokens_details"]["cache_write_tokens"] == 200

    unstored = client.responses.create(model=CLAUDE, input="hi", store=False)
    assert unstored.status == "completed"
    (record,) = _usage_records(gateway_server)
    assert (record.input_tokens, record.cached_tokens, record.cache_write_tokens, record.cache_write_1h_tokens) == (
        310,
        100,
        200,
        50,
    )


def test_native_responses_cache_writes_and_their_buckets_pass_on(
    native: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import Response

    inputs = {
        "cached_tokens": 5,
        "cache_write_tokens": 40,
        "cache_write_tokens_details": {"ttl_30m_tokens": 30, "ttl_12h_tokens": 10},
    }
    scripted.set_default(
        "up-native", Reply(text="ok", usage={"input_tokens": 50, "output_tokens": 1, "input_tokens_details": inputs})
    )
    response = native.openai().responses.create(model=NATIVE, input="hi")
    assert response.usage is not None
    details = response.usage.input_tokens_details
    assert details.cache_write_tokens == 40 and details.cache_write_tokens_details is not None
    assert (details.cache_write_tokens_details.ttl_30m_tokens, details.cache_write_tokens_details.ttl_12h_tokens) == (
        30,
        10,
    )
    row = Response.objects.get(id=response.id)
    assert (row.cached_tokens, row.cache_write_tokens, row.cache_write_1h_tokens) == (5, 40, 0)


def test_chat_completions_cache_writes_are_counted(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    usage = {
        "prompt_tokens": 90,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 20},
    }
    scripted.set_default(MODEL, Reply(text="ok", usage=usage))
    response = gateway.openai().responses.create(model=MODEL, input="hi")
    assert response.usage is not None and response.usage.input_tokens_details.cache_write_tokens == 20


def test_a_native_upstreams_cache_diagnostics_and_tool_usage_are_passed_on(
    native: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    """openai 3.4x's `prompt_cache_diagnostics` and `tool_usage`, as a native Responses upstream
    reports them, reach the client (streamed and not); a response without them has neither."""
    diagnostics = {"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 120}
    usage = {"web_search": {"num_requests": 2}}
    fields = {"prompt_cache_diagnostics": diagnostics, "tool_usage": usage}
    scripted.enqueue("up-native", Reply(text="ok", response_fields=fields), Reply(text="ok", response_fields=fields))
    response = native.openai().responses.create(model=NATIVE, input="hi")
    assert response.prompt_cache_diagnostics is not None and response.prompt_cache_diagnostics.type == "cache_miss"
    assert response.tool_usage is not None and response.tool_usage.web_search is not None
    assert response.tool_usage.web_search.num_requests == 2
    with native.http() as http:
        raw = http.post("/v1/responses", json={"model": NATIVE, "input": "hi", "stream": True}).content
    final = validate_sse(raw)
    assert (final["prompt_cache_diagnostics"], final["tool_usage"]) == (diagnostics, usage)
    scripted.enqueue("up-native", Reply(text="plain"))
    plain = native.openai().responses.create(model=NATIVE, input="hi")
    assert plain.prompt_cache_diagnostics is None and plain.tool_usage is None
