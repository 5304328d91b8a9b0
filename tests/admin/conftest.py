"""Admin tests: static files resolve without collectstatic (the Manifest storage needs its manifest);
the browser tests' screenshot folder, printed at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_screenshots: list[Path] = []


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    """Where the browser tests keep a screenshot of every page: $GATEWAY_TEST_ARTIFACTS, or
    else pytest's temporary directory (it keeps the last three runs)."""
    configured = os.environ.get("GATEWAY_TEST_ARTIFACTS")
    folder = Path(configured) if configured else tmp_path_factory.getbasetemp() / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    _screenshots.append(folder)
    return folder


def pytest_terminal_summary(terminalreporter) -> None:
    for folder in _screenshots:
        terminalreporter.write_line(f"admin screenshots: {folder}")


@pytest.fixture(autouse=True)
def _plain_static_storage(settings) -> None:
    # Production serves collected, hashed files (whitenoise + CompressedManifestStaticFilesStorage,
    # after `collectstatic`); tests render `{% static %}` without a manifest.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
