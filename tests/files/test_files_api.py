"""`/v1/files` with the real openai SDK: upload, list, retrieve, download, delete; tenant
isolation on every id; bad uploads refused whole (no row, no bytes); a 10 MB document; retention."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path

import openai
import pytest

from tests.files.conftest import error_param, stored_bytes
from tests.files.documents import pdf, png
from tests.support.harness import Gateway, make_key

pytestmark = pytest.mark.embedded


def test_upload_list_retrieve_download_delete_with_the_sdk(gateway: Gateway, files_root: Path) -> None:
    client = gateway.openai()
    notes = client.files.create(file=("notes.md", b"# Notes\n\nhello"), purpose="user_data")
    assert notes.object == "file" and notes.id.startswith("file-") and notes.status == "processed"
    assert (notes.filename, notes.bytes, notes.purpose, notes.expires_at) == ("notes.md", 14, "user_data", None)
    report = client.files.create(
        file=("report.pdf", pdf("Quarterly report"), "application/pdf"),
        purpose="assistants",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert report.expires_at == report.created_at + 3600

    assert client.files.retrieve(notes.id).filename == "notes.md"
    assert client.files.content(notes.id).content == b"# Notes\n\nhello"
    assert client.files.content(report.id).content == pdf("Quarterly report")

    listed = client.files.list()
    assert {f.id for f in listed.data} == {notes.id, report.id}
    assert [f.id for f in client.files.list(purpose="assistants").data] == [report.id]
    first = client.files.list(limit=1, order="asc")
    assert len(first.data) == 1 and first.has_more
    rest = client.files.list(limit=1, order="asc", after=first.data[0].id)
    assert {first.data[0].id, rest.data[0].id} == {notes.id, report.id} and not rest.has_more
    assert [f.id for f in client.files.list(order="asc").data] == [first.data[0].id, rest.data[0].id]

    deleted = client.files.delete(notes.id)
    assert deleted.id == notes.id and deleted.deleted and deleted.object == "file"
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(notes.id)
    assert len(stored_bytes(files_root)) == 1  # the report's bytes only


def test_another_tenants_file_is_an_unknown_id_everywhere(gateway: Gateway, files_root: Path) -> None:
    mine = gateway.openai().files.create(file=("a.txt", b"mine"), purpose="user_data")
    other_key, _ = make_key(tenant="globex")
    other = gateway.openai(key=other_key)
    for call in (other.files.retrieve, other.files.content, other.files.delete):
        with pytest.raises(openai.NotFoundError):
            call(mine.id)
    assert other.files.list().data == []
    with pytest.raises(openai.BadRequestError) as refused:
        other.files.list(after=mine.id)
    assert error_param(refused.value) == "after"
    assert gateway.openai().files.retrieve(mine.id).id == mine.id  # still there
    assert len(stored_bytes(files_root)) == 1


def test_a_10_mb_pdf_streams_past_the_json_body_limit(gateway: Gateway, files_root: Path, settings) -> None:
    # The JSON bodies' limit is far below the upload: an upload is bounded by its own setting.
    settings.GATEWAY_MAX_REQUEST_BYTES = 1024 * 1024
    document = pdf("Ten megabytes", pad_to=10 * 1024 * 1024)
    client = gateway.openai()
    uploaded = client.files.create(file=("big.pdf", document, "application/pdf"), purpose="user_data")
    assert uploaded.bytes == len(document)
    from responses_api.models import StoredFile

    assert StoredFile.objects.get(id=uploaded.id).sha256 == hashlib.sha256(document).hexdigest()
    assert client.files.content(uploaded.id).content == document


@pytest.mark.parametrize(
    ("upload", "purpose", "status", "param"),
    [
        (("program.exe", b"MZ\x90\x00", "application/x-msdownload"), "user_data", 400, "file"),
        (("fake.pdf", b"not a pdf at all", "application/pdf"), "user_data", 400, "file"),
        (("fake.png", b"GIF89a....", "image/png"), "user_data", 400, "file"),
        (("latin1.txt", "caf\xe9".encode("latin-1"), "text/plain"), "user_data", 400, "file"),
        (("empty.txt", b"", "text/plain"), "user_data", 400, "file"),
        (("n" * 256 + ".txt", b"hello", "text/plain"), "user_data", 400, "file"),
        (("ok.txt", b"hello", "text/plain"), "fine-tune", 400, "purpose"),
        (("ok.txt", b"hello", "text/plain"), "p" * 40, 400, "purpose"),
        (("big.txt", b"x" * 5000, "text/plain"), "user_data", 413, "file"),
    ],
    ids=[
        "unknown-type",
        "not-a-pdf",
        "not-a-png",
        "not-utf8",
        "empty",
        "long-name",
        "wrong-purpose",
        "long-purpose",
        "oversized",
    ],
)
def test_a_refused_upload_leaves_no_row_and_no_bytes(
    gateway: Gateway, files_root: Path, settings, upload, purpose: str, status: int, param: str
) -> None:
    settings.GATEWAY_FILES_MAX_BYTES = 4096
    with pytest.raises(openai.APIStatusError) as refused:
        gateway.openai().files.create(file=upload, purpose=purpose)
    assert refused.value.status_code == status
    assert error_param(refused.value) == param, refused.value.body
    from responses_api.models import StoredFile

    assert not StoredFile.objects.exists()
    assert stored_bytes(files_root) == []


def test_an_upload_far_over_the_limit_is_refused_before_it_is_read(
    gateway: Gateway, files_root: Path, settings
) -> None:
    settings.GATEWAY_FILES_MAX_BYTES = 1024
    answer = gateway.http().post(
        "/v1/files", data={"purpose": "user_data"}, files={"file": ("big.txt", b"x" * (3 * 1024 * 1024), "text/plain")}
    )
    assert answer.status_code == 413 and answer.json()["error"]["param"] == "file"
    assert stored_bytes(files_root) == []


def test_bad_forms_are_400s_naming_the_field(gateway: Gateway, files_root: Path) -> None:
    http = gateway.http()
    answers = [
        (http.post("/v1/files", json={"purpose": "user_data"}), "file"),
        (http.post("/v1/files", data={"purpose": "user_data"}, files={"other": ("a.txt", b"x")}), "file"),
        (http.post("/v1/files", files={"file": ("a.txt", b"x", "text/plain")}), "purpose"),
        (
            http.post(
                "/v1/files",
                data={"purpose": "user_data", "expires_after[anchor]": "created_at", "expires_after[seconds]": "10"},
                files={"file": ("a.txt", b"x", "text/plain")},
            ),
            "expires_after.seconds",
        ),
        (http.get("/v1/files", params={"limit": 0}), "limit"),
        (http.get("/v1/files", params={"order": "up"}), "order"),
    ]
    for answer, param in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param
    assert stored_bytes(files_root) == []


def test_types_follow_the_name_when_the_client_sends_none(gateway: Gateway, files_root: Path) -> None:
    client = gateway.openai()
    image = client.files.create(file=("dot.png", png()), purpose="user_data")  # the SDK sends no type
    assert image.bytes == len(png())
    from responses_api.models import StoredFile

    assert StoredFile.objects.get(id=image.id).content_type == "image/png"


def test_retention_deletes_expired_files_rows_and_bytes(gateway: Gateway, files_root: Path) -> None:
    from django.utils import timezone

    from responses_api.models import StoredFile, Tenant
    from responses_api.store.services import retention_run

    client = gateway.openai()
    keep = client.files.create(file=("keep.txt", b"keep"), purpose="user_data")
    brief = client.files.create(
        file=("brief.txt", b"brief"), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert retention_run()["files"] == 0
    counts = retention_run(now=timezone.now() + timedelta(hours=2))
    assert counts["files"] == 1
    assert list(StoredFile.objects.values_list("id", flat=True)) == [keep.id]
    assert [p.name for p in stored_bytes(files_root)] == [keep.id]
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(brief.id)

    # The tenant's retention covers its files; deleting the tenant deletes their bytes too.
    Tenant.objects.filter(id=gateway.tenant_id).update(retention_days=1)
    assert retention_run(now=timezone.now() + timedelta(days=2))["files"] == 1
    assert stored_bytes(files_root) == []
    again = client.files.create(file=("again.txt", b"again"), purpose="user_data")
    assert [p.name for p in stored_bytes(files_root)] == [again.id]
    Tenant.objects.filter(id=gateway.tenant_id).delete()
    assert stored_bytes(files_root) == []


def test_every_file_operation_answers_a_foreign_id_as_an_unknown_one(gateway: Gateway, files_root: Path) -> None:
    mine = gateway.openai().files.create(file=("a.txt", b"mine"), purpose="user_data")
    unknown = "file-" + "0" * 48
    other_key, _ = make_key(tenant="globex")
    document = gateway.http().get("/v1/openapi.json").json()
    probed = []
    with gateway.http(other_key) as other:
        for path, ops in document["paths"].items():
            if "{file_id}" not in path or not path.startswith("/v1/files"):  # vector stores': their tests
                continue
            for method in ops:
                foreign = other.request(method.upper(), path.replace("{file_id}", mine.id))
                as_unknown = other.request(method.upper(), path.replace("{file_id}", unknown))
                assert foreign.status_code == as_unknown.status_code == 404, (method, path)
                assert foreign.text.replace(mine.id, unknown) == as_unknown.text
                probed.append((method, path))
    assert len(probed) == 3  # retrieve, delete, content
    assert gateway.openai().files.content(mine.id).content == b"mine"
