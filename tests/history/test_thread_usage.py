"""GET /v1/responses/{id}/thread and GET /v1/usage, and tenant isolation across every history endpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.history.conftest import HistoryApi
from tests.history.factories import T0, make_response, tool_loop_conversation

pytestmark = pytest.mark.embedded


def test_thread_lists_the_whole_chain_in_conversation_order(api: HistoryApi) -> None:
    first, second, third = tool_loop_conversation(api.tenant_id)
    body = api.ok(f"/v1/responses/{third.id}/thread")
    assert body["object"] == "list" and body["has_more"] is False
    entries = body["data"]
    assert [(e["response_id"], e["role"], e["item"]["type"]) for e in entries] == [
        (first.id, "input", "message"),
        (first.id, "output", "reasoning"),
        (first.id, "output", "function_call"),
        (second.id, "input", "function_call_output"),
        (second.id, "output", "function_call"),
        (third.id, "input", "function_call_output"),
        (third.id, "output", "message"),
    ]
    assert all(e["object"] == "response.thread_item" for e in entries)
    assert body["first_id"] == entries[0]["id"] and body["last_id"] == entries[-1]["id"]
    assert entries[0]["item"]["content"][0]["text"].startswith("What's the weather in Paris")
    # a thread stops at the response asked for
    assert len(api.ok(f"/v1/responses/{second.id}/thread")["data"]) == 5
    assert len(api.ok(f"/v1/responses/{first.id}/thread")["data"]) == 3


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_thread_paging_both_ways(api: HistoryApi, order: str) -> None:
    *_, head = tool_loop_conversation(api.tenant_id)
    full = [e["id"] for e in api.ok(f"/v1/responses/{head.id}/thread", {"limit": 100})["data"]]
    seen: list[str] = []
    after = None
    while True:
        params = {"limit": 2, "order": order} | ({"after": after} if after else {})
        body = api.ok(f"/v1/responses/{head.id}/thread", params)
        seen += [e["id"] for e in body["data"]]
        if not body["has_more"]:
            break
        after = body["last_id"]
    assert seen == (full if order == "asc" else full[::-1])
    assert len(seen) == 7


def test_thread_errors(api: HistoryApi) -> None:
    first, _, third = tool_loop_conversation(api.tenant_id)
    path = f"/v1/responses/{third.id}/thread"
    assert api.error(path, {"after": "garbage"})["param"] == "after"
    assert api.error(path, {"after": f"{first.id}:output:99"})["param"] == "after"  # not in this thread
    assert api.error(path, {"limit": 0})["param"] == "limit"
    assert api.error(path, {"order": "sideways"})["param"] == "order"
    assert api.error("/v1/responses/resp_nope/thread", status=404)["param"] == "response_id"
    deleted = make_response(api.tenant_id, previous=third, deleted=True)
    api.error(f"/v1/responses/{deleted.id}/thread", status=404)


def test_usage_per_model_per_day_by_default(api: HistoryApi) -> None:
    t = api.tenant_id
    make_response(t, model="alpha", created_at=T0, input_tokens=100, output_tokens=10)
    make_response(t, model="alpha", created_at=T0 + timedelta(hours=1), input_tokens=50, output_tokens=5)
    make_response(t, model="beta", created_at=T0 + timedelta(days=1), input_tokens=7, output_tokens=3)
    make_response(
        t, model="beta", created_at=T0 + timedelta(days=1), status="failed", input_tokens=None, output_tokens=None
    )
    make_response(
        t, model="beta", created_at=T0 + timedelta(days=1), deleted=True, input_tokens=1, output_tokens=1
    )  # deleted responses still spent their tokens
    make_response(api.other_tenant_id, model="alpha", created_at=T0, input_tokens=1000, output_tokens=1000)

    body = api.ok("/v1/usage")
    assert body["object"] == "list" and body["group_by"] == ["model", "day"]
    assert body["data"] == [
        {
            "object": "usage.bucket",
            "day": "2026-03-01",
            "model": "alpha",
            "requests": 2,
            "input_tokens": 150,
            "output_tokens": 15,
            "total_tokens": 165,
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "cache_write_1h_tokens": 0,
            "cost_usd": 0.0,
        },
        {
            "object": "usage.bucket",
            "day": "2026-03-02",
            "model": "beta",
            "requests": 3,
            "input_tokens": 8,
            "output_tokens": 4,
            "total_tokens": 12,
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "cache_write_1h_tokens": 0,
            "cost_usd": 0.0,
        },
    ]
    by_model = api.ok("/v1/usage", {"group_by": "model"})["data"]
    assert [(r["model"], r["total_tokens"]) for r in by_model] == [("alpha", 165), ("beta", 12)]
    assert "day" not in by_model[0]
    by_day = api.ok("/v1/usage", {"group_by": "day", "start": int(T0.timestamp()) + 7200})["data"]
    assert [(r["day"], r["requests"]) for r in by_day] == [("2026-03-02", 3)]
    until = api.ok("/v1/usage", {"group_by": "model", "end": int(T0.timestamp()) + 1})["data"]
    assert until == [
        {
            "object": "usage.bucket",
            "model": "alpha",
            "requests": 1,
            "input_tokens": 100,
            "output_tokens": 10,
            "total_tokens": 110,
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "cache_write_1h_tokens": 0,
            "cost_usd": 0.0,
        }
    ]
    assert api.ok("/v1/usage", {"model": "beta", "group_by": "model"})["data"][0]["requests"] == 3


def test_usage_costs_cache_reads_and_writes_by_key_model_and_tenant(api: HistoryApi) -> None:
    """Cost is the route's prices times the usage, cache reads and writes included, the same
    figure whatever the grouping; `group_by=key` splits it per API key; CSV has the same rows."""
    from decimal import Decimal

    from responses_api.models import ApiKey, ModelRoute

    t = api.tenant_id
    ModelRoute.objects.create(
        name="claude", input_usd_per_million=Decimal(3), output_usd_per_million=Decimal(15)
    )  # cache reads default to 3, 5-minute writes to 3.75, 1-hour writes to 6
    ModelRoute.objects.create(
        name="gpt", input_usd_per_million=Decimal(2), output_usd_per_million=Decimal(8), cached_input_usd_per_million=1
    )
    acme_key = ApiKey.objects.get(tenant_id=t, name="acme-key")
    from tests.support.harness import make_key

    make_key(tenant="acme", name="second")
    second = ApiKey.objects.get(tenant_id=t, name="second")
    # 1M input: 100k read, 200k written for 5 min, 100k for an hour, 600k plain; 10k output.
    make_response(
        t,
        model="claude",
        created_at=T0,
        input_tokens=1_000_000,
        output_tokens=10_000,
        cached_tokens=100_000,
        cache_write_tokens=300_000,
        cache_write_1h_tokens=100_000,
        api_key_id=acme_key.pk,
    )
    make_response(
        t,
        model="gpt",
        created_at=T0,
        input_tokens=500_000,
        output_tokens=1000,
        cached_tokens=400_000,
        api_key_id=second.pk,
    )
    claude = round(0.6 * 3 + 0.1 * 3 + 0.2 * 3.75 + 0.1 * 6 + 0.01 * 15, 6)  # 3.6
    gpt = round(0.1 * 2 + 0.4 * 1 + 0.001 * 8, 6)  # 0.608

    body = api.ok("/v1/usage", {"group_by": "model"})
    assert [(b["model"], b["cost_usd"]) for b in body["data"]] == [("claude", claude), ("gpt", gpt)]
    assert body["data"][0]["cached_tokens"] == 100_000 and body["data"][0]["cache_write_tokens"] == 300_000
    assert body["total"]["cost_usd"] == round(claude + gpt, 6) and body["total"]["requests"] == 2

    by_key = api.ok("/v1/usage", {"group_by": "key"})["data"]
    assert [(b["key_id"], b["key"], b["cost_usd"]) for b in by_key] == [
        (acme_key.pk, f"acme-key ({acme_key.prefix}…)", claude),
        (second.pk, f"second ({second.prefix}…)", gpt),
    ]
    assert "model" not in by_key[0]
    by_tenant = api.ok("/v1/usage", {"group_by": "tenant"}, key=api.admin_key)["data"]
    assert [(b["tenant"], b["cost_usd"]) for b in by_tenant] == [("acme", round(claude + gpt, 6))]

    reply = api.get("/v1/usage", {"group_by": "key,model", "format": "csv"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/csv")
    lines = reply.text.splitlines()
    assert lines[0] == (
        "model,key_id,key,requests,input_tokens,output_tokens,total_tokens,cached_tokens,"
        "cache_write_tokens,cache_write_1h_tokens,cost_usd"
    )
    assert (
        lines[1]
        == f"claude,{acme_key.pk},acme-key ({acme_key.prefix}…),1,1000000,10000,1010000,100000,300000,100000,{claude}"
    )
    assert len(lines) == 3
    assert api.error("/v1/usage", {"format": "xml"})["param"] == "format"


def test_usage_by_tenant_needs_an_admin_key(api: HistoryApi) -> None:
    make_response(api.tenant_id, input_tokens=10, output_tokens=1)
    make_response(api.other_tenant_id, input_tokens=20, output_tokens=2)
    error = api.error("/v1/usage", {"group_by": "tenant"}, status=403)
    assert error["param"] == "group_by" and error["code"] == "admin_key_required"
    rows = api.ok("/v1/usage", {"group_by": "tenant"}, key=api.admin_key)["data"]
    assert [(r["tenant"], r["total_tokens"]) for r in rows] == [("acme", 11), ("globex", 22)]
    assert api.ok("/v1/usage", {"group_by": "model"}, key=api.admin_key)["data"][0]["total_tokens"] == 33


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"group_by": ""}, "group_by"),
        ({"start": "today"}, "start"),
        ({"end": "x"}, "end"),
        ({"model": ""}, "model"),
    ],
)
def test_usage_invalid_values(api: HistoryApi, params: dict, param: str) -> None:
    assert api.error("/v1/usage", params)["param"] == param


def test_a_bound_past_the_first_or_last_second_is_that_second(api: HistoryApi) -> None:
    """In UTC these are before year 1 and after 9999 (a 500 before): as bounds of a range they
    are the first and the last moment there is."""
    make_response(api.tenant_id, input_tokens=10, output_tokens=1)
    assert api.ok("/v1/usage", {"end": "0001-01-01T00:00:01+01:00"})["data"] == []
    assert api.ok("/v1/usage", {"start": "9999-12-31T23:59:59-01:00"})["data"] == []
    assert len(api.ok("/v1/usage", {"start": "0001-01-01T00:00:01+01:00"})["data"]) == 1


def test_another_tenants_ids_are_never_listed_or_readable(api: HistoryApi) -> None:
    mine = make_response(api.tenant_id, created_at=T0, metadata={"k": "v"})
    theirs = make_response(api.other_tenant_id, created_at=T0 + timedelta(seconds=1), metadata={"k": "v"})
    theirs_next = make_response(api.other_tenant_id, created_at=T0 + timedelta(seconds=2), previous=theirs)

    assert api.ids() == [mine.id]
    assert api.ids({"metadata[k]": "v"}) == [mine.id]
    assert api.ids(key=api.other_key) == [theirs_next.id, theirs.id]
    assert api.ids({"root": theirs.id}) == []
    assert api.ids({"previous_response_id": theirs.id}) == []
    assert api.ids({"q": "hello"}) == [mine.id]
    assert api.error("/v1/responses", {"after": theirs.id})["param"] == "after"
    assert api.error(f"/v1/responses/{theirs_next.id}/thread", status=404)["param"] == "response_id"
    assert api.get(f"/v1/responses/{theirs.id}").status_code == 404
    assert [r["requests"] for r in api.ok("/v1/usage", {"group_by": "model"})["data"]] == [1]

    # an admin key reads every tenant
    assert api.ids(key=api.admin_key) == [theirs_next.id, theirs.id, mine.id]
    assert api.ids({"root": theirs.id}, key=api.admin_key) == [theirs_next.id, theirs.id]
    thread = api.ok(f"/v1/responses/{theirs_next.id}/thread", key=api.admin_key)["data"]
    assert [e["response_id"] for e in thread] == [theirs.id, theirs.id, theirs_next.id, theirs_next.id]
