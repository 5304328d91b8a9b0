"""`manage.py sync_gateway_config [PATH]`: load providers and routes from GATEWAY_CONFIG."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from responses_api.ops.config_sync import ConfigError, sync_config_file


class Command(BaseCommand):
    help = "Sync providers and model routes from a YAML/JSON file (default: $GATEWAY_CONFIG)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["path"] or settings.GATEWAY_CONFIG
        if not path:
            raise CommandError("No file given and GATEWAY_CONFIG is not set.")
        try:
            counts = sync_config_file(path)
        except (ConfigError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        synced = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in counts.items())
        self.stdout.write(f"Synced {synced} from {path}.")
