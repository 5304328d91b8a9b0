"""GATEWAY_CONFIG sync: idempotent, validated, single-label hosts accepted."""

from __future__ import annotations

from typing import Any

import pytest

from responses_api.models import ModelRoute, Provider, RouteTarget
from responses_api.ops.config_sync import ConfigError, sync_config

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONFIG: dict[str, Any] = {
    "providers": [
        {"name": "ollama", "kind": "chat_completions", "base_url": "http://ollama:11434/v1"},
        {
            "name": "openai",
            "base_url": "https://api.openai.com/v1",
            "api_key_env": "OPENAI_API_KEY",
            "options": {"max_tokens_param": "max_completion_tokens"},
        },
    ],
    "models": [
        {
            "name": "small",
            "targets": [
                {"provider": "ollama", "model": "llama3.2", "weight": 3},
                {"provider": "openai", "model": "gpt-4.1-mini", "weight": 0},
            ],
        },
    ],
}


def test_sync_is_idempotent_and_accepts_single_label_hosts() -> None:
    first = sync_config(CONFIG)
    ids = list(RouteTarget.objects.order_by("id").values_list("id", flat=True))
    second = sync_config(CONFIG)
    assert (
        first
        == second
        == {
            "providers": 2,
            "models": 1,
            "tools": 0,
            "mcp_servers": 0,
            "tenants": 0,
            "alert_webhooks": 0,
            "prompts": 0,
            "guardrails": 0,
        }
    )
    assert list(RouteTarget.objects.order_by("id").values_list("id", flat=True)) == ids  # untouched
    assert Provider.objects.get(name="ollama").base_url == "http://ollama:11434/v1"
    route = ModelRoute.objects.get(name="small")
    assert [(t.provider.name, t.upstream_model, t.weight) for t in route.targets.order_by("id")] == [
        ("ollama", "llama3.2", 3),
        ("openai", "gpt-4.1-mini", 0),
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"providers": [{"name": "x", "base_url": "ftp://x/v1"}]}, "base_url"),
        ({"providers": [{"name": "x"}]}, "'base_url' is required"),
        ({"models": [{"name": "m", "targets": [{"provider": "nope", "model": "x"}]}]}, "unknown provider"),
        ({"providers": [{"name": "x", "base_url": "http://x/v1", "kind": "soap"}]}, "unknown kind"),
    ],
)
def test_bad_config_is_refused_with_its_place(config: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        sync_config(config)
    assert Provider.objects.count() == 0  # nothing half-written


def test_mcp_servers_are_declared_in_config(settings) -> None:
    from tool_registry.models import McpServer

    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal"]
    config = {
        **CONFIG,
        "mcp_servers": [
            {
                "label": "docs",
                "url": "http://mcp.internal:8000/mcp",
                "headers_env": {"Authorization": "DOCS_TOKEN"},
                "allowed_tools": ["search"],
                "require_approval": ["delete_page"],
                "timeout": 10,
                "routes": ["small"],
            },
            {"label": "calc", "url": "http://mcp.internal:9000/mcp", "require_approval": "never"},
        ],
    }
    assert sync_config(config)["mcp_servers"] == 2
    assert sync_config(config)["mcp_servers"] == 2  # idempotent
    docs = McpServer.objects.get(label="docs")
    assert (docs.approval, docs.approval_tools, docs.allowed_tools) == ("per_tool", ["delete_page"], ["search"])
    assert docs.headers_env == {"Authorization": "DOCS_TOKEN"} and docs.timeout == 10
    assert [r.name for r in docs.routes.all()] == ["small"]
    assert McpServer.objects.get(label="calc").approval == "never"
    with pytest.raises(ConfigError, match=r"mcp_servers\[0\]"):
        sync_config({"mcp_servers": [{"label": "x", "url": "http://169.254.169.254/mcp"}]})


def test_a_route_serves_hosted_tools_as_configured() -> None:
    config = {**CONFIG, "models": [{**CONFIG["models"][0], "hosted_tools": {"web_search": "corp_search"}}]}
    sync_config(config)
    assert ModelRoute.objects.get(name="small").hosted_tools == {"web_search": "corp_search"}
    for bad in ({"code_interpreter": "x"}, {"web_search": ""}, ["web_search"]):
        wrong = {**CONFIG, "models": [{**CONFIG["models"][0], "hosted_tools": bad}]}
        with pytest.raises(ConfigError, match="hosted_tools"):
            sync_config(wrong)
    assert ModelRoute.objects.get(name="small").hosted_tools == {"web_search": "corp_search"}  # rolled back


def test_provider_timeouts_come_from_the_file_with_documented_defaults() -> None:
    sync_config(
        {
            "providers": [
                {
                    "name": "slow",
                    "base_url": "http://slow:8000/v1",
                    "connect_timeout": 2,
                    "first_byte_timeout": 300,
                    "idle_timeout": 45,
                    "timeout": 600,
                },
                {"name": "plain", "base_url": "http://plain:8000/v1"},
            ]
        }
    )
    slow, plain = Provider.objects.get(name="slow"), Provider.objects.get(name="plain")
    assert (slow.connect_timeout, slow.first_byte_timeout, slow.idle_timeout, slow.timeout) == (2, 300, 45, 600)
    assert (plain.connect_timeout, plain.first_byte_timeout, plain.idle_timeout, plain.timeout) == (5, 60, 30, 120)


# --- One rule for every section: the file's fields, the admin's fields, entries that left ----


FULL: dict[str, Any] = {
    **CONFIG,
    "models": [{**CONFIG["models"][0], "description": "from the file"}],
    "tools": [{"name": "lookup", "executor": {"type": "http", "url": "http://10.9.0.1/lookup"}}],
    "mcp_servers": [{"label": "docs", "url": "http://mcp.internal:8000/mcp", "require_approval": "never"}],
    "tenants": [{"name": "acme", "requests_per_minute": 60}],
}


def _sections():
    from responses_api.models import Tenant
    from tool_registry.models import McpServer, Tool

    return {
        "providers": Provider.objects.get(name="ollama"),
        "models": ModelRoute.objects.get(name="small"),
        "tools": Tool.objects.get(name="lookup"),
        "mcp_servers": McpServer.objects.get(label="docs"),
        "tenants": Tenant.objects.get(name="acme"),
    }


# (section, a field the file sets with the admin's edit to it, a field it leaves out with the admin's edit)
EDITS = {
    "providers": (("base_url", "http://edited:1/v1"), ("timeout", 999.0)),
    "models": (("description", "edited"), ("context_window", 32768)),
    "tools": (("url", "http://10.9.0.2/x"), ("timeout", 7.0)),
    "mcp_servers": (("approval", "always"), ("cache_seconds", 5)),
    "tenants": (("requests_per_minute", 1), ("tokens_per_minute", 5000)),
}


def test_the_file_owns_what_it_sets_and_the_admin_the_rest(settings) -> None:
    from decimal import Decimal

    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal", "10.9.0.0/16"]
    sync_config(FULL)
    objs = _sections()
    assert objs["providers"].config_managed == ["kind", "base_url"]
    assert objs["models"].config_managed == ["description", "targets"]
    assert objs["tools"].config_managed == ["executor"]
    assert objs["mcp_servers"].config_managed == ["url", "require_approval"]
    assert objs["tenants"].config_managed == ["requests_per_minute"]
    # Edits in the admin: one to a field the file sets, one to a field it leaves out.
    for section, obj in objs.items():
        for field, value in EDITS[section]:
            setattr(obj, field, value)
        obj.save()
    route = objs["models"]
    route.input_usd_per_million = Decimal("2.5")
    route.save()

    sync_config(FULL)
    for section, obj in _sections().items():
        (set_field, edited), (left_field, kept) = EDITS[section]
        assert getattr(obj, set_field) != edited, f"{section}.{set_field}: the file's value is restored"
        assert getattr(obj, left_field) == kept, f"{section}.{left_field}: the admin's edit is kept"
    assert ModelRoute.objects.get(name="small").input_usd_per_million == Decimal("2.5")

    # Once the file sets a field, it is the file's.
    priced = {**FULL, "models": [{**FULL["models"][0], "context_window": 8192}]}
    sync_config(priced)
    assert ModelRoute.objects.get(name="small").context_window == 8192
    assert "context_window" in ModelRoute.objects.get(name="small").config_managed


def test_entries_removed_from_the_file_stay_and_are_unmarked(settings) -> None:
    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal", "10.9.0.0/16"]
    sync_config(FULL)
    sync_config({"providers": [CONFIG["providers"][1]]})
    for section, obj in _sections().items():
        assert obj.config_managed == [], section  # still there, the admin's alone
    assert Provider.objects.get(name="openai").config_managed == ["base_url", "api_key_env", "options"]
    assert [t.upstream_model for t in ModelRoute.objects.get(name="small").targets.all()] == [
        "llama3.2",
        "gpt-4.1-mini",
    ]


def test_tools_and_mcp_servers_are_deferred_from_the_file(settings) -> None:
    """`defer_loading: true` keeps a tool (or a server's tools) out of the model's list until tool
    search finds it; the specs a run gets carry it."""
    from tool_registry.models import McpServer, Tool
    from tool_registry.services import mcp_spec_of, spec_of

    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal", "10.9.0.1"]
    config = {
        **CONFIG,
        "tools": [
            {
                "name": "lookup",
                "executor": {"type": "http", "url": "http://10.9.0.1/lookup"},
                "defer_loading": True,
            },
            {"name": "ping", "executor": {"type": "http", "url": "http://10.9.0.1/ping"}},
        ],
        "mcp_servers": [
            {"label": "docs", "url": "http://mcp.internal:8000/mcp", "defer_loading": True},
            {"label": "calc", "url": "http://mcp.internal:9000/mcp"},
        ],
    }
    sync_config(config)
    assert spec_of(Tool.objects.get(name="lookup")).defer_loading is True
    assert spec_of(Tool.objects.get(name="ping")).defer_loading is False
    assert mcp_spec_of(McpServer.objects.get(label="docs")).defer_loading is True
    assert mcp_spec_of(McpServer.objects.get(label="calc")).defer_loading is False
    config["tools"][0]["defer_loading"] = False
    sync_config(config)
    assert Tool.objects.get(name="lookup").defer_loading is False
    assert "defer_loading" in Tool.objects.get(name="lookup").config_managed


def test_each_file_owns_its_entries_and_another_files_sync_leaves_them_alone(tmp_path, settings) -> None:
    """Syncing file B never changes what file A manages: it neither un-manages A's entries
    (as `sync_gateway_config extra.yaml` once did to the bundled model's) nor takes one over."""
    import yaml

    from responses_api.management.commands.gateway_up import local_config
    from responses_api.ops.config_sync import BUNDLED_SOURCE, source_of, sync_config_file
    from tool_registry.models import McpServer, Tool

    settings.GATEWAY_EGRESS_ALLOW = ["mcp.internal", "10.9.0.0/16"]
    main, extra = tmp_path / "gateway.yaml", tmp_path / "extra.yaml"
    main.write_text(yaml.safe_dump(FULL))
    extra.write_text(yaml.safe_dump({"providers": [{"name": "vllm", "base_url": "http://vllm:8000/v1"}]}))
    sync_config(local_config(8091), source=BUNDLED_SOURCE)
    sync_config_file(main)
    owned = {section: (obj.config_source, obj.config_managed) for section, obj in _sections().items()}
    assert {source for source, _ in owned.values()} == {source_of(main)}

    sync_config_file(extra)
    assert {s: (o.config_source, o.config_managed) for s, o in _sections().items()} == owned
    bundled = Provider.objects.get(name="local")
    assert (bundled.config_source, bundled.config_managed) == (
        BUNDLED_SOURCE,
        ["kind", "base_url", "timeout", "first_byte_timeout", "idle_timeout"],
    )
    assert ModelRoute.objects.get(name="local").config_managed == ["description", "targets"]
    # The bundled config synced alone (scripts/run without GATEWAY_CONFIG) leaves the file's alone.
    sync_config(local_config(8091), source=BUNDLED_SOURCE)
    assert {s: (o.config_source, o.config_managed) for s, o in _sections().items()} == owned
    assert Provider.objects.get(name="vllm").config_source == source_of(extra)

    # Another file listing an entry a file still manages is refused, nothing written.
    extra.write_text(yaml.safe_dump({"providers": [{"name": "ollama", "base_url": "http://elsewhere:1/v1"}]}))
    with pytest.raises(ConfigError, match=f"'ollama' is managed by {main}"):
        sync_config_file(extra)
    assert Provider.objects.get(name="ollama").base_url == "http://ollama:11434/v1"
    assert Provider.objects.get(name="vllm").config_source == source_of(extra)
    # A file that is gone (moved, renamed) no longer holds its entries; the bundled model's
    # entries yield to any file.
    main.unlink()
    extra.write_text(
        yaml.safe_dump({"providers": [{"name": "ollama", "base_url": "http://elsewhere:1/v1"}, bundled_entry()]})
    )
    sync_config_file(extra)
    assert set(Provider.objects.filter(config_source=source_of(extra)).values_list("name", flat=True)) == {
        "ollama",
        "local",
    }
    assert Tool.objects.get().config_source == McpServer.objects.get().config_source == source_of(main)


def bundled_entry() -> dict:
    return {"name": "local", "base_url": "http://127.0.0.1:9999/v1"}


def test_a_loopback_tool_url_is_refused_naming_where_to_allow_it(settings) -> None:
    settings.GATEWAY_EGRESS_ALLOW = []
    with pytest.raises(ConfigError) as refused:
        sync_config({"tools": [{"name": "local", "executor": {"type": "http", "url": "http://127.0.0.1:9/x"}}]})
    assert "127.0.0.1" in str(refused.value) and "loopback" in str(refused.value)
    assert "add it to GATEWAY_EGRESS_ALLOW (or the admin's Egress allowlist) if this is intended" in str(refused.value)


def test_ad_hoc_mcp_refusals_name_the_tenants_allowlist_not_the_operators(settings) -> None:
    from tests.support.harness import make_key
    from tool_registry.egress import EgressDenied, check_url_sync
    from tool_registry.services import adhoc_egress_policy

    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1"]  # the operator's, which client URLs never get
    _, tenant = make_key(tenant="adhoc")
    with pytest.raises(EgressDenied, match="tenant's ad-hoc MCP egress allowlist") as refused:
        check_url_sync("http://127.0.0.1:9/mcp", adhoc_egress_policy(tenant))
    assert "GATEWAY_EGRESS_ALLOW " not in str(refused.value)


@pytest.mark.parametrize("section", ["providers", "models", "targets", "tenants"])
def test_a_misspelt_key_is_reported_as_unknown(section: str) -> None:
    provider = {"name": "p", "base_url": "http://p:1/v1"}
    model = {"name": "m", "targets": [{"provider": "p", "model": "x"}]}
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "providers": ({"providers": [{**provider, "base-url": "x"}]}, "base-url"),
        "models": ({"providers": [provider], "models": [{"name": "m", "target": model["targets"]}]}, "target"),
        "targets": (
            {"providers": [provider], "models": [{"name": "m", "targets": [{"provider": "p", "modle": "x"}]}]},
            "modle",
        ),
        "tenants": ({"tenants": [{"name": "t", "retention": 3}]}, "retention"),
    }
    config, typo = cases[section]
    with pytest.raises(ConfigError, match=f"unknown (key|field)\\(s\\) {typo}\\b") as refused:
        sync_config(config)
    if section == "models":
        assert str(refused.value) == "models[0]: unknown key(s) target: 'target' (did you mean 'targets'?)"


