"""`/v1/vector_stores` with the real `openai` SDK: stores, files, batches, ingestion on the
worker (a real Celery worker on PostgreSQL; the in-process runner embedded), hybrid and
full-text search, filters, tenant isolation and bad input."""

from __future__ import annotations

import time

import openai
import pytest

from tests.support.harness import Gateway, make_key
from tests.support.upstream import ScriptedUpstream
from tests.vector_stores.conftest import docx_bytes, pdf_bytes, save, wait_files

pytestmark = pytest.mark.embedded

DOGS = "Dogs are loyal companions. A dog needs daily walks, good food and training. Puppies chew shoes."
TAXES = "Income tax returns are due in April. Keep receipts for deductions and file the forms on time."
GARDEN = "Tomatoes grow best in full sun. Water the garden early in the morning and mulch the beds."


def test_vector_store_lifecycle_with_the_sdk(gateway: Gateway, worker, embeddings_route) -> None:
    client = gateway.openai()
    dogs, taxes = save(gateway.tenant_id, "dogs.txt", DOGS), save(gateway.tenant_id, "taxes.md", TAXES)
    store = client.vector_stores.create(
        name="handbook",
        file_ids=[dogs],
        metadata={"team": "docs"},
        expires_after={"anchor": "last_active_at", "days": 7},
    )
    assert store.object == "vector_store" and store.id.startswith("vs_")
    assert store.name == "handbook" and store.metadata == {"team": "docs"}
    assert store.expires_after is not None and store.expires_after.days == 7
    assert store.expires_at is not None and store.expires_at - store.last_active_at == 7 * 86400
    assert store.file_counts.total == 1

    attached = client.vector_stores.files.create_and_poll(
        file_id=taxes, vector_store_id=store.id, attributes={"year": 2025, "kind": "finance"}, poll_interval_ms=100
    )
    assert attached.status == "completed" and attached.id == taxes and attached.usage_bytes > 0
    assert attached.attributes == {"year": 2025, "kind": "finance"}
    assert attached.chunking_strategy is not None and attached.chunking_strategy.type == "static"
    assert attached.chunking_strategy.static.max_chunk_size_tokens == 800
    done = wait_files(client, store.id)
    assert done.status == "completed"
    assert (done.file_counts.completed, done.file_counts.total, done.file_counts.in_progress) == (2, 2, 0)
    assert done.usage_bytes >= attached.usage_bytes

    listed = client.vector_stores.files.list(vector_store_id=store.id, order="asc")
    assert [f.id for f in listed.data] == [dogs, taxes]
    assert [f.id for f in client.vector_stores.files.list(vector_store_id=store.id, limit=1).data] == [taxes]
    assert [f.id for f in client.vector_stores.files.list(vector_store_id=store.id, filter="failed").data] == []
    updated = client.vector_stores.files.update(taxes, vector_store_id=store.id, attributes={"year": 2026})
    assert updated.attributes == {"year": 2026}
    content = list(client.vector_stores.files.content(taxes, vector_store_id=store.id))
    assert [part.text for part in content] == [TAXES]

    renamed = client.vector_stores.update(store.id, name="manual", metadata={"team": "ops"}, expires_after=None)
    assert renamed.name == "manual" and renamed.metadata == {"team": "ops"} and renamed.expires_at is None
    assert [s.id for s in client.vector_stores.list().data] == [store.id]

    removed = client.vector_stores.files.delete(taxes, vector_store_id=store.id)
    assert removed.deleted and removed.object == "vector_store.file.deleted"
    assert client.vector_stores.retrieve(store.id).file_counts.total == 1
    deleted = client.vector_stores.delete(store.id)
    assert deleted.deleted and deleted.object == "vector_store.deleted"
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(store.id)
    from responses_api.models import StoredFile, VectorChunk

    assert StoredFile.objects.filter(id__in=[dogs, taxes]).count() == 2  # the files stay
    assert not VectorChunk.objects.exists()


