"""The operator's admin: list query counts, the read-only response pages, conversation and usage views."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from responses_api.models import ModelRoute, Provider, Response, RouteTarget
from tests.history.factories import (
    T0,
    assistant,
    make_response,
    mcp_call,
    reasoning,
    tool_loop_conversation,
    user,
)
from tests.support.harness import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        reply = client.get(url)
    assert reply.status_code == 200, reply.content[:500]
    return len(captured)


def _seed_everything(count: int) -> None:
    _, tenant_id = make_key(tenant=f"tenant-{count}")
    provider = Provider.objects.create(name=f"prov-{count}", base_url="http://127.0.0.1:9/v1")
    for i in range(count):
        make_key(tenant=f"tenant-{count}-{i % 3}", name=f"key-{count}-{i}")
        make_response(tenant_id, model=f"model-{i % 4}", created_at=T0 + timedelta(seconds=i))
        route = ModelRoute.objects.create(name=f"route-{count}-{i}")
        RouteTarget.objects.create(route=route, provider=provider, upstream_model="m", weight=1)
        RouteTarget.objects.create(route=route, provider=provider, upstream_model="m2", weight=0)


@pytest.mark.parametrize("model", ["response", "apikey", "provider", "modelroute", "tenant"])
def test_changelists_do_not_grow_with_rows(admin_client, model: str) -> None:
    url = reverse(f"admin:responses_api_{model}_changelist")
    _seed_everything(3)
    few = _queries(admin_client, url)
    _seed_everything(30)
    many = _queries(admin_client, url)
    assert few == many, f"{model} changelist: {few} queries for a few rows, {many} for many (N+1)"


def test_response_changelist_query_count_is_pinned(admin_client, django_assert_num_queries) -> None:
    _seed_everything(20)
    url = reverse("admin:responses_api_response_changelist")
    admin_client.get(url)  # warm the session
    # session, user, count, rows (with tenant and key joined), model filter choices, tenant filter
    # choices, the price table (the cost column)
    with django_assert_num_queries(7):
        reply = admin_client.get(url)
    body = reply.content.decode()
    assert "model-3" in body and "tenant-20" in body and "chat →" in body


def test_response_changelist_never_loads_the_big_json(admin_client) -> None:
    _seed_everything(3)
    with CaptureQueriesContext(connection) as captured:
        admin_client.get(reverse("admin:responses_api_response_changelist"))
    row_query = next(q["sql"] for q in captured.captured_queries if '"responses_api_response"."latency_ms"' in q["sql"])
    selected = row_query.rsplit(' FROM "responses_api_response" ', 1)[0]  # the outer query's values
    for column in ("params", "job", "error", "metadata", "instructions"):
        # A column may be compared in the database (the kind compares the instructions' end);
        # it is never one of the selected values.
        assert not re.search(rf'"responses_api_response"\."{column}"(,|$)', selected), column
    assert ' AS "_kind"' in selected


def test_filters_and_search(admin_client) -> None:
    _, tenant_id = make_key()
    make_response(tenant_id, model="alpha", status="failed", metadata={"ticket": "T-9001"})
    make_response(tenant_id, model="beta")
    url = reverse("admin:responses_api_response_changelist")
    assert admin_client.get(url, {"status": "failed"}).context["cl"].result_count == 1
    assert admin_client.get(url, {"model": "beta"}).context["cl"].result_count == 1
    assert admin_client.get(url, {"q": "T-9001"}).context["cl"].result_count == 1
    assert admin_client.get(url, {"created_at__gte": "2030-01-01 00:00:00+00:00"}).context["cl"].result_count == 0


def test_response_detail_is_read_only_with_items_in_order_and_chain_links(admin_client) -> None:
    _, tenant_id = make_key()
    first, second, third = tool_loop_conversation(tenant_id)
    url = reverse("admin:responses_api_response_change", args=[quote(second.id)])
    body = admin_client.get(url).content.decode()
    # input then output
    assert body.index("call_weather_1") < body.index("get_forecast")
    assert body.index(">Input<") < body.index(">Output<")
    assert reverse("admin:responses_api_response_change", args=[quote(first.id)]) in body  # previous
    assert reverse("admin:responses_api_response_change", args=[quote(third.id)]) in body  # next
    assert reverse("admin:responses_api_response_conversation", args=[quote(second.id)]) in body
    assert 'name="_save"' not in body  # read-only
    assert admin_client.get(reverse("admin:responses_api_response_add")).status_code == 403
    assert (
        admin_client.post(
            reverse("admin:responses_api_response_delete", args=[quote(first.id)]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_conversation_view_renders_the_whole_thread(admin_client) -> None:
    _, tenant_id = make_key()
    first, second, third = tool_loop_conversation(tenant_id)
    failed = make_response(
        tenant_id,
        previous=third,
        created_at=T0 + timedelta(seconds=9),
        status="failed",
        input=[user("Book me a table")],
        output=[
            reasoning("Try the booking MCP server."),
            mcp_call("bookings", "reserve", {"party": 2}, error="upstream timeout"),
        ],
        error={"code": "server_error", "message": "The upstream failed mid-stream"},
    )
    url = reverse("admin:responses_api_response_conversation", args=[quote(failed.id)])
    body = admin_client.get(url).content.decode()
    for text in (
        "What&#x27;s the weather in Paris",
        "get_weather",
        "&quot;city&quot;: &quot;Paris&quot;",
        "light rain",
        "get_forecast",
        "showers",
        "pack an umbrella",
        "Book me a table",
        "bookings · reserve",
        "upstream timeout",
        "The upstream failed mid-stream",
        "You are a travel assistant",
    ):
        assert text in body, text
    assert body.count('data-item-type="function_call"') == 2
    assert body.count('data-item-type="function_call_output"') == 2
    assert body.count('<details class="gw-reasoning">') == 2  # reasoning folded
    assert body.count('data-response-id="') == 4
    assert 'gw-badge gw-bad">failed' in body
    # order: the chain reads top to bottom
    positions = [body.index(f'data-response-id="{r.id}"') for r in (first, second, third, failed)]
    assert positions == sorted(positions)


def test_conversation_view_queries_are_constant(admin_client) -> None:
    _, tenant_id = make_key()
    heads = []
    for length in (2, 25):
        previous = None
        for turn in range(length):
            previous = make_response(
                tenant_id,
                previous=previous,
                created_at=T0 + timedelta(seconds=turn),
                input=[user(f"q{turn}")],
                output=[assistant(f"a{turn}")],
            )
        assert previous is not None
        heads.append(previous)
    counts = [
        _queries(admin_client, reverse("admin:responses_api_response_conversation", args=[quote(h.id)])) for h in heads
    ]
    assert counts[0] == counts[1]
    detail = [_queries(admin_client, reverse("admin:responses_api_response_change", args=[quote(h.id)])) for h in heads]
    assert detail[0] == detail[1]


def test_usage_page_draws_tokens_per_day_per_model(admin_client) -> None:
    _, tenant_id = make_key()
    _, other = make_key(tenant="other")
    now = timezone.now()
    make_response(tenant_id, model="alpha", created_at=now - timedelta(days=2), input_tokens=1200, output_tokens=300)
    make_response(tenant_id, model="beta", created_at=now - timedelta(days=1), input_tokens=400, output_tokens=100)
    make_response(other, model="alpha", created_at=now, input_tokens=10, output_tokens=10)
    url = reverse("admin:responses_api_response_usage")
    body = admin_client.get(url).content.decode()
    assert body.count('class="gw-bar"') == 3
    assert "<svg" in body and "alpha" in body and "beta" in body
    assert "1,520" in body  # alpha total tokens (both tenants)
    only = admin_client.get(url, {"tenant": tenant_id, "days": 7}).content.decode()
    assert only.count('class="gw-bar"') == 2
    assert (
        reverse("admin:responses_api_response_usage")
        in admin_client.get(reverse("admin:responses_api_response_changelist")).content.decode()
    )


def test_soft_delete_action_hides_responses(admin_client) -> None:
    _, tenant_id = make_key()
    row = make_response(tenant_id)
    reply = admin_client.post(
        reverse("admin:responses_api_response_changelist"),
        {"action": "soft_delete", "_selected_action": [row.id]},
        follow=True,
    )
    assert "Deleted 1 response" in reply.content.decode()
    assert Response.objects.get(id=row.id).deleted_at is not None
