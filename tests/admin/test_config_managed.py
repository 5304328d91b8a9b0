"""The admin under GATEWAY_CONFIG's rule: the fields the file sets are read-only, the rest are edited."""

from __future__ import annotations

import pytest

from responses_api.ops.config_sync import sync_config
from tests.test_config_sync import CONFIG, EDITS, FULL, _sections

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_the_admin_shows_the_files_fields_read_only(admin_client, settings) -> None:
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


def test_a_config_managed_http_tool_shows_no_python_section_and_python_tools_name_the_allowlist(
    admin_client, settings
) -> None:
    from tool_registry.models import Tool

    settings.GATEWAY_PYTHON_TOOL_MODULES = frozenset({"tests.tool_registry.pytools", "corp.tools"})
    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal", "10.9.0.0/16"]
    sync_config(FULL)
    managed = _sections()["tools"]
    html = admin_client.get(f"/admin/tool_registry/tool/{managed.pk}/change/").content.decode()
    # The executor is the file's (read-only): no choice for the page's script to follow, so the
    # Python section is not sent at all; the HTTP one is.
    assert "HTTP webhook" in html and "Python function" not in html and 'name="python_callable"' not in html

    own = Tool.objects.create(
        name="local_fn", executor=Tool.Executor.PYTHON, python_callable="tests.tool_registry.pytools:add"
    )
    html = admin_client.get(f"/admin/tool_registry/tool/{own.pk}/change/").content.decode()
    assert "Python function" in html and "HTTP webhook" in html  # an admin-made tool may switch executor
    allowlist = html[html.index('data-role="python-allowlist"') :]
    allowlist = allowlist[: allowlist.index("</span>")]
    assert "<code>corp.tools</code>, <code>tests.tool_registry.pytools</code>" in allowlist
    settings.GATEWAY_PYTHON_TOOL_MODULES = frozenset()
    html = admin_client.get("/admin/tool_registry/tool/add/").content.decode()
    assert "<code>GATEWAY_PYTHON_TOOL_MODULES</code> is empty" in html
