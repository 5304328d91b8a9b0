"""Indexes for the history API (filtered lists, metadata filters, text search).

Raw SQL, so the model state is untouched (makemigrations sees nothing to do).
The composite indexes exist on every database; the GIN indexes only on
PostgreSQL, where this migration runs them and SQLite skips them.
"""

from django.db import migrations

COMPOSITE = [
    ("resp_hist_tenant_status", "(tenant_id, status, created_at DESC, id DESC)"),
    ("resp_hist_tenant_model", "(tenant_id, model, created_at DESC, id DESC)"),
]

POSTGRES_ONLY = [
    # metadata[key]=value filters: jsonb containment (@>).
    ("resp_hist_metadata_gin", "responses_api_response USING gin (metadata jsonb_path_ops)"),
    # `q`: must be exactly responses_api.history.selectors.ITEM_SEARCH_VECTOR_SQL.
    (
        "item_hist_text_search",
        (
            "responses_api_item USING gin ((jsonb_to_tsvector('simple'::regconfig, "
            "jsonb_path_query_array(data, 'strict $.**.text'::jsonpath), '[\"string\"]'::jsonb)))"
        ),
    ),
]


def create(apps, schema_editor):  # type: ignore[no-untyped-def]
    for name, columns in COMPOSITE:
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON responses_api_response {columns}")
    if schema_editor.connection.vendor == "postgresql":
        for name, target in POSTGRES_ONLY:
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {target}")


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    names = [name for name, _ in COMPOSITE]
    if schema_editor.connection.vendor == "postgresql":
        names += [name for name, _ in POSTGRES_ONLY]
    for name in names:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("responses_api", "0001_initial")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
