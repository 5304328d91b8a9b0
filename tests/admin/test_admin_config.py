"""API keys (secret shown once), providers (encrypted keys, connection check) and routes in the admin."""

from __future__ import annotations

import socket

import pytest
from django.urls import reverse

from responses_api.api.auth import authenticate_key
from responses_api.models import ApiKey, ModelRoute, Provider, Tenant
from responses_api.orchestration import routing
from responses_api.protocol.errors import AuthenticationFailed
from responses_api.store.services import KEY_PREFIX, hash_key
from tests.support.upstream import ScriptedUpstream

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _messages(reply) -> list[str]:
    return [str(m) for m in reply.context["messages"]]


def test_create_api_key_shows_the_secret_once(admin_client) -> None:
    tenant = Tenant.objects.create(name="acme")
    ModelRoute.objects.create(name="gpt-small")
    add_url = reverse("admin:responses_api_apikey_add")
    form = admin_client.get(add_url).content.decode()
    for field in ("tenant", "name", "is_admin", "allowed_models"):
        assert f'name="{field}"' in form
    assert 'name="prefix"' not in form and 'name="secret_hash"' not in form
    assert '<option value="gpt-small">' in form  # model name suggestions

    reply = admin_client.post(
        add_url, {"tenant": tenant.id, "name": "ci-bot", "allowed_models": "gpt-small, gpt-large"}
    )
    key = ApiKey.objects.get(name="ci-bot")
    assert reply.status_code == 302
    assert reply["location"] == reverse("admin:responses_api_apikey_change", args=[key.pk])

    shown = admin_client.get(reply["location"])
    page = shown.content.decode()
    secret = shown.context["new_secret"]
    assert secret.startswith(f"{KEY_PREFIX}{key.prefix}_") and secret in page
    assert any("shown only once" in m for m in _messages(shown))
    assert key.secret_hash == hash_key(secret) and key.allowed_models == ["gpt-small", "gpt-large"]
    assert authenticate_key(secret).tenant_id == tenant.id

    again = admin_client.get(reply["location"]).content.decode()
    assert secret not in again and "gw-new-secret" not in again
    listing = admin_client.get(reverse("admin:responses_api_apikey_changelist")).content.decode()
    assert f"{KEY_PREFIX}{key.prefix}_…" in listing and secret not in listing


