"""`manage.py reseal_secrets [--dry-run]`: what the database holds sealed under an older listed
encryption key, sealed again under the first (orchestration/secrets.py), so the older key can
be dropped from GATEWAY_ENCRYPTION_KEY / SECRET_KEY_FALLBACKS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from responses_api.orchestration.secrets import secrets_reseal


class Command(BaseCommand):
    help = (
        "Re-seal providers' stored API keys and the MCP credentials of responses waiting for a worker "
        "under the first listed encryption key (GATEWAY_ENCRYPTION_KEY, else SECRET_KEY). Run it after "
        "putting a new key first and before dropping the old one. File-managed provider keys are also "
        "re-sealed by sync_gateway_config."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Say what would be re-sealed; change nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        report = secrets_reseal(dry_run=dry_run)
        verb = "would re-seal" if dry_run else "re-sealed"
        for what in report.resealed:
            self.stdout.write(f"{verb}: {what}")
        for what in report.unopenable:
            self.stderr.write(
                f"no listed key opens: {what} (list the key it was sealed under again, or set the secret anew)"
            )
        self.stdout.write(
            f"{len(report.resealed)} {verb}, {report.current} already under the first key, "
            f"{len(report.unopenable)} no listed key opens"
        )
        if report.unopenable:
            raise SystemExit(1)
