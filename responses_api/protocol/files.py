"""Uploaded files in the protocol: which types the gateway accepts (and how their bytes are
recognised), and how an `input_file` or `input_image` part naming a stored file (`file_id`)
becomes what an upstream dialect takes. Pure: the bytes are read by the store
(store/files.py), the dialect's way (`WireDialect.file_parts`) by the engine.

The dialects take a stored file three ways:
- "document": a PDF as the file's bytes (Anthropic's document block, from `file_data`);
- "file_data": a PDF as the file's bytes in `file_data` (a native Responses upstream: our
  `file_id` means nothing there);
- "text": the PDF's extracted text (Chat Completions servers take no document).
Text files become their text and images an image part (a data URL) on every dialect.
"""

from __future__ import annotations

import base64
import codecs
import mimetypes
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequest

FILE_PURPOSES = ("user_data", "assistants")
# Every purpose OpenAI's API names; those not served are a 400 that says so, not "unknown".
OTHER_PURPOSES = ("assistants_output", "batch", "batch_output", "fine-tune", "fine-tune-results", "vision", "evals")
# OpenAI's bounds of `expires_after.seconds` (one hour to 30 days).
EXPIRES_MIN_SECONDS, EXPIRES_MAX_SECONDS = 3600, 2592000

PDF = "application/pdf"
# Images by their magic bytes (what Anthropic and OpenAI take as image input).
IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at offset 8 (sniff_type)
}
# Text types: any bytes that are UTF-8 without NUL.
TEXT_TYPES = frozenset(
    {
        "text/plain",
        "text/markdown",
        "text/csv",
        "text/html",
        "text/xml",
        "text/x-python",
        "text/javascript",
        "text/css",
        "application/json",
        "application/xml",
        "application/x-yaml",
        "text/yaml",
    }
)
ACCEPTED_TYPES = frozenset({PDF, *IMAGE_MAGIC, *TEXT_TYPES})
# Extensions mimetypes does not know everywhere (a client that sends no type for notes.md).
_EXTENSIONS = {".md": "text/markdown", ".markdown": "text/markdown", ".yaml": "text/yaml", ".yml": "text/yaml"}
# A sniff reads this much of the head: enough for every magic above.
HEAD_BYTES = 16


