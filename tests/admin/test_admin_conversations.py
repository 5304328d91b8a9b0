"""Conversations in the admin."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def test_the_admin_shows_a_conversation_and_its_items(gateway: Gateway, admin_client) -> None:
    client = gateway.openai()
    conv = client.conversations.create(
        metadata={"team": "search"},
        items=[{"type": "message", "role": "user", "content": "Where is the <b>manual</b>?"}],
    )
    listing = admin_client.get("/admin/responses_api/conversation/")
    assert listing.status_code == 200 and conv.id in listing.content.decode()
    page = admin_client.get(f"/admin/responses_api/conversation/{quote(conv.id)}/change/")
    html = page.content.decode()
    assert page.status_code == 200 and "search" in html
    assert "Where is the &lt;b&gt;manual&lt;/b&gt;?" in html  # escaped


def test_a_response_links_its_conversation_which_shows_each_items_response_and_a_token_total(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    admin_client,
) -> None:
    from responses_api.models import ModelRoute
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(input_usd_per_million=1000, output_usd_per_million=1000)
    routing.clear_cache()
    scripted.set_default(
        MODEL, Reply(text="Page 12.", usage={"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40})
    )
    client = gateway.openai()
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": "Manual?"}])
    first = client.responses.create(model=MODEL, conversation=conv.id, input="Which page?")
    second = client.responses.create(model=MODEL, conversation=conv.id, input="And the index?")

    detail = admin_client.get(f"/admin/responses_api/response/{quote(first.id)}/change/").content.decode()
    assert f'href="/admin/responses_api/conversation/{quote(conv.id)}/change/" data-role="conversation-link"' in detail

    html = admin_client.get(f"/admin/responses_api/conversation/{quote(conv.id)}/change/").content.decode()
    assert "<th>Response</th>" in html
    rows = html[html.index("<tbody>", html.index("<th>Response</th>")) :]
    rows = rows[: rows.index("</tbody>")].split("<tr>")[1:]
    assert len(rows) == 5  # the item added with the conversation, then each response's input and output
    assert "—" in rows[0]  # added by the items API, not by a response
    assert first.id in rows[1] and first.id in rows[2] and second.id in rows[3] and second.id in rows[4]
    # two responses, 40 tokens each, at $1,000 per million: $0.08
    assert '<span data-role="conversation-usage">2 responses, <strong>80</strong> tokens, $0.08</span>' in html
