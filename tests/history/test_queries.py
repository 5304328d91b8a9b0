"""History selectors cost a constant number of queries, whatever the page or chain size (no N+1)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from responses_api.history import selectors
from responses_api.history.selectors import ResponseFilters
from tests.history.factories import T0, assistant, make_response, user
from tests.support.harness import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _seed(tenant_id: int, count: int) -> list:
    """`count` chained responses, one second apart."""
    rows: list = []
    for i in range(count):
        rows.append(
            make_response(
                tenant_id,
                created_at=T0 + timedelta(seconds=i),
                metadata={"batch": "a"},
                previous=rows[-1] if rows else None,
                output=[assistant(f"answer {i}"), assistant(f"more {i}")],
            )
        )
    return rows


@pytest.mark.parametrize("count", [3, 40])
def test_list_page_is_two_queries(count: int, django_assert_num_queries) -> None:
    _, tenant_id = make_key()
    _seed(tenant_id, count)
    # page rows + output items of the whole page
    with django_assert_num_queries(2):
        page = selectors.response_list_page(
            tenant_id=tenant_id, filters=ResponseFilters(), after=None, limit=20, order="desc"
        )
    assert len(page.data) == min(count, 20)
    assert all(len(r["output"]) == 2 for r in page.data)


def test_list_page_with_cursor_and_every_filter_is_constant(django_assert_num_queries) -> None:
    _, tenant_id = make_key()
    rows = _seed(tenant_id, 10)
    filters = ResponseFilters(
        model="test-model",
        status=("completed",),
        created_after=T0,
        created_before=T0 + timedelta(days=1),
        metadata=(("batch", "a"),),
        root=rows[0].id,
        q="hello",
    )
    # anchor of `after` + page rows + output items (+ the `q` probe on the GIN index, PostgreSQL)
    with django_assert_num_queries(4 if connection.vendor == "postgresql" else 3):
        page = selectors.response_list_page(
            tenant_id=tenant_id, filters=filters, after=rows[5].id, limit=3, order="desc"
        )
    assert [r["id"] for r in page.data] == [rows[4].id, rows[3].id, rows[2].id]


def test_empty_page_is_one_query(django_assert_num_queries) -> None:
    _, tenant_id = make_key()
    with django_assert_num_queries(1):
        page = selectors.response_list_page(
            tenant_id=tenant_id, filters=ResponseFilters(), after=None, limit=20, order="desc"
        )
    assert page.data == [] and not page.has_more


@pytest.mark.parametrize("length", [3, 60])
def test_thread_page_is_two_queries(length: int, django_assert_num_queries) -> None:
    _, tenant_id = make_key()
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
    # head visibility + the page (recursive CTE)
    with django_assert_num_queries(2):
        page = selectors.thread_page(tenant_id=tenant_id, response_id=previous.id, after=None, limit=100, order="asc")
    assert len(page.data) == min(2 * length, 100)
    with django_assert_num_queries(2):
        selectors.thread_page(
            tenant_id=tenant_id, response_id=previous.id, after=page.data[3]["id"], limit=10, order="asc"
        )


def test_usage_is_three_queries(django_assert_num_queries) -> None:
    _, tenant_id = make_key()
    _seed(tenant_id, 5)
    for group_by in (("model", "day"), ("tenant",), ("model",), ("day",), ("key", "model")):
        with django_assert_num_queries(3):  # responses, passed-through calls, the price table
            selectors.usage_summary(tenant_id=None, group_by=group_by)


def test_admin_conversation_selectors_are_constant(django_assert_num_queries) -> None:
    _, tenant_id = make_key()
    previous = None
    for turn in range(25):
        previous = make_response(tenant_id, previous=previous, created_at=T0 + timedelta(seconds=turn))
    assert previous is not None
    with django_assert_num_queries(1):
        chain = selectors.chain_responses(response_id=previous.id)
    with django_assert_num_queries(1):
        entries = selectors.thread_entries(response_id=previous.id)
    assert len(chain) == 25 and len(entries) == 50
    assert [r.id for r in chain][-1] == previous.id


@pytest.mark.parametrize("probe_limit", [1000, 1])
def test_search_gives_the_same_page_whether_matches_are_few_or_many(probe_limit: int, monkeypatch) -> None:
    """`q` on PostgreSQL takes the GIN-first path for few matches and the newest-first scan for many."""
    monkeypatch.setattr(selectors, "SEARCH_PROBE_LIMIT", probe_limit)
    _, tenant_id = make_key()
    _, other = make_key(tenant="other")
    rows = [
        make_response(
            tenant_id, created_at=T0 + timedelta(seconds=i), input=[user("penguins" if i % 2 else "walruses")]
        )
        for i in range(8)
    ]
    make_response(other, created_at=T0 + timedelta(seconds=99), input=[user("penguins")])
    page = selectors.response_list_page(
        tenant_id=tenant_id, filters=ResponseFilters(q="penguins"), after=None, limit=3, order="desc"
    )
    assert [r["id"] for r in page.data] == [rows[7].id, rows[5].id, rows[3].id] and page.has_more