def declared_type(content_type: str | None, filename: str) -> str:
    """The type a client gave (its multipart part's Content-Type, parameters dropped), or the
    one its file name implies when it gave none or only `application/octet-stream`."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind and kind != "application/octet-stream":
        return kind
    dot = filename.rfind(".")
    extension = filename[dot:].lower() if dot >= 0 else ""
    return _EXTENSIONS.get(extension) or mimetypes.guess_type(filename, strict=False)[0] or kind


def check_type(kind: str, chunks: Iterable[bytes]) -> None:
    """The declared type is one the gateway takes and the bytes are of it: a 400 naming `file`
    otherwise (the chunks are the whole file, read once)."""
    if kind not in ACCEPTED_TYPES:
        raise InvalidRequest(
            f"Invalid 'file': its type {kind or '(none)'!r} is not one this gateway accepts "
            "(PDF, PNG, JPEG, GIF, WebP images and UTF-8 text such as text/plain, text/markdown, text/csv, "
            "application/json).",
            param="file",
            code="unsupported_file",
        )
    decoder = codecs.getincrementaldecoder("utf-8")() if kind in TEXT_TYPES else None
    head = b""
    for chunk in chunks:
        if len(head) < HEAD_BYTES:
            head += chunk[: HEAD_BYTES - len(head)]
        if decoder is not None:
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                raise _mismatch(kind, "it is not UTF-8 text") from None
            if b"\x00" in chunk:
                raise _mismatch(kind, "it contains NUL bytes")
    if decoder is not None:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise _mismatch(kind, "it is not UTF-8 text") from None
        return
    if not head:
        raise _mismatch(kind, "it is empty")
    if kind == PDF and not head.startswith(b"%PDF-"):
        raise _mismatch(kind, "it does not start as a PDF does (%PDF-)")
    if kind in IMAGE_MAGIC:
        ok = any(head.startswith(magic) for magic in IMAGE_MAGIC[kind])
        if kind == "image/webp":
            ok = ok and head[8:12] == b"WEBP"
        if not ok:
            raise _mismatch(kind, f"its bytes are not a {kind.split('/')[1].upper()} image")


def _mismatch(kind: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid 'file': it was declared {kind}, but {why}.", param="file", code="invalid_file_content"
    )


def is_image(kind: str) -> bool:
    return kind in IMAGE_MAGIC


# --------------------------------------------------------------------------- input parts


@dataclass(frozen=True, slots=True)
class FileContent:
    """A stored file as a model is given it: its bytes (a PDF's or an image's), or its text (a
    text file's, or a PDF's extracted text, bounded), or both for a PDF."""

    file_id: str
    filename: str
    content_type: str
    data: bytes = b""
    text: str | None = None

    def data_url(self) -> str:
        return f"data:{self.content_type};base64,{base64.b64encode(self.data).decode('ascii')}"


def file_references(items: Iterable[dict[str, Any]]) -> list[tuple[int, int, str, str]]:
    """The (item index, part index, part type, file id) of each input part naming a stored file."""
    found = []
    for i, item in enumerate(items):
        if item.get("type") != "message" or not isinstance(item.get("content"), list):
            continue
        for j, part in enumerate(item["content"]):
            if (
                isinstance(part, dict)
                and part.get("type") in ("input_file", "input_image")
                and isinstance(part.get("file_id"), str)
                and not part.get("file_data")
                and not part.get("image_url")
            ):
                found.append((i, j, part["type"], part["file_id"]))
    return found


def check_references(items: list[dict[str, Any]], known: Mapping[str, str]) -> None:
    """Each part naming a file names one of the tenant's (`known`: id -> content type), and an
    `input_image` an image: a 400 naming the part's `file_id` otherwise."""
    for i, j, kind, file_id in file_references(items):
        param = f"input[{i}].content[{j}].file_id"
        content_type = known.get(file_id)
        if content_type is None:  # another tenant's file is exactly an unknown one
            raise InvalidRequest(f"Invalid '{param}': no file with id '{file_id}'.", param=param)
        if kind == "input_image" and not is_image(content_type):
            raise InvalidRequest(f"Invalid '{param}': file '{file_id}' is {content_type}, not an image.", param=param)


def resolve_file_parts(items: list[dict[str, Any]], files: Mapping[str, FileContent], how: str) -> list[dict[str, Any]]:
    """`items` with each part naming a stored file replaced by what a dialect taking files `how`
    is sent (the module docstring); the items themselves are not changed (they are stored)."""
    references = file_references(items)
    if not references:
        return items
    out = list(items)
    by_item: dict[int, list[tuple[int, str]]] = {}
    for i, j, _kind, file_id in references:
        by_item.setdefault(i, []).append((j, file_id))
    for i, parts in by_item.items():
        content = list(out[i]["content"])
        for j, file_id in parts:
            content[j] = _resolved(content[j], files.get(file_id), file_id, how)
        out[i] = {**out[i], "content": content}
    return out


def _resolved(part: dict[str, Any], file: FileContent | None, file_id: str, how: str) -> dict[str, Any]:
    if file is None:  # deleted since the item was stored: the model is told, the call goes on
        return {"type": "input_text", "text": f"[file {file_id}: no longer available]"}
    if is_image(file.content_type):
        return {"type": "input_image", "image_url": file.data_url(), "detail": part.get("detail") or "auto"}
    if file.content_type == PDF and how in ("document", "file_data") and file.data:  # redacted: its text
        return {"type": "input_file", "file_data": file.data_url(), "filename": file.filename}
    return {"type": "input_text", "text": f"[file {file.filename}]\n{file.text or ''}"}


def bounded_text(text: str, limit: int) -> str:
    """At most `limit` characters of a file's text, saying where it was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... truncated: the file's text is {len(text)} characters, {limit} are given]"
