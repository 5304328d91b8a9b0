"""`manage.py purge_responses`: remove responses and their content everywhere (services.responses_purge)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from responses_api.models import Response, Tenant
from responses_api.store.services import PurgeRefused, response_descendants, responses_purge


class Command(BaseCommand):
    help = (
        "Purge responses: delete them and every item they used or produced, everywhere (other "
        "responses' references, conversations). Later responses that continue them can no longer be "
        "continued. Their token usage is kept. Select by id, and/or with --deleted, --tenant, --before."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("response_ids", nargs="*", help="Response ids (resp_...).")
        parser.add_argument(
            "--deleted", action="store_true", help="Every response deleted through the API (DELETE /v1/responses/{id})."
        )
        parser.add_argument("--tenant", help="Only this tenant's responses (required with --before alone).")
        parser.add_argument("--before", help="Only responses created before this date (YYYY-MM-DD, UTC).")
        parser.add_argument("--dry-run", action="store_true", help="Say what would be purged; change nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[str] = options["response_ids"]
        if not (ids or options["deleted"] or options["tenant"]):
            raise CommandError("Name response ids, or select with --deleted and/or --tenant [--before].")
        rows = Response.objects.all()
        if ids:
            rows = rows.filter(id__in=ids)
            missing = set(ids) - set(rows.values_list("id", flat=True))
            if missing:
                raise CommandError(f"No such response: {', '.join(sorted(missing))}")
        if options["deleted"]:
            rows = rows.filter(deleted_at__isnull=False)
        if options["tenant"]:
            tenant = Tenant.objects.filter(name=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"No such tenant: {options['tenant']}")
            rows = rows.filter(tenant=tenant)
        if options["before"]:
            try:
                before = datetime.strptime(options["before"], "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                raise CommandError("--before takes a date, YYYY-MM-DD.") from None
            rows = rows.filter(created_at__lt=before)
        selected = list(rows.values_list("id", flat=True))
        if options["dry_run"]:
            self.stdout.write(
                f"Would purge {len(selected)} response(s); {len(response_descendants(selected))} "
                "later response(s) could then no longer be continued."
            )
            return
        try:
            counts = responses_purge(response_ids=selected)
        except PurgeRefused as exc:
            raise CommandError(f"Nothing purged: {exc}") from None
        self.stdout.write(
            f"Purged {counts['responses']} response(s) and {counts['items']} item(s); "
            f"{counts['broken_chains']} later response(s) can no longer be continued."
        )
