"""Fewer indexes written by every stored create (bench/README.md, "PostgreSQL CPU per stored create").

Drops the `varchar_pattern_ops` (LIKE) copies Django adds to indexed text columns (no query
matches a prefix with LIKE; the admin's searches use UPPER(..) LIKE, which no index serves) and
the single-column indexes a composite one already starts with (a response's tenant, an item
link's response); an item's tenant and public id get one index for both. The new indexes are
built before the old ones go, so no query is left without one in between.
"""

import django.db.models.deletion
from django.db import migrations, models


# Django adds a LIKE copy to every text primary key; it is not in the model state, so it goes
# by name (PostgreSQL only: SQLite has no such index).
PK_LIKE_INDEX = "responses_api_response_id_75f07a1a_like"


def drop_pk_like_index(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {PK_LIKE_INDEX}")


def restore_pk_like_index(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {PK_LIKE_INDEX} ON responses_api_response (id varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("responses_api", "0021_config_managed"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="item",
            index=models.Index(fields=["tenant", "public_id"], name="item_tenant_public_id"),
        ),
        migrations.AddIndex(
            model_name="response",
            index=models.Index(fields=["previous_response"], name="resp_previous"),
        ),
        migrations.AddIndex(
            model_name="response",
            index=models.Index(fields=["conversation"], name="resp_conversation"),
        ),
        migrations.AddIndex(
            model_name="response",
            index=models.Index(fields=["status"], name="resp_status"),
        ),
        migrations.AddIndex(
            model_name="response",
            index=models.Index(fields=["model"], name="resp_model"),
        ),
        migrations.AlterField(
            model_name="item",
            name="public_id",
            field=models.CharField(max_length=255),
        ),
        migrations.AlterField(
            model_name="item",
            name="tenant",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="responses_api.tenant"
            ),
        ),
        migrations.AlterField(
            model_name="response",
            name="conversation",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="responses",
                to="responses_api.conversation",
            ),
        ),
        migrations.AlterField(
            model_name="response",
            name="model",
            field=models.CharField(max_length=200),
        ),
        migrations.AlterField(
            model_name="response",
            name="previous_response",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="next_responses",
                to="responses_api.response",
            ),
        ),
        migrations.AlterField(
            model_name="response",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("in_progress", "In Progress"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                    ("incomplete", "Incomplete"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="response",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="responses",
                to="responses_api.tenant",
            ),
        ),
        migrations.AlterField(
            model_name="responseitem",
            name="response",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="response_items",
                to="responses_api.response",
            ),
        ),
        migrations.RunPython(drop_pk_like_index, restore_pk_like_index),
    ]
