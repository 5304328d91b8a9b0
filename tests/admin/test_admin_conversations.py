"""Conversations in the admin."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote

from tests.support.harness import Gateway

pytestmark = pytest.mark.embedded


def test_the_admin_shows_a_conversation_and_its_items(gateway: Gateway, admin_client) -> None:  # type: ignore[no-untyped-def]
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
