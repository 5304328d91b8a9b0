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
    from django.db import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError as exc:
        # A database that is down or misnamed: one line that names it, not Django's traceback
        # (whose last line, from the driver, may not name the host at all).
        sys.exit(f"manage.py: {database_problem(exc)}")


def database_problem(exc: Exception) -> str:
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        where = f"the SQLite database {db.get('NAME')}"
    else:
        port = f":{db['PORT']}" if db.get("PORT") else ""
        where = f"database {db.get('NAME')!r} at {db.get('HOST') or 'localhost'}{port} as {db.get('USER')!r}"
    reason = " ".join((_direct_reason(db) or str(exc)).split())  # the driver's message, on one line
    return f"cannot use {where}: {reason} (is it running, and is DATABASE_URL right?)"


def _direct_reason(db: dict) -> str | None:
    """Why PostgreSQL refuses, from one plain connection: through the pool a failure reads only
    "couldn't get a connection after 5.00 sec"."""
    if not db["ENGINE"].endswith("postgresql"):
        return None
    try:
        import psycopg

        params = {
            "host": db.get("HOST"),
            "port": db.get("PORT"),
            "user": db.get("USER"),
            "password": db.get("PASSWORD"),
        }
        with psycopg.connect(dbname=db.get("NAME"), connect_timeout=5, **{k: v for k, v in params.items() if v}):
            return None
    except Exception as exc:  # noqa: BLE001 - any reason is the one to show
        return str(exc).split("\n")[0]


if __name__ == "__main__":
    main()
