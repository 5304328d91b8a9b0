"""pytest plugin: real PostgreSQL and Redis for the test run.

Load it early with ``-p tests.support.pytest_servers`` (in ``addopts``). Its
``pytest_load_initial_conftests`` hook is ``tryfirst``, and pytest-django's is
not, so the servers are up and ``DATABASE_URL`` / ``REDIS_URL`` are in the
environment before pytest-django imports the Django settings.

Modes, chosen by environment variables:

* default: start a throwaway PostgreSQL and Redis in a temp dir, set
  ``DATABASE_URL``, ``REDIS_URL`` and ``GATEWAY_TEST_REDIS_URL``; stop them and
  restore the environment at ``pytest_unconfigure``.
* ``GATEWAY_TEST_DB=sqlite``: embedded mode. Start nothing, remove
  ``REDIS_URL`` (and a non-SQLite ``DATABASE_URL``) so the settings fall back
  to SQLite and the in-process worker.
* ``GATEWAY_TEST_USE_EXISTING=1``: use a pre-set ``DATABASE_URL`` and/or
  ``REDIS_URL`` instead of starting that server.

With pytest-xdist each worker starts its own servers; the controller, which
runs no tests, starts none.
"""

from __future__ import annotations

import atexit
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import servers

_STATE_KEY = pytest.StashKey["_ServerState"]()
_MANAGED_VARS = ("DATABASE_URL", "REDIS_URL", "GATEWAY_TEST_REDIS_URL")


class _ServerState:
    """What this process started and changed, to undo at unconfigure."""

    def __init__(self) -> None:
        self.postgres: servers.PostgresServer | None = None
        self.redis: servers.RedisServer | None = None
        self.base_dir: Path | None = None
        self.saved_env: dict[str, str | None] = {name: os.environ.get(name) for name in _MANAGED_VARS}
        self.header: list[str] = []
        self._stopped = False
        # If pytest dies between our hook and pytest_configure (e.g. the
        # Django settings fail to import), pytest_unconfigure never runs.
        atexit.register(self.stop)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        # Stop both even if the first raises; the atexit hook in servers.py
        # is the last line of defence.
        try:
            if self.redis is not None:
                self.redis.stop()
        finally:
            if self.postgres is not None:
                self.postgres.stop()
            if self.base_dir is not None:
                shutil.rmtree(self.base_dir, ignore_errors=True)
            for name, value in self.saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _is_xdist_controller(config: pytest.Config) -> bool:
    """True in a pytest-xdist controller process, which runs no tests.

    ``config.workerinput`` is only set on workers *after* this hook runs, but
    xdist exports PYTEST_XDIST_WORKER before building the worker's config.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return False
    ns = config.known_args_namespace
    numprocesses: Any = getattr(ns, "numprocesses", None)
    if numprocesses:  # an int, or "auto"/"logical"; 0 and None mean no xdist
        return True
    return bool(getattr(ns, "tx", None)) and getattr(ns, "dist", "no") != "no"


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Settings refuse to start without a SECRET_KEY when DEBUG is off; tests
    # get a throwaway one (never a production default).
    os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-0123456789abcdefghij")
    # Tests count upstream attempts and script one reply per attempt: no router retries unless
    # a test asks for them (tests/responses_api/test_router.py).
    os.environ.setdefault("GATEWAY_ROUTER_MAX_RETRIES", "0")
    state = _ServerState()
    early_config.stash[_STATE_KEY] = state
    ns = early_config.known_args_namespace
    if getattr(ns, "help", False) or getattr(ns, "version", False):
        return

    mode = os.environ.get("GATEWAY_TEST_DB", "postgres").strip().lower()
    if mode == "sqlite":
        # Embedded mode: no Redis means the in-process worker; an absent
        # DATABASE_URL means the settings' SQLite default.
        for name in ("REDIS_URL", "GATEWAY_TEST_REDIS_URL"):
            os.environ.pop(name, None)
        if not os.environ.get("DATABASE_URL", "").startswith("sqlite"):
            os.environ.pop("DATABASE_URL", None)
        state.header.append("gateway test servers: none (GATEWAY_TEST_DB=sqlite, embedded mode)")
        return
    if mode not in {"postgres", "postgresql", ""}:
        raise pytest.UsageError(f"GATEWAY_TEST_DB must be 'postgres' or 'sqlite', not {mode!r}")

    if _is_xdist_controller(early_config):
        state.header.append("gateway test servers: started by each xdist worker")
        return

    use_existing = _truthy("GATEWAY_TEST_USE_EXISTING")
    need_postgres = not (use_existing and os.environ.get("DATABASE_URL"))
    need_redis = not (use_existing and os.environ.get("REDIS_URL"))

    started = time.monotonic()
    try:
        if need_postgres or need_redis:
            state.base_dir = servers.make_run_dir("gateway-test-servers-")
            # mkdtemp makes it 0700; let the unprivileged PostgreSQL user
            # (when we are root) traverse it so the cluster can live inside.
            state.base_dir.chmod(0o711)
        if need_redis:
            assert state.base_dir is not None
            state.redis = servers.start_redis(state.base_dir)
            os.environ["REDIS_URL"] = state.redis.url
        if need_postgres:
            assert state.base_dir is not None
            state.postgres = servers.start_postgres(state.base_dir)
            os.environ["DATABASE_URL"] = state.postgres.url
    except servers.ServerStartError as exc:
        state.stop()
        # UsageError prints just the message (no traceback) and exits 4.
        raise pytest.UsageError(f"could not start the test servers: {exc}") from exc
    except BaseException:
        state.stop()
        raise
    os.environ["GATEWAY_TEST_REDIS_URL"] = os.environ["REDIS_URL"]

    elapsed = time.monotonic() - started
    pg = state.postgres.url if state.postgres else f"existing {os.environ['DATABASE_URL']}"
    rd = state.redis.url if state.redis else f"existing {os.environ['REDIS_URL']}"
    state.header.append(f"gateway test servers ({elapsed:.1f}s): postgres {pg}, redis {rd}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(_STATE_KEY, None)
    return state.header if state is not None else []


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # trylast: pytest-django and others tear down (closing their database
    # connections) before the servers go away.
    state = config.stash.get(_STATE_KEY, None)
    if state is not None:
        del config.stash[_STATE_KEY]
        state.stop()
