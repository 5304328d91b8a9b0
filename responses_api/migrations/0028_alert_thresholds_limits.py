# Help text only: alert_thresholds now also apply to per-minute and concurrency limits (no data change).

import responses_api.models
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("responses_api", "0027_provider_kind_from_dialects"),
    ]

    operations = [
        migrations.AlterField(
            model_name="apikey",
            name="alert_thresholds",
            field=models.JSONField(
                blank=True,
                db_default=[80, 100],
                default=responses_api.models.default_alert_thresholds,
                help_text="Percentages of the budget at which the alert webhooks are called (once each per budget period), and of each per-minute and concurrency limit (those up to 100; once each per GATEWAY_LIMIT_ALERT_WINDOW_SECONDS), e.g. [80, 100]. Empty: no alerts.",
            ),
        ),
        migrations.AlterField(
            model_name="tenant",
            name="alert_thresholds",
            field=models.JSONField(
                blank=True,
                db_default=[80, 100],
                default=responses_api.models.default_alert_thresholds,
                help_text="Percentages of the budget at which the alert webhooks are called (once each per budget period), and of each per-minute and concurrency limit (those up to 100; once each per GATEWAY_LIMIT_ALERT_WINDOW_SECONDS), e.g. [80, 100]. Empty: no alerts.",
            ),
        ),
    ]
