"""Cache writes counted: the prompt-cache tokens a response wrote (and the 1-hour part, priced
apart by Anthropic) on its row, and read and written cache tokens on usage records (issue 49)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("responses_api", "0022_leaner_write_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="response",
            name="cache_write_1h_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="response",
            name="cache_write_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="usagerecord",
            name="cache_write_1h_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="usagerecord",
            name="cache_write_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="usagerecord",
            name="cached_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
