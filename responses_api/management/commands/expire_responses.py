"""`manage.py expire_responses`: run retention now (what beat, or the embedded process, runs periodically)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from responses_api.store.services import retention_run


class Command(BaseCommand):
    help = (
        "Delete responses older than their tenant's retention_days (or GATEWAY_RETENTION_DAYS), with "
        "their items, as the periodic retention job does; the admin shows when it last ran. A response "
        "a newer one still continues is kept until that chain expires as a whole."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        counts = retention_run()
        self.stdout.write(f"Retention: deleted {counts['responses']} response(s) and {counts['items']} item(s).")
