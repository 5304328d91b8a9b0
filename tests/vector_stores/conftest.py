"""Files for vector-store tests, saved through the storage seam (store/files.py) as /v1/files would."""

from __future__ import annotations

import io
import time

import pytest

from tests.support.harness import Gateway, make_route
from tests.support.upstream import ScriptedUpstream

EMBED_MODEL = "bow-embed"  # the scripted upstream answers it with bag-of-words vectors


def save(tenant_id: int, filename: str, data: bytes | str, content_type: str = "text/plain") -> str:
    from responses_api.store.files import save_file

    raw = data.encode() if isinstance(data, str) else data
    return save_file(
        tenant_id=tenant_id,
        api_key_id=None,
        purpose="assistants",
        filename=filename,
        content_type=content_type,
        content=io.BytesIO(raw),
    ).id


@pytest.fixture
def embeddings_route(gateway: Gateway, scripted: ScriptedUpstream, settings) -> str:
    """An embeddings route on the scripted upstream, named as the operator's vector-store model."""
    make_route(scripted.base_url, name=EMBED_MODEL)
    settings.GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL = EMBED_MODEL
    return EMBED_MODEL


def wait_files(client, vector_store_id: str, timeout: float = 30.0):
    """The store once no file is in progress (ingestion runs on the worker)."""
    deadline = time.monotonic() + timeout
    while True:
        store = client.vector_stores.retrieve(vector_store_id)
        if store.file_counts.in_progress == 0:
            return store
        assert time.monotonic() < deadline, f"files still in progress: {store.file_counts}"
        time.sleep(0.1)


def pdf_bytes(text: str) -> bytes:
    """A one-page PDF showing `text` (Helvetica), written by hand: no PDF writer is a dependency."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def docx_bytes(*paragraphs: str) -> bytes:
    import docx

    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()
