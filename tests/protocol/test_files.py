"""protocol/files.py with plain data: which bytes pass as which type, and what each way of taking
a stored file turns a `file_id` part into (the stored item itself unchanged)."""

from __future__ import annotations

import copy

import pytest

from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.files import FileContent, check_type, declared_type, resolve_file_parts


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("application/pdf", b"%PDF-1.7\n..."),
        ("image/png", b"\x89PNG\r\n\x1a\n...."),
        ("image/jpeg", b"\xff\xd8\xff\xe0"),
        ("image/webp", b"RIFF\x00\x00\x00\x00WEBPVP8 "),
        ("text/plain", "naïve café".encode()),
        ("application/json", b'{"a": 1}'),
    ],
)
def test_bytes_of_the_declared_type_pass(kind: str, data: bytes) -> None:
    check_type(kind, [data[:3], data[3:]])  # split across chunks, as storage reads them


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("application/pdf", b"PK\x03\x04"),
        ("image/png", b"\xff\xd8\xff\xe0"),
        ("image/webp", b"RIFF\x00\x00\x00\x00AVI "),
        ("text/plain", b"caf\xe9"),
        ("text/plain", b"a\x00b"),
        ("text/plain", "é".encode()[:1]),  # cut inside a character
        ("application/zip", b"PK\x03\x04"),
        ("", b"hello"),
    ],
)
def test_anything_else_is_a_400_naming_file(kind: str, data: bytes) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_type(kind, [data])
    assert refused.value.param == "file"


def test_the_declared_type_falls_back_to_the_name() -> None:
    assert declared_type("application/octet-stream", "a.PDF") == "application/pdf"
    assert declared_type(None, "notes.md") == "text/markdown"
    assert declared_type("text/plain; charset=utf-8", "x.bin") == "text/plain"


PDF = FileContent("file-p", "r.pdf", "application/pdf", data=b"%PDF-1", text="the text")
PNG = FileContent("file-i", "i.png", "image/png", data=b"\x89PNG")
TXT = FileContent("file-t", "t.txt", "text/plain", text="plain words")


def _items() -> list[dict]:
    parts = [
        {"type": "input_text", "text": "q"},
        {"type": "input_file", "file_id": "file-p"},
        {"type": "input_image", "file_id": "file-i", "detail": "low"},
        {"type": "input_file", "file_id": "file-t"},
        {"type": "input_file", "file_id": "file-gone"},
    ]
    return [{"type": "message", "role": "user", "content": parts}]


@pytest.mark.parametrize("how", ["document", "file_data", "text"])
def test_each_way_of_taking_a_file(how: str) -> None:
    items = _items()
    before = copy.deepcopy(items)
    files = {f.file_id: f for f in (PDF, PNG, TXT)}
    parts = resolve_file_parts(items, files, how)[0]["content"]
    assert items == before  # what is stored keeps its file_id
    if how == "text":
        assert parts[1] == {"type": "input_text", "text": "[file r.pdf]\nthe text"}
    else:
        assert parts[1] == {
            "type": "input_file",
            "file_data": "data:application/pdf;base64,JVBERi0x",
            "filename": "r.pdf",
        }
    assert parts[2] == {"type": "input_image", "image_url": "data:image/png;base64,iVBORw==", "detail": "low"}
    assert parts[3] == {"type": "input_text", "text": "[file t.txt]\nplain words"}
    assert parts[4] == {"type": "input_text", "text": "[file file-gone: no longer available]"}
