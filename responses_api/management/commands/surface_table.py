"""`manage.py surface_table`: write README.md's surface table from protocol/surface.py."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from responses_api.protocol.surface import with_tables


class Command(BaseCommand):
    help = (
        "Write the table of what the gateway does with each request field, tool, item and event "
        "(responses_api/protocol/surface.py) into README.md, between its markers. --check: change "
        "nothing, fail if the README's table is not the code's."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--check", action="store_true", help="Fail if README.md's table is out of date.")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        readme = Path(settings.BASE_DIR) / "README.md"
        text = readme.read_text()
        generated = with_tables(text)
        if options["check"]:
            if generated != text:
                raise CommandError("README.md's surface table is out of date: run `manage.py surface_table`.")
            self.stdout.write("README.md's surface table is up to date.")
            return
        if generated != text:
            readme.write_text(generated)
        self.stdout.write(f"Wrote the surface table into {readme}.")
