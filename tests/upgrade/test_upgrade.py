"""Upgrades keep data: a database populated by an earlier release's own code, migrated by this
code, still works.

Each file in fixtures/ was written by make_fixture.py running that release's code (its
docstring has the command). The test loads it into the migration state it was made at (with
the models of that state, so any later migration is exercised on real rows), migrates to the
newest migrations and uses every kind of data it holds: keys authenticate (a revoked one
stays refused), the stored chain continues, the conversation lists and grows, sealed
reasoning and compaction items open, a queued run's sealed MCP credentials open, limits and
budgets hold, usage is reported, and the admin shows every row.

A migration added later is covered without touching this file; a release that adds data a
fixture lacks adds a fixture of its own (same command) and, where needed, a check below.
Migrations must stay reversible: the test migrates back to each fixture's state first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management.color import no_style
from django.db import connection, models, transaction
from django.db.migrations.executor import MigrationExecutor

from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = [pytest.mark.embedded]

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))
APPS = ("responses_api", "tool_registry")


def _write(old_apps: Any, record: dict[str, Any], *, copy: bool = False) -> Any:
    """One row written with a model of the fixture's migration state; `copy`: a new row like it
    (new primary key, unique names suffixed), as the earlier release would insert one."""
    model = old_apps.get_model(record["model"])
    obj = model()
    pk = model._meta.pk
    obj.pk = None if copy and pk.get_internal_type() in ("AutoField", "BigAutoField") else pk.to_python(record["pk"])
    if copy and obj.pk is not None:
        obj.pk += "-copy"
    many = {}
    for name, value in record["fields"].items():
        field = model._meta.get_field(name)
        if field.many_to_many:
            many[name] = value
        elif field.is_relation:
            setattr(obj, field.attname, value)
        else:
            value = field.to_python(value)
            setattr(obj, field.attname, f"{value}-copy" if copy and field.unique and isinstance(value, str) else value)
    models.Model.save_base(obj, raw=True, force_insert=True)
    for name, ids in many.items():
        getattr(obj, name).set(ids)
    return model


def load_at_its_migrations(fixture: dict[str, Any]) -> None:
    """The fixture's rows written with the models of the state it was made at, as that
    release's code wrote them; then every migration since. Then, as the earlier release still
    running during a rolling deploy would, a new row like each one written with those old
    models into the migrated schema: a migration that breaks the previous release's writes
    (a NOT NULL column without a database default, a renamed column) fails here."""
    targets = [(app, fixture["migrations"][app]) for app in APPS]
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    old_apps = executor.loader.project_state(targets, at_end=True).apps
    with transaction.atomic():
        loaded = {_write(old_apps, record) for record in fixture["objects"]}
        _reset_sequences(loaded)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    with transaction.atomic():
        for record in fixture["objects"]:
            if record["model"] not in ROWS_WITH_SLOTS:
                with transaction.atomic():
                    _write(old_apps, record, copy=True)
        _reset_sequences(loaded)
        transaction.set_rollback(True)  # the copies only had to be writable


# Rows unique by their slot in a parent (a position in a response or a conversation): a copy
# would need a parent of its own. They are link rows the previous release writes with every
# response; a change to them shows in the checks of the test below.
ROWS_WITH_SLOTS = {"responses_api.responseitem", "responses_api.conversationitem"}


def _reset_sequences(loaded: set[Any]) -> None:
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), sorted(loaded, key=str)):
            cursor.execute(sql)


@pytest.fixture(params=FIXTURES, ids=[f.stem for f in FIXTURES])
def upgraded(request, transactional_db, settings, scripted: ScriptedUpstream) -> dict[str, Any]:
    from responses_api import ttlcache
    from responses_api.models import Provider

    fixture = json.loads(request.param.read_text())
    load_at_its_migrations(fixture)
    # The secret that sealed the fixture's blobs, as a deployment keeps its SECRET_KEY.
    settings.SECRET_KEY = fixture["secret_key"]
    settings.GATEWAY_ENCRYPTION_KEY = []
    settings.STORAGES = {  # the admin's pages without collectstatic's manifest (tests/admin/conftest.py)
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    Provider.objects.filter(name="scripted").update(base_url=scripted.base_url)
    ttlcache.clear_all()
    return fixture


def test_an_earlier_releases_data_works_after_migrate(
    upgraded: dict[str, Any], gateway_server, scripted: ScriptedUpstream, admin_client
) -> None:
    from responses_api.mcp.credentials import restore_credentials
    from responses_api.models import ApiKey, Response, Tenant

    kept = upgraded["client"]
    api = httpx.Client(base_url=gateway_server.url, headers={"Authorization": f"Bearer {kept['key']}"}, timeout=60)

    # Keys authenticate; the revoked one stays refused.
    models_page = api.get("/v1/models")
    assert models_page.status_code == 200 and "test-model" in models_page.text
    assert api.get("/v1/models", headers={"Authorization": f"Bearer {kept['revoked_key']}"}).status_code == 401

    # Every stored response reads back; the chain continues with its whole context.
    for response_id in [*kept["chain"], kept["conversation_response"]]:
        assert api.get(f"/v1/responses/{response_id}").status_code == 200
    scripted.enqueue("test-model", Reply(text="Nothing else."))
    more = api.post(
        "/v1/responses",
        json={"model": "test-model", "input": "Anything else?", "previous_response_id": kept["chain"][-1]},
    )
    assert more.status_code == 200, more.text
    sent = json.dumps(scripted.model_calls[-1].body)
    assert all(text in sent for text in ("What is the capital of France?", "About two million.", "The Seine."))

    # The conversation lists its items and takes a new turn.
    items = api.get(f"/v1/conversations/{kept['conversation']}/items", params={"order": "asc"})
    assert items.status_code == 200 and "Plan a trip." in items.text and "Go by train." in items.text
    scripted.enqueue("test-model", Reply(text="Book early."))
    turn = api.post(
        "/v1/responses", json={"model": "test-model", "input": "When?", "conversation": kept["conversation"]}
    )
    assert turn.status_code == 200, turn.text
    assert "Go by train." in json.dumps(scripted.model_calls[-1].body)

    # Sealed items the client kept open: reasoning and a compaction, sent back with store: false
    # (a blob that does not open is a 400 invalid_encrypted_content; Chat Completions upstreams get
    # no reasoning, a compaction's summary they do).
    reasoning = {k: kept["reasoning"][k] for k in ("type", "id", "summary", "encrypted_content")}
    compaction = {k: kept["compaction"][k] for k in ("type", "id", "encrypted_content")}
    for sealed in (reasoning, compaction):
        scripted.enqueue("test-model", Reply(text="Fine."))
        reply = api.post(
            "/v1/responses",
            json={"model": "test-model", "store": False, "input": [sealed, {"role": "user", "content": "Go on."}]},
        )
        assert reply.status_code == 200, reply.text
        broken = {**sealed, "encrypted_content": sealed["encrypted_content"][:-4] + "AAAA"}
        refused = api.post("/v1/responses", json={"model": "test-model", "store": False, "input": [broken]})
        assert refused.status_code == 400 and "invalid_encrypted_content" in refused.text
    assert "Paris, its people" in json.dumps(scripted.model_calls[-1].body)

    # A run queued before the upgrade still holds its MCP credentials, sealed, and they open.
    queued = Response.objects.get(id=kept["queued"])
    assert queued.status == "queued" and "mcp-secret-token" not in json.dumps(queued.job)
    assert queued.job is not None
    body = restore_credentials(queued.job["body"], queued.job["mcp_credentials"], queued.tenant_id)
    assert body["tools"][0]["headers"] == kept["mcp_headers"]
    # It was queued before completion windows existed: it is a soonest run (migration 0035).
    assert (queued.completion_window, queued.continuation_id) == ("soonest", "")

    # Limits and budgets hold; usage is reported, the unstored response's included.
    tenant = Tenant.objects.get(id=kept["tenant_id"])
    assert (tenant.requests_per_minute, tenant.budget_tokens, tenant.retention_days) == (6000, 10_000_000, 3650)
    assert ApiKey.objects.get(name="main").requests_per_minute == 5000
    usage = api.get("/v1/usage")
    assert usage.status_code == 200, usage.text
    body = usage.json()
    limits = {entry["limit"]: entry for entry in body["limits"]}
    assert limits["monthly budget"]["value"] == 10_000_000 and limits["monthly budget"]["used"] > 0
    fixture_tokens = sum(
        (r["fields"].get("input_tokens") or 0) + (r["fields"].get("output_tokens") or 0)
        for r in upgraded["objects"]
        if r["model"] in ("responses_api.response", "responses_api.usagerecord")
    )
    assert sum(bucket["input_tokens"] + bucket["output_tokens"] for bucket in body["data"]) > fixture_tokens > 0

    # The admin shows every row of the fixture.
    for record in upgraded["objects"]:
        app, model = record["model"].split(".")
        page = admin_client.get(f"/admin/{app}/{model}/{record['pk']}/change/")
        assert page.status_code in (200, 404 if model in NOT_IN_THE_ADMIN else 200), record["model"]


# Rows with no admin page of their own (shown inside their response's or conversation's page).
NOT_IN_THE_ADMIN = {"item", "responseitem", "conversationitem", "routetarget", "usagerecord"}
