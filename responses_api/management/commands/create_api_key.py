"""`manage.py create_api_key NAME`: the secret is printed once, as the last line."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from responses_api.store.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key; prints the secret (shown only once) as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--tenant", default="default", help="Tenant name (created if missing).")
        parser.add_argument("--admin", action="store_true", help="May read every tenant's history.")

    def handle(self, *args: Any, **options: Any) -> None:
        key, secret = api_key_create(tenant_name=options["tenant"], name=options["name"], is_admin=options["admin"])
        self.stdout.write(
            f"Created key '{key.name}' for tenant '{key.tenant.name}'. Store it now: it is not shown again."
        )
        self.stdout.write(secret)
