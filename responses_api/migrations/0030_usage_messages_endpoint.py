"""Usage records of Anthropic's Messages front door (`/v1/messages`): one more endpoint choice.
Choices only: no column changes, reversible as it is."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("responses_api", "0029_prompts")]

    operations = [
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
                ],
                max_length=32,
            ),
        ),
    ]
