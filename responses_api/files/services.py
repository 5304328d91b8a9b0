"""Writes of uploaded files: an upload checked whole before anything is stored (purpose, name,
size, type and bytes), then its bytes and row (store/files.py: bytes first, a failed row
deletes them); a deletion removes both."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.utils import timezone

from ..models import StoredFile
from ..protocol.errors import InvalidRequest, RequestTooLarge
from ..protocol.files import (
    EXPIRES_MAX_SECONDS,
    EXPIRES_MIN_SECONDS,
    FILE_PURPOSES,
    OTHER_PURPOSES,
    check_type,
    declared_type,
)
from ..store.files import delete_file, save_file
from .selectors import file_get

_PURPOSE_LENGTH = StoredFile._meta.get_field("purpose").max_length or 32
_FILENAME_LENGTH = StoredFile._meta.get_field("filename").max_length or 255
_TYPE_LENGTH = StoredFile._meta.get_field("content_type").max_length or 255


def check_purpose(purpose: Any) -> str:
    if not isinstance(purpose, str) or not purpose:
        raise InvalidRequest("Missing required parameter: 'purpose'.", param="purpose")
    if purpose in FILE_PURPOSES:
        return purpose
    shown = purpose[:_PURPOSE_LENGTH]
    if purpose in OTHER_PURPOSES:
        message = f"Invalid 'purpose': '{shown}' is not served by this gateway; use one of {', '.join(FILE_PURPOSES)}."
    else:
        message = f"Invalid 'purpose': '{shown}' is not one of {', '.join(FILE_PURPOSES)}."
    raise InvalidRequest(message, param="purpose")


def check_expires_after(anchor: Any, seconds: Any) -> timedelta | None:
    """`expires_after` as OpenAI takes it: anchor `created_at`, 3600 to 2592000 seconds."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise InvalidRequest("Invalid 'expires_after.anchor': expected 'created_at'.", param="expires_after.anchor")
    try:
        value = int(seconds)
    except (TypeError, ValueError):
        value = -1
    if not EXPIRES_MIN_SECONDS <= value <= EXPIRES_MAX_SECONDS:
        raise InvalidRequest(
            f"Invalid 'expires_after.seconds': expected an integer from {EXPIRES_MIN_SECONDS} to "
            f"{EXPIRES_MAX_SECONDS}.",
            param="expires_after.seconds",
        )
    return timedelta(seconds=value)


def file_create(
    *,
    tenant_id: int,
    api_key_id: int | None,
    upload: UploadedFile[bytes] | None,
    purpose: Any,
    expires_after: timedelta | None,
) -> StoredFile:
    """Check the upload whole, then store it: a refused upload leaves no row and no bytes."""
    purpose = check_purpose(purpose)
    if upload is None:
        raise InvalidRequest("Missing required parameter: 'file'.", param="file")
    filename = upload.name or ""
    if not filename or "\x00" in filename:
        raise InvalidRequest("Invalid 'file': it needs a file name.", param="file")
    # The name as sent (views._NameRecorder): Django's uploaded file would cut it to fit.
    if len(getattr(upload, "sent_name", filename)) > _FILENAME_LENGTH:
        raise InvalidRequest(f"Invalid 'file': its name is longer than {_FILENAME_LENGTH} characters.", param="file")
    if (upload.size or 0) > settings.GATEWAY_FILES_MAX_BYTES:
        raise RequestTooLarge(
            f"Invalid 'file': it is larger than this gateway accepts ({settings.GATEWAY_FILES_MAX_BYTES} bytes).",
            param="file",
        )
    if not upload.size:
        raise InvalidRequest("Invalid 'file': it is empty.", param="file")
    kind = declared_type(upload.content_type, filename)
    if len(kind) > _TYPE_LENGTH:
        raise InvalidRequest(f"Invalid 'file': its type is longer than {_TYPE_LENGTH} characters.", param="file")
    check_type(kind, upload.chunks())
    upload.seek(0)
    now = timezone.now()
    return save_file(
        tenant_id=tenant_id,
        api_key_id=api_key_id,
        purpose=purpose,
        filename=filename,
        content_type=kind,
        content=upload,
        expires_at=now + expires_after if expires_after is not None else None,
    )


def file_delete(*, tenant_id: int, file_id: str) -> str:
    stored = file_get(tenant_id=tenant_id, file_id=file_id)
    delete_file(stored)
    return file_id
