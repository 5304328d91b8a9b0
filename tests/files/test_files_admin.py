"""The admin's stored files: the list shows tenant, purpose, size and dates; its delete action
removes the bytes with the rows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.urls import reverse

from tests.files.conftest import stored_bytes

pytestmark = pytest.mark.embedded


def test_the_list_and_its_delete_action(admin_client, files_root: Path, django_capture_on_commit_callbacks) -> None:
    from responses_api.models import StoredFile, Tenant
    from responses_api.store.files import save_file

    tenant = Tenant.objects.create(name="initech")
    stored = save_file(
        tenant_id=tenant.id,
        api_key_id=None,
        purpose="assistants",
        filename="handbook.md",
        content_type="text/markdown",
        content=io.BytesIO(b"# Handbook\n" * 300),
    )
    page = admin_client.get(reverse("admin:responses_api_storedfile_changelist")).content.decode()
    assert "handbook.md" in page and "initech" in page and "assistants" in page and "3.2\xa0KB" in page
    assert admin_client.get(reverse("admin:responses_api_storedfile_change", args=[stored.pk])).status_code == 200
    assert len(stored_bytes(files_root)) == 1

    with django_capture_on_commit_callbacks(execute=True):  # the bytes go once the deletion commits
        answer = admin_client.post(
            reverse("admin:responses_api_storedfile_changelist"),
            {"action": "delete_selected", "_selected_action": [stored.pk], "post": "yes"},
        )
    assert answer.status_code == 302
    assert not StoredFile.objects.exists()
    assert stored_bytes(files_root) == []