def test_hybrid_search_ranks_filters_and_counts_the_embeddings(
    gateway: Gateway, worker, scripted: ScriptedUpstream, embeddings_route
) -> None:
    client = gateway.openai()
    ids = {
        name: save(gateway.tenant_id, f"{name}.txt", text)
        for name, text in (("dogs", DOGS), ("taxes", TAXES), ("garden", GARDEN))
    }
    store = client.vector_stores.create(name="kb")
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id,
        files=[
            {"file_id": ids["dogs"], "attributes": {"topic": "pets", "pages": 3}},
            {"file_id": ids["taxes"], "attributes": {"topic": "money", "pages": 10}},
            {"file_id": ids["garden"], "attributes": {"topic": "home", "pages": 5, "draft": True}},
        ],
        poll_interval_ms=100,
    )
    assert batch.status == "completed" and batch.file_counts.completed == 3
    raw = gateway.http().get(f"/v1/vector_stores/{store.id}")
    assert raw.headers["x-gateway-vector-search"] == "hybrid"

    embedded = [r for r in scripted.requests if r.path == "/v1/embeddings"]
    assert embedded and all(r.body["model"] == "bow-embed" for r in embedded)

    results = client.vector_stores.search(store.id, query="How often should my dog go for walks?")
    assert results.data[0].file_id == ids["dogs"] and results.data[0].filename == "dogs.txt"
    assert results.data[0].attributes == {"topic": "pets", "pages": 3}
    assert DOGS in results.data[0].content[0].text
    assert all(0 < r.score <= 1 for r in results.data)
    assert [r.score for r in results.data] == sorted((r.score for r in results.data), reverse=True)

    one = client.vector_stores.search(store.id, query="dog walks", max_num_results=1)
    assert [r.file_id for r in one.data] == [ids["dogs"]]
    strict = client.vector_stores.search(store.id, query="dog walks", ranking_options={"score_threshold": 0.999})
    assert strict.data == []
    rewritten = client.vector_stores.search(store.id, query="What is the tax deadline?", rewrite_query=True)
    assert rewritten.search_query == ["tax deadline"] and rewritten.data[0].file_id == ids["taxes"]

    pets_only = client.vector_stores.search(
        store.id, query="receipts", filters={"type": "eq", "key": "topic", "value": "pets"}
    )
    assert {r.file_id for r in pets_only.data} <= {ids["dogs"]}
    compound = client.vector_stores.search(
        store.id,
        query="sun water garden tax dog",
        filters={
            "type": "or",
            "filters": [
                {"type": "gte", "key": "pages", "value": 10},
                {"type": "eq", "key": "draft", "value": True},
            ],
        },
    )
    assert {r.file_id for r in compound.data} == {ids["taxes"], ids["garden"]}
    excluded = client.vector_stores.search(
        store.id, query="sun water garden tax dog", filters={"type": "nin", "key": "topic", "value": ["pets", "home"]}
    )
    assert {r.file_id for r in excluded.data} == {ids["taxes"]}

    # A filter on an attribute no file has: a 400 naming it (a typo would match nothing silently).
    with pytest.raises(openai.BadRequestError) as bad:
        client.vector_stores.search(
            store.id,
            query="dog",
            filters={"type": "and", "filters": [{"type": "eq", "key": "topci", "value": "pets"}]},
        )
    assert bad.value.body["param"] == "filters.filters[0].key"  # type: ignore[index]

    # Every embeddings call (ingestion and queries) is the tenant's usage.
    from responses_api.models import UsageRecord

    deadline = time.monotonic() + 10
    while not UsageRecord.objects.filter(tenant_id=gateway.tenant_id, model="bow-embed").exists():
        assert time.monotonic() < deadline, "no embeddings usage recorded"
        time.sleep(0.2)
    assert UsageRecord.objects.filter(model="bow-embed").first().endpoint == "embeddings"  # type: ignore[union-attr]


def test_full_text_search_without_an_embeddings_route(
    gateway: Gateway, worker, scripted: ScriptedUpstream, settings
) -> None:
    settings.GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL = ""
    client = gateway.openai()
    ids = [save(gateway.tenant_id, "dogs.txt", DOGS), save(gateway.tenant_id, "garden.txt", GARDEN)]
    store = client.vector_stores.create(name="plain", file_ids=ids)
    wait_files(client, store.id)
    assert gateway.http().get(f"/v1/vector_stores/{store.id}").headers["x-gateway-vector-search"] == "full_text"
    found = client.vector_stores.search(store.id, query="tomatoes in the garden")
    assert [r.filename for r in found.data] == ["garden.txt"] and 0 < found.data[0].score < 1
    assert client.vector_stores.search(store.id, query="spaceships").data == []
    assert not [r for r in scripted.requests if r.path == "/v1/embeddings"]


