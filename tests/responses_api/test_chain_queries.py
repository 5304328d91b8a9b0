"""Rebuilding a previous_response_id chain costs a constant number of queries, whatever its length."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from responses_api.protocol.ids import new_id
from responses_api.store import services
from tests.support.harness import make_key
from tests.support.items import message_item

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def build_chain(tenant_id: int, length: int) -> str:
    """Store `length` chained turns directly through the services (one user + one assistant item each)."""
    previous = None
    for turn in range(length):
        rid = new_id("resp")
        user = message_item("user", f"question {turn}")
        services.response_begin(
            tenant_id=tenant_id,
            api_key_id=None,
            response_id=rid,
            created_at=datetime.now(UTC),
            model="m",
            previous_response_id=None,
            input_items=[user],
            params={},
            status="in_progress",
            store=True,
        )
        from responses_api.models import Response

        Response.objects.filter(id=rid).update(previous_response_id=previous)
        services.response_finish(
            tenant_id=tenant_id,
            response={
                "id": rid,
                "status": "completed",
                "output": [message_item("assistant", f"answer {turn}")],
                "usage": None,
                "completed_at": None,
            },
            input_items=[user],
        )
        previous = rid
    assert previous is not None
    return previous


@pytest.mark.parametrize("length", [1, 50, 300])
def test_chain_context_query_count_is_constant(length: int, django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    _, tenant_id = make_key()
    head = build_chain(tenant_id, length)
    new_input = [message_item("user", "next")]
    # chain head check + chain items (recursive CTE) + insert of the new open row
    with django_assert_num_queries(3):
        begin = services.response_begin(
            tenant_id=tenant_id,
            api_key_id=None,
            response_id=new_id("resp"),
            created_at=datetime.now(UTC),
            model="m",
            previous_response_id=head,
            input_items=new_input,
            params={},
            status="in_progress",
            store=True,
        )
    texts = [item["content"][0]["text"] for item in begin.context]
    expected = [t for turn in range(length) for t in (f"question {turn}", f"answer {turn}")] + ["next"]
    assert texts == expected
