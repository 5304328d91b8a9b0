"""Reads of uploaded files (sync ORM; async callers use `db.run`)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ..models import StoredFile
from ..protocol.errors import InvalidRequest, NotFound
from ..store.selectors import ListPage, epoch


def file_get(*, tenant_id: int, file_id: str) -> StoredFile:
    """The tenant's file; another tenant's id, and an expired file the retention job has not
    deleted yet, are exactly an unknown id."""
    stored = StoredFile.objects.filter(tenant_id=tenant_id, id=file_id).first()
    if stored is None or (stored.expires_at is not None and stored.expires_at <= timezone.now()):
        raise NotFound(f"No such File object: {file_id}", param="id")
    return stored


def file_object(stored: StoredFile) -> dict[str, Any]:
    """As the OpenAI SDK types it (`FileObject`): a stored file is `processed` once uploaded."""
    return {
        "id": stored.id,
        "object": "file",
        "bytes": stored.bytes,
        "created_at": epoch(stored.created_at),
        "expires_at": epoch(stored.expires_at),
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "status_details": None,
    }


def files_page(*, tenant_id: int, after: str | None, limit: int, order: str, purpose: str | None) -> ListPage:
    """The tenant's files, newest first by default; `after` is a file id from an earlier page."""
    qs = StoredFile.objects.filter(tenant_id=tenant_id).exclude(expires_at__lte=timezone.now())
    if purpose is not None:
        qs = qs.filter(purpose=purpose)
    descending = order == "desc"
    if after is not None:
        anchor = qs.filter(id=after).values_list("created_at", flat=True).first()
        if anchor is None:
            raise InvalidRequest(f"'after': no file found with id '{after}'.", param="after")
        qs = (
            (qs.filter(created_at__lt=anchor) | qs.filter(created_at=anchor, id__lt=after))
            if descending
            else (qs.filter(created_at__gt=anchor) | qs.filter(created_at=anchor, id__gt=after))
        )
    ordering = ("-created_at", "-id") if descending else ("created_at", "id")
    rows = list(qs.order_by(*ordering)[: limit + 1])
    return ListPage([file_object(row) for row in rows[:limit]], len(rows) > limit)