def test_pdf_docx_chunking_and_failures_recorded(
    gateway: Gateway, worker, scripted: ScriptedUpstream, embeddings_route
) -> None:
    client = gateway.openai()
    pdf = save(gateway.tenant_id, "report.pdf", pdf_bytes("Quarterly zebra migration report"), "application/pdf")
    word = save(
        gateway.tenant_id,
        "memo.docx",
        docx_bytes("Memo about the giraffe enclosure.", "Second paragraph."),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    )
    binary = save(gateway.tenant_id, "blob.bin", b"\x00\x01\x02", "application/octet-stream")
    broken = save(gateway.tenant_id, "broken.pdf", b"%PDF-1.4 not really", "application/pdf")
    long_text = " ".join(f"word{i}" for i in range(1000))  # about 6,900 characters
    long = save(gateway.tenant_id, "long.txt", long_text)
    store = client.vector_stores.create(name="mixed", file_ids=[pdf, word, binary, broken])
    client.vector_stores.files.create(
        vector_store_id=store.id,
        file_id=long,
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50}},
    )
    done = wait_files(client, store.id)
    assert (done.file_counts.completed, done.file_counts.failed) == (3, 2)
    assert client.vector_stores.files.retrieve(binary, vector_store_id=store.id).last_error.code == "unsupported_file"
    assert client.vector_stores.files.retrieve(broken, vector_store_id=store.id).last_error.code == "invalid_file"
    pdf_text = [p.text for p in client.vector_stores.files.content(pdf, vector_store_id=store.id)]
    assert "zebra migration" in " ".join(pdf_text)
    assert "giraffe enclosure" in client.vector_stores.files.content(word, vector_store_id=store.id).data[0].text
    chunks = [p.text for p in client.vector_stores.files.content(long, vector_store_id=store.id)]
    assert len(chunks) > 1 and all(len(c) <= 800 for c in chunks)
    assert chunks[0].split()[-1] in chunks[1]  # consecutive chunks overlap
    assert chunks[0].startswith("word0 ") and chunks[-1].endswith("word999")
    assert client.vector_stores.search(store.id, query="zebra").data[0].file_id == pdf

    # The embeddings upstream failing: the file fails with a server_error saying so.
    scripted.embeddings_error = (500, {"error": {"message": "embedder down", "type": "server_error"}})
    again = client.vector_stores.files.create_and_poll(file_id=word, vector_store_id=store.id, poll_interval_ms=100)
    assert again.status == "failed" and again.last_error is not None
    assert again.last_error.code == "server_error" and "bow-embed" in again.last_error.message


def test_file_batches_list_and_cancel(gateway: Gateway, worker, embeddings_route) -> None:
    client = gateway.openai()
    ids = [save(gateway.tenant_id, f"f{i}.txt", f"note number {i} about dogs") for i in range(3)]
    store = client.vector_stores.create()
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=ids, attributes={"source": "notes"}, poll_interval_ms=100
    )
    assert batch.object == "vector_store.files_batch" and batch.status == "completed"
    assert batch.file_counts.total == 3
    files = client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id, order="asc")
    assert [f.id for f in files.data] == ids and all(f.attributes == {"source": "notes"} for f in files.data)
    assert client.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store.id).id == batch.id
    cancelled = client.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id)
    assert cancelled.status == "cancelled" and cancelled.file_counts.completed == 3  # ingested files stay


