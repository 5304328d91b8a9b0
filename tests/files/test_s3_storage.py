"""The files' bytes in an S3-compatible store (django-storages' S3 backend, as
GATEWAY_FILES_S3_BUCKET configures it): moto's S3 server on loopback stands in for the store.
Upload, download, a PDF read for a model call, deletion and retention reach the bucket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import openai
import pytest

from tests.files.documents import pdf
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

BUCKET = "gateway-test-files"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def s3(settings, monkeypatch) -> Iterator[Any]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    import boto3

    bucket = boto3.resource("s3", endpoint_url=endpoint, region_name="us-east-1").Bucket(BUCKET)
    bucket.create()
    # What settings.py builds from GATEWAY_FILES_S3_BUCKET and GATEWAY_FILES_S3_ENDPOINT_URL.
    settings.STORAGES = {
        **settings.STORAGES,
        "gateway_files": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "location": "gateway-files",
                "default_acl": "private",
                "file_overwrite": True,
            },
        },
    }
    try:
        yield bucket
    finally:
        server.stop()


def keys(bucket: Any) -> list[str]:
    return sorted(obj.key for obj in bucket.objects.all())


def test_files_live_in_the_bucket(gateway: Gateway, scripted: ScriptedUpstream, s3: Any) -> None:
    from django.utils import timezone

    from responses_api.store.services import retention_run

    client = gateway.openai()
    document = pdf("Stored in S3", pad_to=6 * 1024 * 1024)  # past boto3's multipart threshold
    uploaded = client.files.create(file=("s3.pdf", document, "application/pdf"), purpose="user_data")
    assert keys(s3) == [f"gateway-files/t{gateway.tenant_id}/{uploaded.id}"]
    assert s3.Object(keys(s3)[0]).content_length == len(document) == uploaded.bytes
    assert client.files.content(uploaded.id).content == document

    scripted.set_default(MODEL, Reply(text="ok"))
    content = [{"type": "input_text", "text": "?"}, {"type": "input_file", "file_id": uploaded.id}]
    client.responses.create(model=MODEL, input=[{"role": "user", "content": content}])
    assert "Stored in S3" in scripted.model_calls[-1].body["messages"][-1]["content"]

    client.files.delete(uploaded.id)
    assert keys(s3) == []
    with pytest.raises(openai.NotFoundError):
        client.files.content(uploaded.id)

    brief = client.files.create(
        file=("b.txt", b"brief"), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert len(keys(s3)) == 1
    assert retention_run(now=timezone.now() + timedelta(hours=2))["files"] == 1
    assert keys(s3) == []
    assert brief.id
