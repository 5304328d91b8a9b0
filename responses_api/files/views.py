"""`/v1/files` views: parse, call a service or selector, answer. Thin, like the others.

An upload's body reaches the view spooled to a temporary file (api/asgi.py UPLOAD_BODY), and
the multipart form is parsed in a thread: Django's parser writes a large file part to a
temporary file of its own, and the store streams it to the storage from there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from django.core.files.uploadhandler import FileUploadHandler
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import ParseError
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from ..api.asgi import UPLOAD_BODY
from ..api.drf import ApiRequest, ApiView
from ..api.openapi import ref
from ..api.queries import FileListQuery
from ..protocol.errors import InvalidRequest
from ..store import db
from ..store.files import CHUNK_BYTES, file_storage
from . import selectors, services


class UploadParser(MultiPartParser):
    """multipart/form-data, as the SDK's `files.create` sends it; anything else is a 400 naming `file`."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        if not (media_type or "").lower().startswith("multipart/form-data"):
            raise InvalidRequest("Upload the file as multipart/form-data (fields 'file' and 'purpose').", param="file")
        try:
            return super().parse(stream, media_type, parser_context)
        except ParseError as exc:
            raise InvalidRequest(f"The multipart body could not be read: {exc.detail}", param="file") from None


class _NameRecorder(FileUploadHandler):
    """Notes each file part's name as sent: Django's uploaded file cuts a name to 255
    characters, which would store another name than the client's instead of refusing it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.names: dict[str, str] = {}

    def new_file(self, field_name: str, file_name: str, *args: Any, **kwargs: Any) -> None:
        self.names[field_name] = file_name

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        return raw_data  # on to the handlers that keep it

    def file_complete(self, file_size: int) -> None:
        return None


def _form(request: ApiRequest) -> tuple[Any, Any, Any, Any]:
    """The form's file, purpose and expires_after (`expires_after[anchor]` and
    `expires_after[seconds]` as the SDK sends a nested field), read in a thread."""
    recorder = _NameRecorder()
    django_request = request._request
    django_request.upload_handlers = [recorder, *django_request.upload_handlers]
    data: Any = request.data  # a QueryDict for a multipart body
    upload = request.FILES.get("file")
    if upload is not None and "file" in recorder.names:
        upload.sent_name = recorder.names["file"]  # checked against the column (services.file_create)
    return (
        upload,
        data.get("purpose"),
        data.get("expires_after[anchor]"),
        data.get("expires_after[seconds]"),
    )


class FilesView(ApiView):
    """`/v1/files`: upload one; list the tenant's."""

    parser_classes = (UploadParser,)

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        view = super().as_view(**initkwargs)
        view.__dict__[UPLOAD_BODY] = True  # its body is spooled, not read into memory (api/asgi.py)
        return view

    @extend_schema(
        operation_id="createFile",
        tags=["Files"],
        summary="Upload a file",
        description=(
            "A multipart form: `file`, `purpose` (`user_data` or `assistants`) and optionally "
            "`expires_after[anchor]=created_at` with `expires_after[seconds]` (3600 to 2592000). "
            "PDFs, PNG/JPEG/GIF/WebP images and UTF-8 text are accepted; the declared type must "
            "match the bytes. At most GATEWAY_FILES_MAX_BYTES."
        ),
        request={"multipart/form-data": ref("CreateFileBody")},
        responses={
            200: ref("OpenAIFile"),
            413: OpenApiResponse(ref("GatewayError"), description="The file is larger than the gateway accepts."),
        },
    )
    async def post(self, request: ApiRequest) -> Response:
        upload, purpose, anchor, seconds = await asyncio.to_thread(_form, request)
        services.check_purpose(purpose)  # before anything else: a wrong purpose is named first
        expires_after = services.check_expires_after(anchor, seconds)
        principal = self.principal
        stored = await db.run(
            services.file_create,
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            upload=upload,
            purpose=purpose,
            expires_after=expires_after,
        )
        return Response(selectors.file_object(stored))

    @extend_schema(
        operation_id="listFiles",
        tags=["Files"],
        summary="List files",
        description="The key's tenant's files, newest first by default.",
        parameters=FileListQuery.openapi_parameters(),
        responses={200: ref("OpenAIFileList")},
    )
    async def get(self, request: ApiRequest) -> Response:
        page = await db.run(
            selectors.files_page, tenant_id=self.principal.tenant_id, **FileListQuery.parse(request.query_params)
        )
        return Response(page.as_dict())


class FileDetailView(ApiView):
    """`/v1/files/{id}`: retrieve, delete."""

    @extend_schema(
        operation_id="retrieveFile", tags=["Files"], summary="Retrieve a file", responses={200: ref("OpenAIFile")}
    )
    async def get(self, request: ApiRequest, file_id: str) -> Response:
        stored = await db.run(selectors.file_get, tenant_id=self.principal.tenant_id, file_id=file_id)
        return Response(selectors.file_object(stored))

    @extend_schema(
        operation_id="deleteFile",
        tags=["Files"],
        summary="Delete a file",
        description="Its row and its bytes.",
        responses={200: ref("DeletedFile")},
    )
    async def delete(self, request: ApiRequest, file_id: str) -> Response:
        deleted = await db.run(services.file_delete, tenant_id=self.principal.tenant_id, file_id=file_id)
        return Response({"id": deleted, "object": "file", "deleted": True})


class FileContentView(ApiView):
    """`/v1/files/{id}/content`: the file's bytes, streamed from the storage."""

    @extend_schema(
        operation_id="downloadFile",
        tags=["Files"],
        summary="Retrieve a file's content",
        responses={(200, "application/octet-stream"): OpenApiResponse(description="The file's bytes.")},
    )
    async def get(self, request: ApiRequest, file_id: str) -> StreamingHttpResponse:
        stored = await db.run(selectors.file_get, tenant_id=self.principal.tenant_id, file_id=file_id)
        handle = await asyncio.to_thread(file_storage().open, stored.storage_name, "rb")
        response = StreamingHttpResponse(
            _chunks(handle), content_type=stored.content_type or "application/octet-stream"
        )
        response["Content-Length"] = str(stored.bytes)
        response["Content-Disposition"] = _attachment(stored.filename)
        return response


async def _chunks(handle: Any) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
            yield chunk
    finally:
        await asyncio.to_thread(handle.close)


def _attachment(filename: str) -> str:
    return f"attachment; filename*=UTF-8''{quote(filename, safe='')}"