def test_another_tenants_store_and_files_are_unknown(gateway: Gateway, worker, embeddings_route) -> None:
    client = gateway.openai()
    mine = save(gateway.tenant_id, "dogs.txt", DOGS)
    store = client.vector_stores.create(name="private", file_ids=[mine])
    wait_files(client, store.id)
    other_key, other_tenant = make_key(tenant="other")
    other = gateway.openai(other_key)
    theirs = save(other_tenant, "theirs.txt", TAXES)
    calls = [
        lambda: other.vector_stores.retrieve(store.id),
        lambda: other.vector_stores.update(store.id, name="x"),
        lambda: other.vector_stores.delete(store.id),
        lambda: other.vector_stores.search(store.id, query="dogs"),
        lambda: other.vector_stores.files.list(vector_store_id=store.id),
        lambda: other.vector_stores.files.retrieve(mine, vector_store_id=store.id),
        lambda: other.vector_stores.files.content(mine, vector_store_id=store.id),
        lambda: other.vector_stores.files.create(vector_store_id=store.id, file_id=theirs),
        lambda: other.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[theirs]),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()
    assert [s.id for s in other.vector_stores.list().data] == []
    # Their file cannot be attached to my store: an unknown file id, nothing stored.
    with pytest.raises(openai.BadRequestError) as bad:
        client.vector_stores.files.create(vector_store_id=store.id, file_id=theirs)
    assert bad.value.body["param"] == "file_id"  # type: ignore[index]
    assert client.vector_stores.retrieve(store.id).file_counts.total == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"file_ids": ["file-nope"]}, "file_ids[0]"),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0},
                }
            },
            "chunking_strategy.static.max_chunk_size_tokens",
        ),
        ({"chunking_strategy": {"type": "fancy"}}, "chunking_strategy.type"),
        ({"expires_after": {"anchor": "created_at", "days": 3}}, "expires_after.anchor"),
        ({"metadata": {"k": 1}}, "metadata.k"),
        ({"name": 5}, "name"),
    ],
)
def test_bad_create_names_the_field_and_stores_nothing(gateway: Gateway, body, param) -> None:
    with gateway.http() as http:
        answer = http.post("/v1/vector_stores", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    from responses_api.models import VectorStore, VectorStoreFile

    assert not VectorStore.objects.exists() and not VectorStoreFile.objects.exists()


def test_bad_attach_and_search_name_the_field(gateway: Gateway, worker) -> None:
    tenant = gateway.tenant_id
    ids = [save(tenant, "a.txt", DOGS), save(tenant, "b.txt", TAXES)]
    with gateway.http() as http:
        store_id = http.post("/v1/vector_stores", json={}).json()["id"]
        cases = [
            (
                "files",
                {
                    "file_id": ids[0],
                    "chunking_strategy": {
                        "type": "static",
                        "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150},
                    },
                },
                "chunking_strategy.static.chunk_overlap_tokens",
            ),
            ("files", {"file_id": ids[0], "attributes": {f"k{i}": i for i in range(17)}}, "attributes"),
            ("files", {"file_id": ids[0], "attributes": {"k": [1]}}, "attributes.k"),
            ("file_batches", {"file_ids": [ids[0], "file-missing"]}, "file_ids[1]"),
            ("file_batches", {"file_ids": ids, "files": []}, "file_ids"),
            ("file_batches", {"files": [{"file_id": ids[1]}, {"attributes": {}}]}, "files[1].file_id"),
            ("search", {"query": "  "}, "query"),
            ("search", {"query": "dogs", "max_num_results": 51}, "max_num_results"),
            ("search", {"query": "dogs", "ranking_options": {"ranker": "best"}}, "ranking_options.ranker"),
            ("search", {"query": "dogs", "ranking_options": {"score_threshold": 2}}, "ranking_options.score_threshold"),
            ("search", {"query": "dogs", "filters": {"type": "like", "key": "a", "value": 1}}, "filters.type"),
            ("search", {"query": "dogs", "filters": {"type": "in", "key": "a", "value": "x"}}, "filters.value"),
            ("search", {"query": "dogs", "filters": {"type": "eq", "key": "missing", "value": 1}}, "filters.key"),
        ]
        for path, body, param in cases:
            answer = http.post(f"/v1/vector_stores/{store_id}/{path}", json=body)
            assert answer.status_code == 400, (path, body, answer.text)
            assert answer.json()["error"]["param"] == param, (path, body, answer.json())
        listing = http.get(f"/v1/vector_stores/{store_id}/files", params={"filter": "done"})
        assert listing.status_code == 400 and listing.json()["error"]["param"] == "filter"
    from responses_api.models import VectorStoreFile, VectorStoreFileBatch

    assert not VectorStoreFile.objects.exists() and not VectorStoreFileBatch.objects.exists()


def test_a_10_mb_document_is_ingested_and_searched(gateway: Gateway, worker, embeddings_route) -> None:
    words = [f"w{i % 5000}" for i in range(1_750_000)]  # about 10 MB of text
    words[1_234_567] = "needle"
    data = " ".join(words)
    assert len(data) > 10_000_000
    big = save(gateway.tenant_id, "big.txt", data)
    client = gateway.openai()
    started = time.monotonic()
    store = client.vector_stores.create(name="big", file_ids=[big])
    done = wait_files(client, store.id, timeout=600)
    ingest_seconds = time.monotonic() - started
    assert done.file_counts.completed == 1, client.vector_stores.files.retrieve(big, vector_store_id=store.id)
    started = time.monotonic()
    found = client.vector_stores.search(store.id, query="needle", max_num_results=3)
    print(f"10 MB: ingested in {ingest_seconds:.1f} s, searched in {time.monotonic() - started:.2f} s")
    assert "needle" in found.data[0].content[0].text


def test_a_page_of_stores_costs_a_constant_number_of_queries(gateway: Gateway, django_assert_max_num_queries) -> None:
    from responses_api.store.vector_stores import vector_stores_page

    tenant = gateway.tenant_id
    file_id = save(tenant, "a.txt", DOGS)
    with gateway.http() as http:
        for i in range(5):
            http.post("/v1/vector_stores", json={"name": f"s{i}", "file_ids": [file_id]})
    with django_assert_max_num_queries(2):
        page = vector_stores_page(tenant_id=tenant, after=None, before=None, limit=20, order="desc")
    assert [s["name"] for s in page.data] == ["s4", "s3", "s2", "s1", "s0"]
    assert all(s["file_counts"]["total"] == 1 for s in page.data)
    ids = [s["id"] for s in page.data]
    before = vector_stores_page(tenant_id=tenant, after=None, before=ids[2], limit=20, order="desc")
    assert [s["name"] for s in before.data] == ["s4", "s3"]
    after = vector_stores_page(tenant_id=tenant, after=ids[2], before=None, limit=1, order="desc")
    assert [s["name"] for s in after.data] == ["s1"] and after.has_more


def test_a_lost_ingestion_is_enqueued_again_and_runs_once(gateway: Gateway, gateway_server, worker) -> None:
    """A file attached whose task died with its process (its row stays in progress): the reaper
    enqueues it again; a claim held by a live worker is left alone."""
    from datetime import timedelta

    from django.utils import timezone

    from responses_api.models import VectorStoreFile
    from responses_api.orchestration.vector_stores import requeue_stale_ingestions
    from responses_api.store import vector_stores as store

    tenant = gateway.tenant_id
    lost, busy = save(tenant, "lost.txt", DOGS), save(tenant, "busy.txt", TAXES)
    vector_store, _ = store.vector_store_create(  # as a create would, but its tasks were never run
        tenant_id=tenant,
        api_key_id=None,
        name="restarted",
        description="",
        metadata={},
        expires_after_days=None,
        embedding_model="",
        files=[store.Attach(lost, {}, 800, 400), store.Attach(busy, {}, 800, 400)],
    )
    long_ago = timezone.now() - timedelta(hours=2)
    VectorStoreFile.objects.filter(file_id=lost).update(created_at=long_ago)
    VectorStoreFile.objects.filter(file_id=busy).update(created_at=long_ago, claimed_at=timezone.now())
    assert gateway_server.call(requeue_stale_ingestions()) == 1
    client = gateway.openai()
    deadline = time.monotonic() + 30
    while client.vector_stores.files.retrieve(lost, vector_store_id=vector_store.id).status == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.vector_stores.files.retrieve(lost, vector_store_id=vector_store.id).status == "completed"
    assert client.vector_stores.files.retrieve(busy, vector_store_id=vector_store.id).status == "in_progress"
    assert gateway_server.call(requeue_stale_ingestions()) == 0  # the live claim: not taken again


def test_what_is_embedded_passes_the_input_guardrails(
    gateway: Gateway, worker, scripted: ScriptedUpstream, embeddings_route
) -> None:
    """A file's chunks and a search query go to the embeddings model: a `block` guardrail fails
    the file (last_error names the guardrail, never the text) and refuses the query, and the
    embeddings upstream never sees what it matched."""
    from tests.responses_api.test_guardrails import guardrail

    guardrail("no-zebras", "patterns", "block", {"categories": {"animal": {"words": ["zebra"]}}})
    client = gateway.openai()
    ok = save(gateway.tenant_id, "ok.txt", "Giraffes eat leaves from tall trees.")
    bad = save(gateway.tenant_id, "bad.txt", "The zebra crossing report, page one.")
    store = client.vector_stores.create(name="guarded", file_ids=[ok, bad])
    done = wait_files(client, store.id)
    assert (done.file_counts.completed, done.file_counts.failed) == (1, 1)
    error = client.vector_stores.files.retrieve(bad, vector_store_id=store.id).last_error
    assert error is not None and "no-zebras" in error.message and "crossing" not in error.message
    with pytest.raises(openai.BadRequestError) as raised:
        client.vector_stores.search(store.id, query="zebra crossing")
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "guardrail_blocked"
    embedded = [r for r in scripted.requests if r.path == "/v1/embeddings"]
    assert embedded and not any("zebra" in str(r.body["input"]).lower() for r in embedded)
    assert [hit.file_id for hit in client.vector_stores.search(store.id, query="giraffes leaves")] == [ok]
