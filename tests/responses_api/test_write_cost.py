"""What PostgreSQL does for a stored create (bench/README.md, "PostgreSQL CPU per stored create"):
one statement per non-streaming create, two per streamed one, no transaction block around them,
the indexes written per row, and the lookups that the dropped indexes served still served by one.

PostgreSQL only (the statements are its own; SQLite runs the ORM path)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from responses_api.models import Item, Response, ResponseItem
from responses_api.orchestration import liveness
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream


class Statements:
    """Every statement any psycopg cursor of this process sends (the gateway runs in a thread of
    this process): Django's (sync) and the async pool's (the event loop's writes)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (sync | async, SQL)
        self._lock = threading.Lock()

    def record(self, kind: str, query: Any) -> None:
        sql = query if isinstance(query, str) else query.as_string(None) if hasattr(query, "as_string") else str(query)
        with self._lock:
            self.sent.append((kind, " ".join(sql.split())))

    def clear(self) -> None:
        with self._lock:
            self.sent.clear()


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[Statements]:
    seen = Statements()
    sync_execute, async_execute = psycopg.Cursor.execute, psycopg.AsyncCursor.execute

    def execute(self, query, params=None, **kwargs):
        seen.record("sync", query)
        return sync_execute(self, query, params, **kwargs)

    async def aexecute(self, query, params=None, **kwargs):
        seen.record("async", query)
        return await async_execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", aexecute)

    # The web process's beat and reaper run on their own clock: not part of a create.
    async def no_beat() -> None:
        return None

    async def no_reap() -> int:
        return 0

    monkeypatch.setattr(liveness, "beat_once", no_beat)
    monkeypatch.setattr(liveness, "reap_stale", no_reap)
    yield seen


def _create(gateway: Gateway, scripted: ScriptedUpstream, *, stream: bool) -> str:
    scripted.enqueue(MODEL, Reply(text="Hello there"))
    client = gateway.openai()
    if not stream:
        return client.responses.create(model=MODEL, input="Say hello").id
    with client.responses.create(model=MODEL, input="Say hello", stream=True) as events:
        ended = [e for e in events if e.type == "response.completed"]
    return ended[0].response.id


def _stored(response_id: str) -> None:
    row = Response.objects.get(id=response_id)
    assert row.status == "completed"
    links = list(ResponseItem.objects.filter(response_id=response_id).order_by("role", "position"))
    assert [link.role for link in links] == [ResponseItem.Role.INPUT, ResponseItem.Role.OUTPUT]
    assert Item.objects.get(id=links[1].item_id).data["content"][0]["text"] == "Hello there"


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (False, ["WITH resp AS (INSERT INTO"]),  # the row, its items and their links, at the end
        (True, ["INSERT INTO", "WITH resp AS (UPDATE"]),  # the open row at the start, then the end
    ],
)
def test_a_stored_create_is_one_statement_per_write(
    gateway: Gateway, scripted: ScriptedUpstream, statements: Statements, stream: bool, expected: list[str]
) -> None:
    """Each write is one statement on the event loop's pool, in autocommit (atomic by itself, no
    BEGIN/COMMIT round trips, no savepoints, no SELECT before it). Adding a statement back to the
    create path fails here."""
    _create(gateway, scripted, stream=stream)  # caches (key, route) and the item sequence's name
    statements.clear()
    ids = [_create(gateway, scripted, stream=stream) for _ in range(3)]
    sent = list(statements.sent)
    assert [kind for kind, _ in sent] == ["async"] * len(expected) * 3, sent
    for n, (_, sql) in enumerate(sent):
        assert sql.startswith(expected[n % len(expected)]), sql
    for response_id in ids:
        _stored(response_id)  # committed before the answer: visible to this connection now


# The indexes each stored create writes an entry in (per row). One more is a cost on every
# create: add it here only with the query it serves (and bench/pg_statements.py's figures).
WRITTEN_INDEXES = {
    Response: {
        "responses_api_response_pkey",
        "resp_tenant_created",
        "resp_hist_tenant_status",
        "resp_hist_tenant_model",
        "resp_hist_metadata_gin",
        "resp_previous",
        "resp_conversation",
        "resp_status",
        "resp_model",
        "responses_api_response_api_key_id_a060d9d3",
        "responses_api_response_created_at_ac7feca7",
    },
    Item: {"responses_api_item_pkey", "item_tenant_public_id", "item_hist_text_search"},
    ResponseItem: {
        "responses_api_responseitem_pkey",
        "response_item_slot",
        "responses_api_responseitem_item_id_7b121d30",
    },
}


@pytest.mark.django_db
def test_the_tables_a_create_writes_have_only_the_indexes_queries_use() -> None:
    with connection.cursor() as cursor:
        for model, expected in WRITTEN_INDEXES.items():
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [model._meta.db_table])
            assert {row[0] for row in cursor.fetchall()} == expected, model.__name__


def _plan(sql: str, params: list[Any]) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # an index is usable, whatever the table's size
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db(transaction=False)
def test_lookups_by_public_id_are_served_by_an_index() -> None:
    """Item references (store selectors, the finish statement) and a conversation's or a
    response's item by id (conversations, input_items' `after`) filter on the tenant too."""
    from responses_api.models import ConversationItem

    by_reference = Item.objects.filter(tenant_id=1, public_id__in=["msg_1"]).order_by("id")
    in_conversation = ConversationItem.objects.filter(
        conversation_id="conv_1", item__tenant_id=1, item__public_id="msg_1"
    ).order_by("position")
    sql, params = by_reference.query.sql_with_params()
    assert "item_tenant_public_id" in _plan(sql, list(params))
    # Through the conversation's links or the (tenant, public id) index, as the planner likes;
    # never by reading every item.
    sql, params = in_conversation.query.sql_with_params()
    plan = _plan(sql, list(params))
    assert "Seq Scan" not in plan, plan
