"""Concurrent responses on one conversation (real PostgreSQL), and the cost of reading one."""

from __future__ import annotations

import concurrent.futures

import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream


def test_concurrent_responses_append_whole_turns_in_finishing_order(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    client = gateway.openai()
    conv = client.conversations.create()
    scripted.set_default(MODEL, Reply(echo=True, chunk_chars=3))
    n = 12

    def one(i: int) -> str:
        return gateway.openai().responses.create(model=MODEL, input=f"q{i}", conversation=conv.id).id

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        ids = list(pool.map(one, range(n)))
    items = list(client.conversations.items.list(conv.id, order="asc", limit=100).data)
    assert len(items) == 2 * n  # nothing lost
    texts = [item.content[0].text for item in items]
    # Every turn is whole: its question directly followed by its own answer.
    for k in range(0, 2 * n, 2):
        question = texts[k]
        assert question.startswith("q") and texts[k + 1] == "echo: " + question
    assert sorted(texts[::2]) == sorted(f"q{i}" for i in range(n))
    assert len(set(ids)) == n


def test_reading_a_conversation_is_a_constant_number_of_queries(gateway: Gateway) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from responses_api.conversations import services
    from responses_api.store import selectors as store_selectors

    counts = {}
    for size in (1, 500):
        conv = services.conversation_create(tenant_id=gateway.tenant_id, items=[], metadata={})
        for start in range(0, size, 20):
            services.conversation_items_add(
                tenant_id=gateway.tenant_id,
                conversation_id=conv.id,
                items=[
                    {
                        "type": "message",
                        "id": f"msg_{size}_{i}",
                        "role": "user",
                        "content": [{"type": "input_text", "text": f"m{i}"}],
                    }
                    for i in range(start, min(size, start + 20))
                ],
            )
        with CaptureQueriesContext(connection) as queries:
            context = store_selectors.conversation_context(tenant_id=gateway.tenant_id, conversation_id=conv.id)
        assert len(context) == size
        counts[size] = len(queries)
    assert counts[1] == counts[500] == 1, counts
