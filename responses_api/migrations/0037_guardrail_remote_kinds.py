"""Guardrail kinds `moderation` and `judge`, and the usage endpoint `guardrail.judge` (a judge's
model run). Choices and help text only: no column changes, reversible as it is."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("responses_api", "0036_guardrail_output"),
    ]

    operations = [
        migrations.AlterField(
            model_name="guardrail",
            name="config",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='patterns: {"categories": {"name": {"regex": [...], "words": [...]}}}; pii: {"categories": ["email", "phone", "card", "iban", "credential"], "phone_region": "US"} (empty: all); moderation: {"url": "http://.../v1/moderations", "model": "...", "api_key_env": "ENV_NAME", "timeout": 5, "fail_open": false, "categories": [...]}; judge: {"route": "a model route", "policy": "...", "timeout": 30, "fail_open": false, "categories": [...]}. Any kind: "on_stream": "buffer" or "log" (a kind that needs the whole answer, on a streamed output).',
            ),
        ),
        migrations.AlterField(
            model_name="guardrail",
            name="kind",
            field=models.CharField(
                choices=[
                    ("patterns", "Patterns (regular expressions and word lists)"),
                    ("pii", "Personal data and credentials"),
                    ("moderation", "A moderation endpoint (OpenAI's /v1/moderations shape)"),
                    ("judge", "A judge model (a model route asked a policy question)"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="endpoint",
            field=models.CharField(
                choices=[
                    ("chat.completions", "Chat Completions"),
                    ("embeddings", "Embeddings"),
                    ("responses (purged)", "Purged Response"),
                    ("responses (store: false)", "Unstored Response"),
                    ("messages", "Messages"),
                    ("guardrail.judge", "Guardrail Judge"),
                ],
                max_length=32,
            ),
        ),
    ]
