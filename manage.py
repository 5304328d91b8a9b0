#!/usr/bin/env python
"""Django's command-line utility for the gateway."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    # A checkout with no configuration at all (no SECRET_KEY, no DEBUG, no .env) is the
    # development setup `scripts/run` starts, so the README's commands (createsuperuser,
    # create_api_key, ...) work there as written. A deployment always sets SECRET_KEY.
    configured = {"SECRET_KEY", "DEBUG"} & set(os.environ)
    if not configured and not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".env")):
        os.environ["DEBUG"] = "1"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
