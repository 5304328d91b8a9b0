"""Make an upgrade fixture: a database populated by an earlier release's own code, as JSON.

Run with the code of the release to capture (a plain export of its commit), from this checkout:

    rm -rf /tmp/gw-old && mkdir /tmp/gw-old && git archive COMMIT | tar -x -C /tmp/gw-old
    .venv/bin/python tests/upgrade/make_fixture.py /tmp/gw-old tests/upgrade/fixtures/COMMIT.json

It starts that code's gateway (embedded: SQLite, in-process worker) with a scripted upstream
on loopback, uses it as a client would (a stored chain with sealed reasoning, a conversation,
a compaction, a queued background run holding MCP credentials, keys with limits, a revoked
key, a tenant's budget and retention, config-synced tools and MCP servers, usage), and writes
every row of the gateway's apps with the migration state they belong to and what the client
kept (keys, ids, sealed blobs). tests/upgrade/test_upgrade.py loads each fixture into that
migration state, migrates to the newest code and checks every one of them still works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    old, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    # The release's code, not this checkout's: its root first on the path, run from there.
    sys.path[:] = [str(old), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
    os.chdir(old)
    workdir = Path(tempfile.mkdtemp(prefix="gw-upgrade-fixture-"))
    for name in [n for n in os.environ if n.startswith(("GATEWAY_", "DATABASE_", "REDIS_"))]:
        del os.environ[name]
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DEBUG": "1",
            "SECRET_KEY": SECRET_KEY,
            "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
            "GATEWAY_EGRESS_ALLOW": "mcp.internal,10.9.0.0/16",
        }
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    data = populate()
    data["commit"] = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", os.environ.get("FIXTURE_COMMIT", "HEAD")],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: {len(data['objects'])} rows at {data['migrations']}")


SECRET_KEY = "upgrade-fixture-secret-key-not-used-anywhere-else-0123456789abcdefghij"


def populate() -> dict:
    import httpx
    from django.core import serializers
    from django.db.migrations.recorder import MigrationRecorder
    from django.utils import timezone

    from responses_api.models import ApiKey, Tenant
    from responses_api.ops.config_sync import sync_config
    from responses_api.orchestration import handoff
    from responses_api.store.usage import usage_writer
    from tests.support.harness import ThreadedUvicorn, make_key
    from tests.support.upstream import Reply, ScriptedUpstream

    upstream = ScriptedUpstream()
    upstream.start()
    sync_config(
        {
            "providers": [{"name": "scripted", "kind": "chat_completions", "base_url": upstream.base_url}],
            "models": [
                {
                    "name": "test-model",
                    "description": "the upgrade fixture's model",
                    "price": {"input_usd_per_million": 1, "output_usd_per_million": 2},
                    "targets": [{"provider": "scripted", "model": "test-model"}],
                }
            ],
            "tools": [{"name": "lookup", "executor": {"type": "http", "url": "http://10.9.0.1/lookup"}}],
            "mcp_servers": [{"label": "docs", "url": "http://mcp.internal:8000/mcp", "require_approval": "never"}],
            "tenants": [
                {
                    "name": "upgrade",
                    "requests_per_minute": 6000,
                    "retention_days": 3650,
                    "budget": {"period": "month", "tokens": 10_000_000},
                }
            ],
        }
    )
    key, tenant_id = make_key(tenant="upgrade", name="main")
    Tenant.objects.filter(id=tenant_id).update(mcp_adhoc_egress_allow=["10.9.0.0/16"])
    ApiKey.objects.filter(name="main").update(requests_per_minute=5000, tokens_per_minute=10_000_000)
    revoked, _ = make_key(tenant="upgrade", name="revoked")
    ApiKey.objects.filter(name="revoked").update(revoked_at=timezone.now())
    assert Tenant.objects.get(id=tenant_id).requests_per_minute == 6000

    gateway = ThreadedUvicorn()
    gateway.start()
    client = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def create(**body: object) -> dict:
        resp = client.post("/v1/responses", json={"model": "test-model", **body})
        assert resp.status_code == 200, resp.text
        return resp.json()

    # A stored chain of three turns, the first with reasoning sealed for the client.
    upstream.enqueue("test-model", Reply(text="Paris.", reasoning="The capital of France is Paris."))
    r1 = create(input="What is the capital of France?", include=["reasoning.encrypted_content"])
    upstream.enqueue("test-model", Reply(text="About two million."))
    r2 = create(input="How many people live there?", previous_response_id=r1["id"])
    upstream.enqueue("test-model", Reply(text="The Seine."))
    r3 = create(input="Which river?", previous_response_id=r2["id"])
    reasoning = next(item for item in r1["output"] if item["type"] == "reasoning")
    assert reasoning["encrypted_content"].startswith("gwsealed1.")

    # An unstored response: its tokens are kept as a usage record only.
    upstream.enqueue("test-model", Reply(text="Not stored."))
    create(input="Do not keep this.", store=False)

    # A conversation with items and a response in it.
    conv = client.post(
        "/v1/conversations", json={"items": [{"type": "message", "role": "user", "content": "Plan a trip."}]}
    )
    assert conv.status_code == 200, conv.text
    conversation = conv.json()["id"]
    upstream.enqueue("test-model", Reply(text="Go by train."))
    in_conversation = create(input="How do I get there?", conversation=conversation)

    # A compaction of the chain: a sealed compaction item the client keeps.
    upstream.enqueue("test-model", Reply(text="They asked about Paris, its people and its river."))
    compacted = client.post("/v1/responses/compact", json={"model": "test-model", "previous_response_id": r3["id"]})
    assert compacted.status_code == 200, compacted.text
    compaction = next(item for item in compacted.json()["output"] if item["type"] == "compaction")

    # A background run no worker has taken yet, holding its MCP credentials sealed.
    async def no_worker(response_id: str, window: str = "soonest") -> None:
        return None

    handoff.enqueue = no_worker  # the row stays queued, as when every worker is busy at the upgrade
    queued = create(
        input="Look it up.",
        background=True,
        tools=[
            {
                "type": "mcp",
                "server_label": "team",
                "server_url": "http://10.9.0.5:8000/mcp",
                "headers": {"Authorization": "Bearer mcp-secret-token"},
                "require_approval": "never",
            }
        ],
    )
    assert queued["status"] == "queued"

    gateway.call(usage_writer.flush())
    gateway.stop()
    upstream.stop()

    from django.apps import apps

    models = [m for label in ("responses_api", "tool_registry") for m in apps.get_app_config(label).get_models()]
    rows = [
        obj for model in serializers.sort_dependencies([(None, models)]) for obj in model._base_manager.order_by("pk")
    ]
    leaves: dict[str, str] = {}
    for app, name in MigrationRecorder.Migration.objects.values_list("app", "name"):
        if app in ("responses_api", "tool_registry"):
            leaves[app] = max(leaves.get(app, ""), name)
    return {
        "migrations": leaves,
        "secret_key": SECRET_KEY,
        "objects": json.loads(serializers.serialize("json", rows)),
        "client": {
            "key": key,
            "revoked_key": revoked,
            "tenant_id": tenant_id,
            "chain": [r1["id"], r2["id"], r3["id"]],
            "reasoning": reasoning,
            "conversation": conversation,
            "conversation_response": in_conversation["id"],
            "compaction": compaction,
            "queued": queued["id"],
            "mcp_headers": {"Authorization": "Bearer mcp-secret-token"},
        },
    }


if __name__ == "__main__":
    main()