@pytest.mark.parametrize("value", [None, ""])
def test_a_provider_key_variable_that_is_empty_is_not_set(value: str | None, monkeypatch) -> None:
    """docker-compose.yml passes `OPENAI_API_KEY: ${OPENAI_API_KEY:-}`: unset on the host, it
    arrives empty, and must read as missing, not as a key."""
    from responses_api.orchestration.routing import provider_secret
    from responses_api.protocol.errors import GatewayError

    if value is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", value)
    sync_config(CONFIG)
    with pytest.raises(
        GatewayError, match=r"reads its API key from \$OPENAI_API_KEY, which is (not set|empty)"
    ) as refused:
        provider_secret(Provider.objects.get(name="openai"))
    assert (refused.value.status, refused.value.code) == (503, "provider_misconfigured")


@pytest.mark.parametrize(
    ("budget", "path"),
    [
        ({"period": "week"}, r"tenants\[0\]\.keys\[1\]\.budget\.period"),
        ({"tokens": -5}, r"tenants\[0\]\.keys\[1\]\.budget\.tokens"),
        ({"usd": -1}, r"tenants\[0\]\.keys\[1\]\.budget\.usd"),
        ({"tokens": "100"}, r"tenants\[0\]\.keys\[1\]\.budget\.tokens"),
    ],
)
def test_a_keys_bad_budget_is_refused_with_its_path(budget: dict, path: str) -> None:
    """Key budgets were written with `.update()`, unvalidated: a period of "week" was stored and
    counted as monthly, and a negative count aborted the sync with the database's IntegrityError."""
    from responses_api.models import ApiKey
    from tests.support.harness import make_key

    make_key(tenant="acme", name="ci")
    make_key(tenant="acme", name="ops")
    config = {"tenants": [{"name": "acme", "keys": [{"name": "ci"}, {"name": "ops", "budget": budget}]}]}
    with pytest.raises(ConfigError, match=path):
        sync_config(config)
    key = ApiKey.objects.get(name="ops")
    assert (key.budget_period, key.budget_tokens, key.budget_usd) == ("month", None, None)


def test_a_tenants_bad_budget_period_is_refused_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"tenants\[0\]\.budget\.period: 'week' is not one of day, month"):
        sync_config({"tenants": [{"name": "acme", "budget": {"period": "week", "tokens": 10}}]})