def test_revoke_action(admin_client) -> None:
    from tests.support.harness import make_key

    raw, _ = make_key(name="leaked")
    key = ApiKey.objects.get(name="leaked")
    reply = admin_client.post(
        reverse("admin:responses_api_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [key.pk]},
        follow=True,
    )
    assert any("Revoked 1 key" in m for m in _messages(reply))
    key.refresh_from_db()
    assert key.revoked_at is not None
    listing = admin_client.get(reverse("admin:responses_api_apikey_changelist"), {"state": "revoked"})
    assert listing.context["cl"].result_count == 1
    with pytest.raises(
        AuthenticationFailed, match="^This API key was revoked; ask the gateway's operator for a new one.$"
    ):
        authenticate_key(raw)
    # Only the key's holder learns that: a wrong secret with the same prefix reads as any wrong key.
    with pytest.raises(AuthenticationFailed, match="^Incorrect API key provided.$"):
        authenticate_key(raw[:-4] + "xxxx")


def test_provider_key_is_stored_encrypted_and_never_shown(admin_client) -> None:
    reply = admin_client.post(
        reverse("admin:responses_api_provider_add"),
        {
            "name": "openai",
            "kind": "chat_completions",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": "",
            "new_api_key": "sk-upstream-very-secret",
            "timeout": 60,
            "connect_timeout": 5,
            "first_byte_timeout": 60,
            "idle_timeout": 30,
            "options": "{}",
            "headers": "{}",
            "enabled": "on",
        },
    )
    assert reply.status_code == 302, reply.content[:2000]
    provider = Provider.objects.get(name="openai")
    assert provider.api_key_encrypted and "very-secret" not in provider.api_key_encrypted
    assert routing.provider_secret(provider) == "sk-upstream-very-secret"
    change = admin_client.get(reverse("admin:responses_api_provider_change", args=[provider.pk])).content.decode()
    assert "very-secret" not in change and provider.api_key_encrypted not in change
    assert "stored (encrypted)" in admin_client.get(reverse("admin:responses_api_provider_changelist")).content.decode()


@pytest.mark.parametrize(
    ("base_url", "saved"),
    [("http://ollama:11434/v1", True), ("vllm:8000/v1", True), ("ftp://files.example.com/v1", False)],
)
def test_provider_base_url_may_be_a_one_label_host(admin_client, base_url: str, saved: bool) -> None:
    """As the config file and the README say: compose service names work as hosts."""
    reply = admin_client.post(
        reverse("admin:responses_api_provider_add"),
        {
            "name": "ollama",
            "kind": "chat_completions",
            "base_url": base_url,
            "api_key_env": "",
            "timeout": 60,
            "connect_timeout": 5,
            "first_byte_timeout": 60,
            "idle_timeout": 30,
            "options": "{}",
            "headers": "{}",
            "enabled": "on",
        },
    )
    assert (reply.status_code == 302) is saved, reply.content[:2000]
    if saved:
        assert Provider.objects.get(name="ollama").base_url == base_url.replace("vllm:", "http://vllm:")
    else:
        assert "Enter an http(s) URL with a host" in reply.content.decode()


def test_check_connection_lists_the_upstream_models(admin_client, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    upstream.set_default("gpt-upstream-1", None)
    ok = Provider.objects.create(name="scripted", base_url=upstream.base_url)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    dead = Provider.objects.create(name="dead", base_url=f"http://127.0.0.1:{dead_port}/v1", connect_timeout=1)
    missing_env = Provider.objects.create(name="noenv", base_url=upstream.base_url, api_key_env="NOPE_NOT_SET_KEY")
    reply = admin_client.post(
        reverse("admin:responses_api_provider_changelist"),
        {
            "action": "check_connection",
            "_selected_action": [ok.pk, dead.pk, missing_env.pk],
        },
        follow=True,
    )
    messages = _messages(reply)
    assert any(m.startswith("scripted: OK") and "model(s)" in m for m in messages), messages
    assert any(m.startswith("dead: cannot reach") for m in messages), messages
    assert any(m.startswith("noenv:") and "NOPE_NOT_SET_KEY" in m for m in messages), messages
    sent = [r for r in upstream.requests if r.path == "/v1/models"]
    assert sent and sent[-1].method == "GET"


def test_check_connection_sends_the_providers_dialect_headers(
    admin_client, upstream: ScriptedUpstream, monkeypatch
) -> None:
    """The check sends what a call would: an Anthropic provider's key in x-api-key with its
    anthropic-version, an OpenAI-style one's as a bearer token; configured headers too."""
    upstream.reset()
    upstream.set_default("gpt-upstream-1", None)
    monkeypatch.setenv("PROBE_TEST_KEY", "sk-probe")
    claude = Provider.objects.create(
        name="claude",
        kind="anthropic",
        base_url=upstream.base_url,
        api_key_env="PROBE_TEST_KEY",
        headers={"x-team": "ops"},
        options={"anthropic_version": "2023-06-01"},
    )
    openai = Provider.objects.create(name="openai", base_url=upstream.base_url, api_key_env="PROBE_TEST_KEY")
    for provider in (claude, openai):
        reply = admin_client.post(
            reverse("admin:responses_api_provider_changelist"),
            {"action": "check_connection", "_selected_action": [provider.pk]},
            follow=True,
        )
        assert any(m.startswith(f"{provider.name}: OK") for m in _messages(reply)), _messages(reply)
    listed = [r.headers for r in upstream.requests if r.path == "/v1/models"]
    assert len(listed) == 2
    anthropic, bearer = listed
    assert anthropic.get("x-api-key") == "sk-probe" and "authorization" not in anthropic, anthropic
    assert anthropic.get("anthropic-version") == "2023-06-01" and anthropic.get("x-team") == "ops", anthropic
    assert bearer.get("authorization") == "Bearer sk-probe" and "x-api-key" not in bearer, bearer


def test_model_route_with_targets_inline(admin_client) -> None:
    provider = Provider.objects.create(name="local", base_url="http://127.0.0.1:9/v1")
    reply = admin_client.post(
        reverse("admin:responses_api_modelroute_add"),
        {
            "name": "gpt-house",
            "description": "",
            "enabled": "on",
            "targets-TOTAL_FORMS": "2",
            "targets-INITIAL_FORMS": "0",
            "targets-MIN_NUM_FORMS": "0",
            "targets-MAX_NUM_FORMS": "1000",
            "targets-0-provider": provider.pk,
            "targets-0-upstream_model": "llama-3",
            "targets-0-weight": "3",
            "targets-0-priority": "0",
            "targets-1-provider": provider.pk,
            "targets-1-upstream_model": "llama-fallback",
            "targets-1-weight": "0",
            "targets-1-priority": "0",
            "targets-1-max_concurrent": "4",
        },
    )
    assert reply.status_code == 302, (
        [reply.context["adminform"].form.errors, reply.context["inline_admin_formsets"][0].formset.errors]
        if reply.context
        else reply
    )
    route = ModelRoute.objects.get(name="gpt-house")
    assert [(t.upstream_model, t.weight, t.max_concurrent) for t in route.targets.all()] == [
        ("llama-3", 3, None),
        ("llama-fallback", 0, 4),
    ]
    listing = admin_client.get(reverse("admin:responses_api_modelroute_changelist")).content.decode()
    assert "local:llama-3" in listing and "fallback" in listing


def test_mcp_server_admin_refreshes_the_tool_listing(admin_client, mcp_server, monkeypatch) -> None:
    from tool_registry.models import McpServer

    monkeypatch.setenv("SHOP_MCP_TOKEN", f"Bearer {mcp_server.token}")
    add = admin_client.post(
        reverse("admin:tool_registry_mcpserver_add"),
        {
            "label": "shop",
            "url": mcp_server.url,
            "headers_env": '{"Authorization": "SHOP_MCP_TOKEN"}',
            "allowed_tools": "[]",
            "approval": "per_tool",
            "approval_tools": '["lookup_order"]',
            "timeout": "5",
            "cache_seconds": "300",
            "enabled": "on",
        },
    )
    assert add.status_code == 302, add.content.decode()[:2000]
    ok = McpServer.objects.get(label="shop")
    without_token = McpServer.objects.create(label="locked", url=mcp_server.url)
    reply = admin_client.post(
        reverse("admin:tool_registry_mcpserver_changelist"),
        {"action": "refresh_tools", "_selected_action": [ok.pk, without_token.pk]},
        follow=True,
    )
    messages = _messages(reply)
    assert "shop: 3 tools listed." in messages, messages
    assert any(m.startswith("locked:") and "401" in m for m in messages), messages
    ok.refresh_from_db()
    without_token.refresh_from_db()
    assert [t["name"] for t in ok.tools_cache] == ["add", "lookup_order", "slow"] and ok.tools_fetched_at
    assert "401" in without_token.last_error and without_token.tools_cache == []
    page = admin_client.get(reverse("admin:tool_registry_mcpserver_change", args=[ok.pk])).content.decode()
    assert "lookup_order" in page and "Look up an order by its id." in page
    # Per-tool approval without tools, and a URL the egress policy refuses, are form errors.
    bad = admin_client.post(
        reverse("admin:tool_registry_mcpserver_add"),
        {
            "label": "bad",
            "url": "http://169.254.169.254/mcp",
            "headers_env": "{}",
            "allowed_tools": "[]",
            "approval": "per_tool",
            "approval_tools": "[]",
            "timeout": "5",
            "cache_seconds": "300",
        },
    )
    assert bad.status_code == 200
    errors = bad.context["adminform"].form.errors
    assert "url" in errors


def test_tools_and_mcp_servers_are_deferred_in_the_admin(admin_client, settings) -> None:
    """*Defer loading* on a tool's and an MCP server's form: saved, listed and filterable."""
    from tool_registry.models import McpServer, Tool

    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1"]
    tool = admin_client.post(
        reverse("admin:tool_registry_tool_add"),
        {
            "name": "lookup",
            "description": "Look a customer up.",
            "parameters": '{"type": "object", "properties": {}}',
            "strict": "on",
            "enabled": "on",
            "timeout": "5",
            "executor": "http",
            "url": "http://127.0.0.1:9/lookup",
            "headers_env": "{}",
            "defer_loading": "on",
        },
    )
    assert tool.status_code == 302, tool.content.decode()[:2000]
    server = admin_client.post(
        reverse("admin:tool_registry_mcpserver_add"),
        {
            "label": "shop",
            "url": "http://127.0.0.1:9/mcp",
            "headers_env": "{}",
            "allowed_tools": "[]",
            "approval": "never",
            "approval_tools": "[]",
            "timeout": "5",
            "cache_seconds": "300",
            "defer_loading": "on",
        },
    )
    assert server.status_code == 302, server.content.decode()[:2000]
    assert Tool.objects.get(name="lookup").defer_loading and McpServer.objects.get(label="shop").defer_loading
    listing = admin_client.get(reverse("admin:tool_registry_tool_changelist"), {"defer_loading__exact": "1"})
    assert "lookup" in listing.content.decode()
    page = admin_client.get(reverse("admin:tool_registry_mcpserver_change", args=[McpServer.objects.get().pk]))
    assert 'name="defer_loading"' in page.content.decode()
