"""The admin under GATEWAY_CONFIG's rule: the fields the file sets are read-only, the rest are edited."""

from __future__ import annotations

import pytest

from responses_api.ops.config_sync import sync_config
from tests.test_config_sync import CONFIG, EDITS, FULL, _sections

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_the_admin_shows_the_files_fields_read_only(admin_client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal", "10.9.0.0/16"]
    sync_config({**FULL, "providers": [{**CONFIG["providers"][0], "api_key": "sk-from-file"}, CONFIG["providers"][1]]})
    objs = _sections()
    pages = {
        "providers": f"/admin/responses_api/provider/{objs['providers'].pk}/change/",
        "models": f"/admin/responses_api/modelroute/{objs['models'].pk}/change/",
        "tools": f"/admin/tool_registry/tool/{objs['tools'].pk}/change/",
        "mcp_servers": f"/admin/tool_registry/mcpserver/{objs['mcp_servers'].pk}/change/",
        "tenants": f"/admin/responses_api/tenant/{objs['tenants'].pk}/change/",
    }
    for section, url in pages.items():
        page = admin_client.get(url)
        assert page.status_code == 200, section
        html = page.content.decode()
        assert "managed by GATEWAY_CONFIG" in html, section
        (set_field, _), (left_field, _) = EDITS[section]
        assert f'name="{set_field}"' not in html, f"{section}: {set_field} is editable"
        assert f'name="{left_field}"' in html, f"{section}: {left_field} is not editable"
    provider_page = admin_client.get(pages["providers"]).content.decode()
    assert 'name="new_api_key"' not in provider_page  # the file sets the key
    route_page = admin_client.get(pages["models"]).content.decode()
    assert 'name="targets-0-upstream_model"' not in route_page  # the file sets the targets

    # A change posted by the admin leaves the file's field alone and keeps its own.
    provider = objs["providers"]
    answer = admin_client.post(
        pages["providers"],
        {
            "name": "ollama",
            "kind": "responses",
            "base_url": "http://posted:1/v1",
            "api_key_env": "",
            "connect_timeout": 9,
            "first_byte_timeout": 60,
            "idle_timeout": 30,
            "timeout": 120,
            "options": "{}",
            "headers": "{}",
            "enabled": "on",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    provider.refresh_from_db()
    assert (provider.kind, provider.base_url, provider.connect_timeout) == (
        "chat_completions",
        "http://ollama:11434/v1",
        9,
    )
    # An entry not in the file is edited in full.
    from responses_api.models import Tenant

    other = Tenant.objects.create(name="other")
    html = admin_client.get(f"/admin/responses_api/tenant/{other.pk}/change/").content.decode()
    assert "not in GATEWAY_CONFIG" in html and 'name="requests_per_minute"' in html
