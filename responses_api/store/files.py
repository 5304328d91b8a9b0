"""Uploaded files: bytes through Django's storage API (`gateway_files`), the row in the database.

The bytes are written first and the row second, in that order, so a row never names bytes that
are not there; a failed row deletes the bytes it would have named.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime
from typing import IO

from django.core.files.base import File
from django.core.files.storage import Storage, storages

from ..models import StoredFile, new_file_id

CHUNK_BYTES = 1 << 20


def file_storage() -> Storage:
    return storages["gateway_files"]


class _Hashing(File):  # type: ignore[type-arg]  # Django's File is generic only in stubs
    """A file object that hashes and counts what storage reads from it."""

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__(source)
        self.sha256 = hashlib.sha256()
        self.count = 0

    def chunks(self, chunk_size: int | None = None) -> Iterator[bytes]:
        for chunk in super().chunks(chunk_size or CHUNK_BYTES):
            self.sha256.update(chunk)
            self.count += len(chunk)
            yield chunk


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
    source = _Hashing(content)
    name = storage.save(f"t{tenant_id}/{file_id}", source)
    try:
        return StoredFile.objects.create(
            id=file_id,
            tenant_id=tenant_id,
            api_key_id=api_key_id,
            purpose=purpose,
            filename=filename,
            content_type=content_type,
            bytes=source.count,
            sha256=source.sha256.hexdigest(),
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
