"""Admin tests: static files resolve without collectstatic (the Manifest storage needs its manifest)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _plain_static_storage(settings) -> None:  # type: ignore[no-untyped-def]
    # Production serves collected, hashed files (whitenoise + CompressedManifestStaticFilesStorage,
    # after `collectstatic`); tests render `{% static %}` without a manifest.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
