from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def files_root(settings, tmp_path: Path) -> Path:
    """Each test's uploads in a directory of its own (what is left there is checked)."""
    root = tmp_path / "gateway-files"
    settings.STORAGES = {
        **settings.STORAGES,
        "gateway_files": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(root)}},
    }
    return root


def stored_bytes(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def error_param(error: Any) -> Any:
    """The `param` of an openai SDK error's body (the gateway's error object)."""
    body = error.body
    assert isinstance(body, dict), body
    return body.get("param")
