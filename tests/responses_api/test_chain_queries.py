"""Rebuilding a previous_response_id chain costs a constant number of queries, whatever its length."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.ids import new_id
from responses_api.store import selectors, services
from tests.support.harness import make_key
from tests.support.items import message_item

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def build_chain(tenant_id: int, length: int) -> str:
    """Store `length` chained turns directly through the services (one user + one assistant item each)."""
    previous = None
    for turn in range(length):
        rid = new_id("resp")
        user = message_item("user", f"question {turn}")
        services.response_insert(
            row=services.response_row(
                response_id=rid,
                tenant_id=tenant_id,
                api_key_id=None,
                previous_response_id=None,
                model="m",
                params={},
                created_at=datetime.now(UTC),
            ),
            status="in_progress",
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
def test_chain_context_query_count_is_constant(length: int, django_assert_num_queries) -> None:
    _, tenant_id = make_key()
    head = build_chain(tenant_id, length)
    new_input = [message_item("user", "next")]
    # chain head check + chain items (recursive CTE)
    with django_assert_num_queries(2):
        context = selectors.context_get(
            tenant_id=tenant_id, previous_response_id=head, conversation_id=None, input_items=new_input
        )
    texts = [item["content"][0]["text"] for item in context]
    expected = [t for turn in range(length) for t in (f"question {turn}", f"answer {turn}")] + ["next"]
    assert texts == expected


@pytest.mark.parametrize("length", [1, 300])
def test_a_worker_job_is_created_with_its_chain_checked_not_read(length: int, django_assert_num_queries) -> None:
    """The row a worker will run: the chain's head checked, then the insert; the worker reads the
    context itself when the run starts."""
    from responses_api.models import Response

    _, tenant_id = make_key()
    head = build_chain(tenant_id, length)
    rid = new_id("resp")
    row = services.response_row(
        response_id=rid,
        tenant_id=tenant_id,
        api_key_id=None,
        previous_response_id=head,
        model="m",
        params={},
        created_at=datetime.now(UTC),
        job={"body": {}, "input_items": []},
    )
    with django_assert_num_queries(2):
        services.response_create(row=row, status="queued", input_items=[message_item("user", "next")])
    assert Response.objects.get(id=rid).status == "queued"
    Response.objects.filter(id=head).update(status="in_progress")
    with pytest.raises(InvalidRequest) as refused:
        services.response_create(row=row | {"id": new_id("resp")}, status="queued", input_items=[])
    assert refused.value.code == "previous_response_in_progress"
