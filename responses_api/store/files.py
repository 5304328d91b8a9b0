"""Uploaded files: bytes through Django's storage API (`gateway_files`), the row in the database.

The bytes are written first and the row second, in that order, so a row never names bytes that
are not there; a failed row deletes the bytes it would have named.
"""

from __future__ import annotations

import hashlib
import io
import logging
import tempfile
from collections.abc import Iterable
from datetime import datetime
from typing import IO, Any

from django.conf import settings
from django.core.files.base import File
from django.core.files.storage import Storage, storages
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone

from ..models import StoredFile, new_file_id
from ..protocol.files import PDF, FileContent, bounded_text, is_image

log = logging.getLogger("gateway.files")

CHUNK_BYTES = 1 << 20


def file_storage() -> Storage:
    return storages["gateway_files"]


def _measured(content: IO[bytes]) -> tuple[IO[bytes], str, int]:
    """The content (seekable, at its start), its SHA-256 and its size, read once in chunks.

    Measured before the storage reads it, not while: a storage may read it its own way
    (django-storages' S3 backend hands it to boto3, which reads parts of it, perhaps twice on a
    retry). Content that cannot seek is spooled to a temporary file first."""
    digest = hashlib.sha256()
    size = 0
    seekable = content.seekable() if hasattr(content, "seekable") else False
    if seekable:
        content.seek(0)
        target: IO[bytes] = content
        while chunk := content.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    else:
        target = tempfile.SpooledTemporaryFile(max_size=CHUNK_BYTES * 8)  # noqa: SIM115 - closed by save_file
        while chunk := content.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            target.write(chunk)
    target.seek(0)
    return target, digest.hexdigest(), size


def save_file(
    *,
    tenant_id: int,
    api_key_id: int | None,
    purpose: str,
    filename: str,
    content_type: str,
    content: IO[bytes],
    expires_at: datetime | None = None,
) -> StoredFile:
    file_id = new_file_id()
    storage = file_storage()
    source, sha256, size = _measured(content)
    try:
        name = storage.save(f"t{tenant_id}/{file_id}", File(source))
    finally:
        if source is not content:
            source.close()
    try:
        return StoredFile.objects.create(
            id=file_id,
            tenant_id=tenant_id,
            api_key_id=api_key_id,
            purpose=purpose,
            filename=filename,
            content_type=content_type,
            bytes=size,
            sha256=sha256,
            storage_name=name,
            expires_at=expires_at,
        )
    except BaseException:
        storage.delete(name)
        raise


def tenant_file(tenant_id: int, file_id: str) -> StoredFile | None:
    return StoredFile.objects.filter(tenant_id=tenant_id, id=file_id).first()


def read_bytes(stored: StoredFile) -> bytes:
    with file_storage().open(stored.storage_name, "rb") as handle:
        return bytes(handle.read())


def delete_file(stored: StoredFile) -> None:
    """The row first (a reader never finds a row without bytes), then the bytes."""
    name = stored.storage_name
    stored.delete()
    file_storage().delete(name)


# --------------------------------------------------------------------------- reads for a run


def live_files(tenant_id: int, file_ids: Iterable[str]) -> list[StoredFile]:
    """The tenant's files among `file_ids` that have not expired (an expired file waiting for
    the retention job is gone for its clients already)."""
    now = timezone.now()
    return list(StoredFile.objects.filter(tenant_id=tenant_id, id__in=set(file_ids)).exclude(expires_at__lte=now))


def file_content(stored: StoredFile) -> FileContent:
    """A stored file as a model is given it (protocol/files.py): an image's or a PDF's bytes, a
    PDF's text extracted (pypdf), a text file's text; text bounded by GATEWAY_FILES_MAX_TEXT_CHARS."""
    limit = settings.GATEWAY_FILES_MAX_TEXT_CHARS
    data = read_bytes(stored)
    kind = stored.content_type
    if is_image(kind):
        return FileContent(stored.id, stored.filename, kind, data=data)
    if kind == PDF:
        return FileContent(stored.id, stored.filename, kind, data=data, text=bounded_text(pdf_text(data, limit), limit))
    return FileContent(stored.id, stored.filename, kind, text=bounded_text(data.decode("utf-8", "replace"), limit))


def pdf_text(data: bytes, limit: int) -> str:
    """A PDF's text, page by page until `limit` characters (one past it, so the cut is said);
    a PDF pypdf cannot read gives what it read (said in the text), not an error mid-run."""
    from pypdf import PdfReader  # here: a web process that never reads a PDF does not import it

    pages: list[str] = []
    size = 0
    try:
        reader = PdfReader(io.BytesIO(data))
        for page in reader.pages:
            text = page.extract_text() or ""
            pages.append(text)
            size += len(text) + 1
            if size > limit:
                break
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds on a damaged file
        log.warning("PDF text extraction failed: %s: %s", type(exc).__name__, str(exc)[:200])
        pages.append("[the rest of this PDF could not be read]")
    return "\n".join(pages)


# --------------------------------------------------------------------------- deletion


def files_delete(queryset: QuerySet[StoredFile]) -> int:
    """Delete the files of `queryset`: the rows, and their bytes once that commits (`_bytes_go`)."""
    deleted, _ = queryset.delete()
    return deleted


@receiver(post_delete, sender=StoredFile, dispatch_uid="stored-file-bytes")
def _bytes_go(sender: type[StoredFile], instance: StoredFile, **kwargs: Any) -> None:
    """A file's bytes go with its row however the row goes: an API or admin deletion, the
    retention job, or its tenant's deletion (a cascade): after the commit, so a rolled-back
    deletion keeps them. A failure is logged: no client can reach bytes without a row."""
    name = instance.storage_name

    def delete() -> None:
        try:
            file_storage().delete(name)
        except Exception:  # one store's failure must not undo a committed deletion (logged)
            log.warning("could not delete file bytes %s", name, exc_info=True)

    transaction.on_commit(delete)


def expired_files_delete(*, now: datetime | None = None, tenant_id: int | None = None) -> int:
    """The files whose `expires_after` has passed (the retention job's)."""
    qs = StoredFile.objects.filter(expires_at__lte=now or timezone.now())
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    return files_delete(qs)


def files_retention_delete(*, tenant_id: int, cutoff: datetime) -> int:
    """A tenant's files uploaded before its retention cutoff (files are stored data like responses)."""
    return files_delete(StoredFile.objects.filter(tenant_id=tenant_id, created_at__lt=cutoff))
