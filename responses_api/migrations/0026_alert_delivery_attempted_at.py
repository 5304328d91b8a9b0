from django.db import migrations, models

# When a delivery was last attempted or handed to a worker: the periodic sweep
# (orchestration/alerts.requeue_stale_deliveries) re-enqueues a pending delivery untouched for
# longer than any retry waits, and claims it by moving this, so two sweeps never both send it.


class Migration(migrations.Migration):
    dependencies = [
        ("responses_api", "0025_route_cache_prices"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertdelivery",
            name="attempted_at",
            field=models.DateTimeField(
                blank=True, null=True, help_text="When it was last tried, or handed to a worker again."
            ),
        ),
    ]
