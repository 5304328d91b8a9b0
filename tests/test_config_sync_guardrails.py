"""GATEWAY_CONFIG `guardrails:` under the config-sync rule: the file owns what it sets, a bad
definition is refused naming its place (nothing saved), per-file ownership, and a synced
guardrail is applied at once (the sync empties the guardrails' cache)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from responses_api.models import ApiKey, Guardrail, ModelRoute, Provider, Tenant
from responses_api.ops.config_sync import ConfigError, sync_config

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONFIG: dict[str, Any] = {
    "tenants": [{"name": "acme"}],
    "providers": [{"name": "local", "kind": "chat_completions", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"name": "small", "targets": [{"provider": "local", "model": "m"}]}],
    "guardrails": [
        {
            "name": "no-credentials",
            "kind": "pii",
            "action": "block",
            "config": {"categories": ["credential"]},
        },
        {
            "name": "acme-codenames",
            "kind": "patterns",
            "action": "redact",
            "tenant": "acme",
            "route": "small",
            "config": {"categories": {"codename": {"words": ["Project Zeus"], "regex": ["ZX-\\d{4}"]}}},
        },
    ],
}


def test_guardrails_are_synced_and_the_file_owns_what_it_sets() -> None:
    sync_config(CONFIG, source="/etc/gateway.yaml")
    sync_config(CONFIG, source="/etc/gateway.yaml")  # idempotent
    assert Guardrail.objects.count() == 2
    creds = Guardrail.objects.get(name="no-credentials")
    assert (creds.kind, creds.action, creds.applies_to, creds.tenant, creds.route) == (
        "pii",
        "block",
        "input",
        None,
        None,
    )
    assert creds.config_managed == ["kind", "action", "config"] and creds.config_source == "/etc/gateway.yaml"
    scoped = Guardrail.objects.get(name="acme-codenames")
    assert scoped.tenant == Tenant.objects.get(name="acme") and scoped.route == ModelRoute.objects.get(name="small")
    scoped.description = "the admin's"  # a field the file leaves out stays the admin's
    scoped.save()
    sync_config(CONFIG, source="/etc/gateway.yaml")
    scoped.refresh_from_db()
    assert scoped.description == "the admin's"
    # Gone from the file: left in place, the admin's alone.
    sync_config({**CONFIG, "guardrails": CONFIG["guardrails"][:1]}, source="/etc/gateway.yaml")
    scoped.refresh_from_db()
    assert scoped.config_managed == [] and scoped.config_source == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"applies_to": "everywhere"}, "applies_to"),
        ({"applies_to": "output", "config": {"categories": {"x": {"words": ["y"]}}, "on_stream": "x"}}, "on_stream"),
        ({"action": "warn"}, "action"),
        ({"kind": "llm"}, "kind"),
        # The remote kinds: a whole-text verdict cannot redact; their config is checked too.
        ({"kind": "judge"}, "'action': ['a judge guardrail gives one verdict"),
        (
            {"kind": "moderation", "action": "block", "config": {"url": "http://m", "api_key_env": "sk-1 2"}},
            "api_key_env",
        ),
        ({"kind": "judge", "action": "log", "config": {"route": "gone", "policy": "p"}}, "no model route is named"),
        ({"config": {"categories": {"x": {"regex": ["(unclosed"]}}}}, "not a regular expression"),
        ({"route": "no-such-route"}, "unknown model route"),
        ({"key": "sk-gw-nope"}, "no API key with the prefix"),
        ({"tenant": "nobody"}, "unknown tenant"),
        ({"scope": "all"}, "unknown key(s) scope"),
    ],
)
def test_a_bad_definition_is_refused_naming_its_place(change: dict[str, Any], message: str) -> None:
    config = copy.deepcopy(CONFIG)
    config["guardrails"][1].update(change)
    with pytest.raises(ConfigError) as raised:
        sync_config(config, source="/etc/gateway.yaml")
    assert "guardrails[1]" in str(raised.value) and message in str(raised.value), str(raised.value)
    assert not Guardrail.objects.filter(name="acme-codenames").exists()


def test_key_scope_by_prefix_and_another_files_entries_are_left_alone(tmp_path) -> None:
    from responses_api.store.services import api_key_create

    key, _ = api_key_create(tenant_name="acme", name="ci")
    owner = tmp_path / "a.yaml"
    owner.write_text("guardrails: []\n")
    entry = {"name": "ci-key", "kind": "pii", "action": "log", "key": key.prefix}
    sync_config({"guardrails": [entry]}, source=str(owner))
    assert Guardrail.objects.get(name="ci-key").api_key == ApiKey.objects.get(pk=key.pk)
    sync_config({"guardrails": []}, source=str(tmp_path / "b.yaml"))
    assert Guardrail.objects.get(name="ci-key").config_source == str(owner)
    with pytest.raises(ConfigError, match="is managed by"):
        sync_config({"guardrails": [entry]}, source=str(tmp_path / "b.yaml"))
    assert Provider.objects.count() == 0


def test_output_guardrails_are_synced_with_their_stream_choice() -> None:
    entry = {
        "name": "out",
        "kind": "patterns",
        "applies_to": "output",
        "action": "block",
        "config": {"categories": {"c": {"words": ["x"]}}, "on_stream": "log"},
    }
    sync_config({"guardrails": [entry, {**entry, "name": "args", "applies_to": "tool_arguments"}]}, source="/f.yaml")
    assert dict(Guardrail.objects.values_list("name", "applies_to")) == {"out": "output", "args": "tool_arguments"}
    assert Guardrail.objects.get(name="out").config["on_stream"] == "log"


def test_the_remote_kinds_are_synced() -> None:
    config = copy.deepcopy(CONFIG)
    config["guardrails"] = [
        {
            "name": "moderated",
            "kind": "moderation",
            "action": "block",
            "config": {
                "url": "http://moderation.internal:8000/v1/moderations",
                "model": "omni-moderation-latest",
                "api_key_env": "MODERATION_API_KEY",
                "timeout": 3,
                "fail_open": True,
                "categories": ["hate", "violence"],
            },
        },
        {
            "name": "judged",
            "kind": "judge",
            "action": "log",
            "tenant": "acme",
            "config": {"route": "small", "policy": "No medical advice.", "categories": ["medical"]},
        },
    ]
    sync_config(config, source="/etc/gateway.yaml")
    moderated, judged = Guardrail.objects.get(name="moderated"), Guardrail.objects.get(name="judged")
    assert (moderated.kind, moderated.action, moderated.config["fail_open"]) == ("moderation", "block", True)
    assert (judged.kind, judged.action, judged.tenant) == ("judge", "log", Tenant.objects.get(name="acme"))
    assert judged.config == {"route": "small", "policy": "No medical advice.", "categories": ["medical"]}


def test_the_readmes_worked_example_syncs() -> None:
    """README.md's "Guardrails" example, as written, is a valid `guardrails:` section."""
    import re
    from pathlib import Path

    import yaml

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("### Guardrails", 1)[1]
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1))  # type: ignore[union-attr]
    names = {g.get("route") for g in example["guardrails"]} | {
        g["config"]["route"] for g in example["guardrails"] if g["kind"] == "judge"
    }
    config = {
        **CONFIG,
        "models": [{"name": n, "targets": [{"provider": "local", "model": "m"}]} for n in sorted(names - {None})],
        "guardrails": example["guardrails"],
    }
    sync_config(config, source="/etc/gateway.yaml")
    assert {g.kind for g in Guardrail.objects.all()} == {"pii", "patterns", "moderation", "judge"}
