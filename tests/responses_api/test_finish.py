"""services.response_finish: the terminal state, items and links written together (one statement
on PostgreSQL, the ORM on SQLite), item references linked rather than copied, terminal states kept."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from responses_api.models import Item, Response, ResponseItem
from responses_api.protocol.ids import new_id
from responses_api.store import selectors, services
from tests.support.harness import make_key
from tests.support.items import message_item

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _row(tenant_id: int, rid: str) -> dict:
    return services.response_row(
        response_id=rid,
        tenant_id=tenant_id,
        api_key_id=None,
        previous_response_id=None,
        model="m",
        params={"instructions": "brief", "metadata": {"k": "v"}},
        created_at=datetime.now(UTC),
    )


def _final(rid: str, output: list[dict], status: str = "completed") -> dict:
    return {
        "id": rid,
        "status": status,
        "output": output,
        "completed_at": 1_800_000_000,
        "usage": {
            "input_tokens": 5,
            "output_tokens": 2,
            "input_tokens_details": {"cached_tokens": 1},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
        "error": None,
        "incomplete_details": None,
    }


def test_a_new_row_is_written_with_its_items_in_order(django_assert_max_num_queries) -> None:
    _, tenant_id = make_key()
    rid = new_id("resp")
    inputs = [message_item("user", "one"), message_item("user", "two")]
    outputs = [
        message_item("assistant", "three"),
        {
            "type": "function_call",
            "id": new_id("fc"),
            "call_id": "c1",
            "name": "f",
            "arguments": '{"a": "\\u00e9\\n"}',
            "status": "completed",
        },
    ]
    warm_up = new_id("resp")  # the first write of a process also looks up the item id sequence
    services.response_finish(
        tenant_id=tenant_id, response=_final(warm_up, []), input_items=[], create_row=_row(tenant_id, warm_up)
    )
    budget = 1 if connection.vendor == "postgresql" else 10
    with django_assert_max_num_queries(budget):
        assert services.response_finish(
            tenant_id=tenant_id,
            response=_final(rid, outputs),
            input_items=inputs,
            upstream="p:m",
            latency_ms=12,
            create_row=_row(tenant_id, rid),
        )
    row = Response.objects.get(id=rid)
    assert (row.status, row.input_tokens, row.output_tokens, row.cached_tokens, row.upstream, row.latency_ms) == (
        "completed",
        5,
        2,
        1,
        "p:m",
        12,
    )
    assert row.metadata == {"k": "v"} and row.instructions == "brief" and row.error is None
    assert row.completed_at == datetime.fromtimestamp(1_800_000_000, UTC)
    assert [i.data for i in Item.objects.filter(tenant_id=tenant_id).order_by("id")] == inputs + outputs
    assert ResponseItem.objects.filter(response_id=warm_up).count() == 0
    assert selectors.chain_items_list(response_id=rid) == inputs + outputs
    page = selectors.input_items_page(tenant_id=tenant_id, response_id=rid, after=None, limit=10, order="asc")
    assert [i["id"] for i in page.as_dict()["data"]] == [i["id"] for i in inputs]


def test_an_open_row_is_finished_once_and_a_terminal_state_is_never_left() -> None:
    _, tenant_id = make_key()
    rid = new_id("resp")
    services.response_insert(row=_row(tenant_id, rid), status="in_progress")
    user = [message_item("user", "q")]
    assert services.response_finish(
        tenant_id=tenant_id, response=_final(rid, [message_item("assistant", "a")]), input_items=user
    )
    links = ResponseItem.objects.filter(response_id=rid).count()
    # A late writer (a cancel racing the end) changes nothing, and adds no items.
    assert not services.response_finish(
        tenant_id=tenant_id, response=_final(rid, [], status="cancelled"), input_items=user
    )
    assert Response.objects.get(id=rid).status == "completed"
    assert ResponseItem.objects.filter(response_id=rid).count() == links == 2


def test_a_failure_without_output_is_stored() -> None:
    _, tenant_id = make_key()
    rid = new_id("resp")
    final = _final(rid, [], status="failed") | {"error": {"code": "upstream_error", "message": "boom"}}
    assert services.response_finish(
        tenant_id=tenant_id, response=final, input_items=[message_item("user", "q")], create_row=_row(tenant_id, rid)
    )
    row = Response.objects.get(id=rid)
    assert row.status == "failed" and row.error == {"code": "upstream_error", "message": "boom"}
    assert ResponseItem.objects.filter(response_id=rid, role=1).count() == 0


def test_an_item_reference_links_the_stored_item_instead_of_copying_it() -> None:
    _, tenant_id = make_key()
    first, second = new_id("resp"), new_id("resp")
    answer = message_item("assistant", "stored once")
    services.response_finish(
        tenant_id=tenant_id,
        response=_final(first, [answer]),
        input_items=[message_item("user", "q")],
        create_row=_row(tenant_id, first),
    )
    stored = Item.objects.get(public_id=answer["id"])
    items_before = Item.objects.count()
    inputs = [{"type": "item_reference", "id": answer["id"]}, message_item("user", "follow-up")]
    services.response_finish(
        tenant_id=tenant_id,
        response=_final(second, [message_item("assistant", "ok")]),
        input_items=inputs,
        create_row=_row(tenant_id, second),
    )
    assert Item.objects.count() == items_before + 2  # the follow-up and the answer, not the reference
    first_link = ResponseItem.objects.get(response_id=second, role=0, position=0)
    assert first_link.item_id == stored.id
    assert selectors.chain_items_list(response_id=second)[0] == answer
