"""Empty the PostgreSQL test database between transactional tests with DELETE, not TRUNCATE.

pytest-django's `transactional_db` (every test that uses the `gateway` fixture) ends with
Django's `flush`: one `TRUNCATE` of all ~40 tables. A TRUNCATE gives every table, index and
TOAST table a new file, which costs 0.2-0.3 s on the 2-core test machine even with fsync off;
`DELETE FROM` each table, when the tables hold a test's handful of rows, costs ~0.01 s. Over the
~1,600 such tests of the servers run that is about five minutes.

What the tests see is the same: every table empty afterwards, sequences not reset (the flush
never resets them unless asked), no row-level triggers run (the session is a replica while it
deletes, as a TRUNCATE fires none; that also sets the foreign keys aside, since TRUNCATE takes
the tables all at once). A replica session needs a superuser: the throwaway server's `postgres`
user is one; with another user (GATEWAY_TEST_USE_EXISTING=1), or when the flush resets the
sequences or cascades to tables outside the list, Django's own TRUNCATE runs as before.
"""

from __future__ import annotations

from typing import Any

_SUPERUSER_ATTR = "_gateway_test_is_superuser"


def _is_superuser(connection: Any) -> bool:
    known = getattr(connection, _SUPERUSER_ATTR, None)
    if known is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('is_superuser')")
            known = cursor.fetchone()[0] == "on"
        setattr(connection, _SUPERUSER_ATTR, known)
    return known


def install() -> None:
    """Patch the PostgreSQL backend's `sql_flush` in this (test) process (not with
    GATEWAY_TEST_TRUNCATE=1: Django's TRUNCATE, to compare or to rule this out)."""
    import os

    if os.environ.get("GATEWAY_TEST_TRUNCATE") == "1":
        return
    try:
        from django.db.backends.postgresql.operations import DatabaseOperations
    except ImportError:  # no psycopg: no PostgreSQL runs here
        return
    if getattr(DatabaseOperations.sql_flush, "_gateway_fast_flush", False):
        return
    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade or not _is_superuser(self.connection):
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        # execute_sql_flush runs these in one transaction: SET LOCAL ends with it.
        return [
            "SET LOCAL session_replication_role = replica;",
            *(f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables),
        ]

    sql_flush._gateway_fast_flush = True  # type: ignore[attr-defined]
    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
