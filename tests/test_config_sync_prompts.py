"""GATEWAY_CONFIG `prompts:` under the config-sync rule: the file owns what it sets, versions
are immutable (a changed one is refused, a new one appended), per-file ownership."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from responses_api.models import Prompt, PromptVersion, Tenant
from responses_api.ops.config_sync import ConfigError, sync_config

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

PROMPTS: dict[str, Any] = {
    "tenants": [{"name": "acme"}],
    "prompts": [
        {
            "id": "pmpt_support",
            "name": "Support",
            "tenant": "acme",
            "versions": [
                {"instructions": "Help with {{topic}}.", "model": "small"},
                {
                    "instructions": "Help kindly with {{topic}}.",
                    "input": [{"role": "user", "content": "About {{topic}}"}],
                    "text_format": {"type": "json_object"},
                },
            ],
            "default_version": 1,
        },
        {"id": "pmpt_shared", "name": "Shared", "versions": [{"instructions": "Be brief."}]},
    ],
}


def test_prompts_are_synced_and_the_file_owns_what_it_sets() -> None:
    sync_config(PROMPTS, source="/etc/gateway.yaml")
    sync_config(PROMPTS, source="/etc/gateway.yaml")  # idempotent
    support = Prompt.objects.get(id="pmpt_support")
    assert support.tenant == Tenant.objects.get(name="acme") and support.default_version == 1
    assert support.config_managed == ["name", "tenant", "default_version", "versions"]
    assert [v.version for v in support.versions.order_by("version")] == [1, 2]
    assert PromptVersion.objects.get(prompt=support, version=2).text_format == {"type": "json_object"}
    assert Prompt.objects.get(id="pmpt_shared").tenant is None
    support.description = "the admin's"  # a field the file leaves out stays the admin's
    support.save()

    # A new version is appended; the stored ones stay as they are.
    appended = copy.deepcopy(PROMPTS)
    appended["prompts"][0]["versions"].append({"instructions": "v3 {{topic}}"})
    appended["prompts"][0]["default_version"] = 3
    sync_config(appended, source="/etc/gateway.yaml")
    support.refresh_from_db()
    assert support.default_version == 3 and support.description == "the admin's"
    assert support.versions.count() == 3


def test_a_changed_version_is_refused_naming_it() -> None:
    sync_config(PROMPTS)
    changed = copy.deepcopy(PROMPTS)
    changed["prompts"][0]["versions"][0]["instructions"] = "Something else"
    with pytest.raises(ConfigError, match=r"prompts\[0\]\.versions\[0\].*immutable"):
        sync_config(changed)
    assert PromptVersion.objects.get(prompt_id="pmpt_support", version=1).instructions == "Help with {{topic}}."


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"id": "pmpt_x", "name": "x", "tenant": "nobody", "versions": [{"instructions": "a"}]}, "unknown tenant"),
        ({"id": "not_a_prompt", "name": "x", "versions": [{"instructions": "a"}]}, r"prompts\[0\]"),
        ({"id": "pmpt_x", "name": "x", "versions": [{"instructions": "a", "tool": []}]}, "did you mean 'tools'"),
        ({"id": "pmpt_x", "name": "x", "versions": [{"input": [{"role": "robot", "content": "a"}]}]}, "input"),
        ({"id": "pmpt_x", "name": "x", "versions": [{"model": "small"}]}, "instructions or input"),
    ],
)
def test_bad_prompts_are_refused_with_their_place(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        sync_config({"prompts": [entry]})
    assert not Prompt.objects.filter(id=entry["id"]).exists()


def test_another_files_sync_leaves_its_prompts_alone(tmp_path) -> None:
    owner = tmp_path / "a.yaml"
    owner.write_text("")
    sync_config(PROMPTS, source=str(owner))
    sync_config({"prompts": []}, source=str(tmp_path / "b.yaml"))
    assert Prompt.objects.get(id="pmpt_support").config_source == str(owner)
    with pytest.raises(ConfigError, match="managed by"):
        sync_config({"prompts": [PROMPTS["prompts"][1]]}, source=str(tmp_path / "b.yaml"))
