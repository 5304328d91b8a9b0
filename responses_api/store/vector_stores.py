"""Vector stores in the database: their rows, attached files, batches and chunks (writes and
reads, sync ORM; async callers use `db.run`), and the full-text half of search, in the
database's own engine (PostgreSQL's tsvector, SQLite's FTS5: migration 0039 keeps both).

Every look-up is by tenant: another tenant's vector store, file or batch is an unknown id (404).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from ..models import StoredFile, VectorChunk, VectorStore, VectorStoreFile, VectorStoreFileBatch
from ..protocol.errors import InvalidRequest, NotFound
from ..protocol.vector_stores import check_overlap, chunking_object
from .selectors import ListPage, epoch

Status = VectorStoreFile.Status
FILE_STATUSES = tuple(Status.values)


@dataclass(frozen=True, slots=True)
class Attach:
    """One file to attach: its id, attributes and chunking (tokens per chunk, overlap)."""

    file_id: str
    attributes: dict[str, Any]
    size: int
    overlap: int
    param: str = "file_id"
    chunking_param: str = "chunking_strategy"


# --------------------------------------------------------------------------- vector stores


def vector_store_get(*, tenant_id: int, vector_store_id: str, param: str = "vector_store_id") -> VectorStore:
    store = VectorStore.objects.filter(id=vector_store_id, tenant_id=tenant_id).first()
    if store is None:  # another tenant's id is exactly an unknown one
        raise NotFound(f"No vector store found with id '{vector_store_id}'.", param=param)
    return store


def expires_at(store: VectorStore) -> datetime | None:
    if store.expires_after_days is None:
        return None
    return store.last_active_at + timedelta(days=store.expires_after_days)


def is_expired(store: VectorStore) -> bool:
    at = expires_at(store)
    return at is not None and at <= timezone.now()


def _counts(rows: list[Any]) -> dict[str, int]:
    counts = dict.fromkeys(FILE_STATUSES, 0)
    for row in rows:
        counts[row["status"]] += row["n"]
    return {**counts, "total": sum(counts.values())}


def _file_counts(qs: QuerySet[VectorStoreFile]) -> dict[str, int]:
    return _counts(list(qs.order_by().values("status").annotate(n=Count("id"))))


def _store_rows(store_ids: list[str]) -> dict[str, list[Any]]:
    """Each store's files counted by status, with their bytes: one query for a page of stores."""
    rows: dict[str, list[Any]] = {store_id: [] for store_id in store_ids}
    for row in (
        VectorStoreFile.objects.filter(vector_store_id__in=store_ids)
        .order_by()
        .values("vector_store_id", "status")
        .annotate(n=Count("id"), used=Sum("usage_bytes"))
    ):
        rows[row["vector_store_id"]].append(row)
    return rows


def vector_store_object(store: VectorStore, rows: list[Any] | None = None) -> dict[str, Any]:
    """The store as the API shows it; `rows`: its files' counts, when read with a page's."""
    if rows is None:
        rows = _store_rows([store.id])[store.id]
    counts = _counts(rows)
    status = "expired" if is_expired(store) else "in_progress" if counts["in_progress"] else "completed"
    return {
        "id": store.id,
        "object": "vector_store",
        "created_at": epoch(store.created_at),
        "name": store.name,
        "description": store.description or None,
        "usage_bytes": sum(int(row["used"] or 0) for row in rows),
        "file_counts": counts,
        "status": status,
        "expires_after": (
            {"anchor": "last_active_at", "days": store.expires_after_days}
            if store.expires_after_days is not None
            else None
        ),
        "expires_at": epoch(expires_at(store)),
        "last_active_at": epoch(store.last_active_at),
        "metadata": store.metadata or {},
    }


def vector_store_create(
    *,
    tenant_id: int,
    api_key_id: int | None,
    name: str,
    description: str,
    metadata: dict[str, str],
    expires_after_days: int | None,
    embedding_model: str,
    files: list[Attach],
) -> tuple[VectorStore, list[int]]:
    """The store and its first files, in one transaction: an unknown file id stores nothing.
    Returns the attached files' row ids, for the worker to ingest once committed."""
    with transaction.atomic():
        store = VectorStore.objects.create(
            tenant_id=tenant_id,
            api_key_id=api_key_id,
            name=name,
            description=description,
            metadata=metadata,
            expires_after_days=expires_after_days,
            embedding_model=embedding_model,
        )
        attached = _attach(store, files, batch=None)
    return store, attached


def vector_store_update(
    *, tenant_id: int, vector_store_id: str, changes: dict[str, Any], expires_after_days: int | None | bool
) -> VectorStore:
    """`expires_after_days` False: unchanged; None: the policy removed."""
    store = vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id)
    for name, value in changes.items():
        setattr(store, name, value)
    fields = list(changes)
    if expires_after_days is not False:
        store.expires_after_days = expires_after_days
        fields.append("expires_after_days")
    if fields:
        store.save(update_fields=fields)
    return store


def vector_store_delete(*, tenant_id: int, vector_store_id: str) -> None:
    """The store, its attachments and chunks; the files themselves stay (as OpenAI's do)."""
    vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id).delete()


def _page(
    qs: QuerySet[Any],
    *,
    cursor_field: str,
    after: str | None,
    before: str | None,
    limit: int,
    order: str,
    what: str,
) -> tuple[list[Any], bool]:
    """Cursor paging by (created_at, pk): `after` and `before` are public ids of this list."""
    descending = order == "desc"
    for name, cursor, forward in (("after", after, True), ("before", before, False)):
        if cursor is None:
            continue
        anchor = qs.filter(**{cursor_field: cursor}).values_list("created_at", "pk").first()
        if anchor is None:
            raise InvalidRequest(f"'{name}': no {what} found with id '{cursor}' in this list.", param=name)
        at, pk = anchor
        later = forward != descending  # what follows in this order, or what precedes it
        qs = (
            (qs.filter(created_at__gt=at) | qs.filter(created_at=at, pk__gt=pk))
            if later
            else (qs.filter(created_at__lt=at) | qs.filter(created_at=at, pk__lt=pk))
        )
    ordering = ("-created_at", "-pk") if descending else ("created_at", "pk")
    if before is not None and after is None:  # the page just before the cursor, in the asked order
        reverse = ("created_at", "pk") if descending else ("-created_at", "-pk")
        rows = list(qs.order_by(*reverse)[: limit + 1])
        return list(reversed(rows[:limit])), len(rows) > limit
    rows = list(qs.order_by(*ordering)[: limit + 1])
    return rows[:limit], len(rows) > limit


def vector_stores_page(*, tenant_id: int, after: str | None, before: str | None, limit: int, order: str) -> ListPage:
    rows, more = _page(
        VectorStore.objects.filter(tenant_id=tenant_id),
        cursor_field="id",
        after=after,
        before=before,
        limit=limit,
        order=order,
        what="object",
    )
    counts = _store_rows([store.id for store in rows])
    return ListPage([vector_store_object(store, counts[store.id]) for store in rows], more)


# --------------------------------------------------------------------------- attached files


def _tenant_files(tenant_id: int, files: list[Attach]) -> dict[str, StoredFile]:
    found = {f.id: f for f in StoredFile.objects.filter(tenant_id=tenant_id, id__in=[a.file_id for a in files])}
    for attach in files:
        if attach.file_id not in found:
            raise InvalidRequest(f"'{attach.param}': no file found with id '{attach.file_id}'.", param=attach.param)
    return found


def _attach(store: VectorStore, files: list[Attach], batch: VectorStoreFileBatch | None) -> list[int]:
    """Attach (or attach again: its chunks are made anew) each file; their row ids."""
    if not files:
        return []
    found = _tenant_files(store.tenant_id, files)
    for attach in files:  # after the files: an unknown file is the error a client sees first
        check_overlap(attach.size, attach.overlap, attach.chunking_param)
    existing = {row.file_id: row for row in VectorStoreFile.objects.filter(vector_store=store, file_id__in=list(found))}
    ids: list[int] = []
    now = timezone.now()
    for attach in files:
        row = existing.get(attach.file_id)
        if row is None:
            row = VectorStoreFile(vector_store=store, file=found[attach.file_id], created_at=now)
        else:
            VectorChunk.objects.filter(vector_store_file=row).delete()
        row.batch = batch
        row.claimed_at = None
        row.status = Status.IN_PROGRESS
        row.attributes = attach.attributes
        row.max_chunk_size_tokens = attach.size
        row.chunk_overlap_tokens = attach.overlap
        row.usage_bytes = 0
        row.last_error = None
        row.save()
        ids.append(row.pk)
    return ids


def vs_file_attach(*, tenant_id: int, vector_store_id: str, attach: Attach) -> VectorStoreFile:
    with transaction.atomic():
        store = vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id)
        (row_id,) = _attach(store, [attach], batch=None)
    return VectorStoreFile.objects.select_related("vector_store").get(pk=row_id)


def vs_file_get(*, tenant_id: int, vector_store_id: str, file_id: str) -> VectorStoreFile:
    row = (
        VectorStoreFile.objects.select_related("vector_store")
        .filter(vector_store_id=vector_store_id, vector_store__tenant_id=tenant_id, file_id=file_id)
        .first()
    )
    if row is None:
        vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id)  # which of the two is unknown
        raise NotFound(f"No file found with id '{file_id}' in vector store '{vector_store_id}'.", param="file_id")
    return row


def vs_file_object(row: VectorStoreFile) -> dict[str, Any]:
    return {
        "id": row.file_id,
        "object": "vector_store.file",
        "created_at": epoch(row.created_at),
        "vector_store_id": row.vector_store_id,
        "status": row.status,
        "usage_bytes": row.usage_bytes,
        "last_error": row.last_error,
        "attributes": row.attributes or {},
        "chunking_strategy": chunking_object(row.max_chunk_size_tokens, row.chunk_overlap_tokens),
    }


def vs_files_page(
    *,
    tenant_id: int,
    vector_store_id: str,
    after: str | None,
    before: str | None,
    limit: int,
    order: str,
    status: str | None,
    batch_id: str | None = None,
) -> ListPage:
    store = vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id)
    qs = VectorStoreFile.objects.filter(vector_store=store)
    if batch_id is not None:
        batch_get(tenant_id=tenant_id, vector_store_id=vector_store_id, batch_id=batch_id)
        qs = qs.filter(batch_id=batch_id)
    if status is not None:
        qs = qs.filter(status=status)
    rows, more = _page(qs, cursor_field="file_id", after=after, before=before, limit=limit, order=order, what="file")
    return ListPage([vs_file_object(row) for row in rows], more)


def vs_file_update(
    *, tenant_id: int, vector_store_id: str, file_id: str, attributes: dict[str, Any]
) -> VectorStoreFile:
    row = vs_file_get(tenant_id=tenant_id, vector_store_id=vector_store_id, file_id=file_id)
    row.attributes = attributes
    row.save(update_fields=["attributes"])
    return row


def vs_file_delete(*, tenant_id: int, vector_store_id: str, file_id: str) -> None:
    """The attachment and its chunks; the file stays (`DELETE /v1/files/{id}` removes it)."""
    vs_file_get(tenant_id=tenant_id, vector_store_id=vector_store_id, file_id=file_id).delete()


def vs_file_content(*, tenant_id: int, vector_store_id: str, file_id: str) -> list[dict[str, Any]]:
    """The file's parsed text, chunk by chunk (chunks overlap as the chunking strategy says)."""
    row = vs_file_get(tenant_id=tenant_id, vector_store_id=vector_store_id, file_id=file_id)
    texts = VectorChunk.objects.filter(vector_store_file=row).order_by("position").values_list("text", flat=True)
    return [{"type": "text", "text": text} for text in texts]


# --------------------------------------------------------------------------- batches


def batch_get(*, tenant_id: int, vector_store_id: str, batch_id: str) -> VectorStoreFileBatch:
    batch = VectorStoreFileBatch.objects.filter(
        id=batch_id, vector_store_id=vector_store_id, vector_store__tenant_id=tenant_id
    ).first()
    if batch is None:
        vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id)
        raise NotFound(
            f"No file batch found with id '{batch_id}' in vector store '{vector_store_id}'.", param="batch_id"
        )
    return batch


def batch_object(batch: VectorStoreFileBatch) -> dict[str, Any]:
    counts = _file_counts(VectorStoreFile.objects.filter(batch=batch))
    if batch.cancelled:
        status = "cancelled"
    elif counts["in_progress"]:
        status = "in_progress"
    elif counts["total"] and counts["failed"] == counts["total"]:
        status = "failed"
    else:
        status = "completed"
    return {
        "id": batch.id,
        "object": "vector_store.files_batch",
        "created_at": epoch(batch.created_at),
        "vector_store_id": batch.vector_store_id,
        "status": status,
        "file_counts": counts,
    }


def batch_create(
    *, tenant_id: int, vector_store_id: str, files: list[Attach]
) -> tuple[VectorStoreFileBatch, list[int]]:
    with transaction.atomic():
        store = vector_store_get(tenant_id=tenant_id, vector_store_id=vector_store_id)
        batch = VectorStoreFileBatch.objects.create(vector_store=store)
        attached = _attach(store, files, batch=batch)
    return batch, attached


def batch_cancel(*, tenant_id: int, vector_store_id: str, batch_id: str) -> VectorStoreFileBatch:
    """Files not yet ingested are cancelled (the worker skips them, or drops what it made)."""
    with transaction.atomic():
        batch = batch_get(tenant_id=tenant_id, vector_store_id=vector_store_id, batch_id=batch_id)
        VectorStoreFile.objects.filter(batch=batch, status=Status.IN_PROGRESS).update(status=Status.CANCELLED)
        batch.cancelled = True
        batch.save(update_fields=["cancelled"])
    return batch


# --------------------------------------------------------------------------- ingestion (the worker's)


@dataclass(frozen=True, slots=True)
class IngestJob:
    row_id: int
    tenant_id: int
    api_key_id: int | None
    embedding_model: str
    stored: StoredFile
    size: int
    overlap: int


def ingest_job(row_id: int, *, stale_after: float) -> IngestJob | None:
    """The file to ingest, claimed; None if it no longer waits (cancelled, deleted, done) or
    another worker holds a live claim on it (a task delivered twice runs once)."""
    now = timezone.now()
    claimed = (
        VectorStoreFile.objects.filter(pk=row_id, status=Status.IN_PROGRESS)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - timedelta(seconds=stale_after)))
        .update(claimed_at=now)
    )
    if not claimed:
        return None
    row = (
        VectorStoreFile.objects.select_related("vector_store", "file")
        .filter(pk=row_id, status=Status.IN_PROGRESS)
        .first()
    )
    if row is None:
        return None
    return IngestJob(
        row_id=row.pk,
        tenant_id=row.vector_store.tenant_id,
        api_key_id=row.vector_store.api_key_id,
        embedding_model=row.vector_store.embedding_model,
        stored=row.file,
        size=row.max_chunk_size_tokens,
        overlap=row.chunk_overlap_tokens,
    )


def ingest_renew(*, row_id: int) -> None:
    """The worker is still at it (between embedding calls)."""
    VectorStoreFile.objects.filter(pk=row_id, status=Status.IN_PROGRESS).update(claimed_at=timezone.now())


def ingest_stale(*, stale_after: float) -> list[int]:
    """Files in progress whose task was lost: claimed, or attached, longer ago than `stale_after`."""
    before = timezone.now() - timedelta(seconds=stale_after)
    return list(
        VectorStoreFile.objects.filter(status=Status.IN_PROGRESS)
        .filter(Q(claimed_at__lt=before) | Q(claimed_at__isnull=True, created_at__lt=before))
        .values_list("pk", flat=True)[:500]
    )


def ingest_finish(*, row_id: int, texts: list[str], vectors: list[bytes | None]) -> bool:
    """The chunks stored and the file completed, in one transaction, if it is still waiting
    (a cancel or a delete meanwhile wins: nothing is stored). Whether it was stored."""
    with transaction.atomic():
        row = VectorStoreFile.objects.select_for_update().filter(pk=row_id, status=Status.IN_PROGRESS).first()
        if row is None:
            return False
        VectorChunk.objects.filter(vector_store_file=row).delete()  # a task run twice stores once
        VectorChunk.objects.bulk_create(
            [
                VectorChunk(vector_store_file=row, position=i, text=text, embedding=vector or None)
                for i, (text, vector) in enumerate(zip(texts, vectors))
            ],
            batch_size=500,
        )
        row.usage_bytes = sum(len(t.encode()) + len(v or b"") for t, v in zip(texts, vectors))
        row.status = Status.COMPLETED
        row.save(update_fields=["usage_bytes", "status"])
    return True


def ingest_fail(*, row_id: int, code: str, message: str) -> None:
    VectorStoreFile.objects.filter(pk=row_id, status=Status.IN_PROGRESS).update(
        status=Status.FAILED, last_error={"code": code, "message": message[:2000]}
    )


# --------------------------------------------------------------------------- search (the reads)


@dataclass(frozen=True, slots=True)
class SearchFile:
    row_id: int
    file_id: str
    filename: str
    attributes: dict[str, Any]


def search_scope(
    *, tenant_id: int, vector_store_ids: list[str], param: str
) -> tuple[list[VectorStore], list[SearchFile]]:
    """The stores (each the tenant's, else a 404 naming it) and their completed files; marks them active."""
    stores = []
    for i, store_id in enumerate(vector_store_ids):
        store = vector_store_get(
            tenant_id=tenant_id,
            vector_store_id=store_id,
            param=param if len(vector_store_ids) == 1 else f"{param}[{i}]",
        )
        if is_expired(store):
            raise InvalidRequest(f"Vector store '{store_id}' has expired.", param=param, code="vector_store_expired")
        stores.append(store)
    now = timezone.now()
    VectorStore.objects.filter(id__in=[s.id for s in stores]).update(last_active_at=now)
    files = [
        SearchFile(row_id=pk, file_id=file_id, filename=filename, attributes=attrs or {})
        for pk, file_id, filename, attrs in VectorStoreFile.objects.filter(
            vector_store__in=stores, status=Status.COMPLETED
        ).values_list("pk", "file_id", "file__filename", "attributes")
    ]
    return stores, files


def attribute_keys(*, vector_store_ids: list[str]) -> set[str]:
    """Every attribute key a file of these stores carries (whatever its status)."""
    keys: set[str] = set()
    for attrs in VectorStoreFile.objects.filter(vector_store_id__in=vector_store_ids).values_list(
        "attributes", flat=True
    ):
        if isinstance(attrs, dict):
            keys.update(attrs)
    return keys


def text_matches(*, row_ids: list[int], words: list[str], limit: int) -> list[tuple[int, float]]:
    """(chunk id, score in [0, 1)) of the chunks matching any of the words, best first: the
    database's own full-text ranking (ts_rank_cd, BM25), squashed as rank / (rank + 1)."""
    if not row_ids or not words:
        return []
    placeholders = ",".join(["%s"] * len(row_ids))
    if connection.vendor == "postgresql":
        sql = (
            "SELECT id, ts_rank_cd(text_search, q, 32) AS rank "
            "FROM responses_api_vectorchunk, to_tsquery('english', %s) q "
            f"WHERE vector_store_file_id IN ({placeholders}) AND text_search @@ q "
            "ORDER BY rank DESC, id LIMIT %s"
        )
        query = " | ".join(words)  # words are \w+ only: nothing to quote
        with connection.cursor() as cursor:
            cursor.execute(sql, [query, *row_ids, limit])
            return [(int(pk), float(rank)) for pk, rank in cursor.fetchall()]
    if connection.vendor == "sqlite":
        sql = (
            "SELECT c.id, -bm25(responses_api_vectorchunk_fts) AS rank "
            "FROM responses_api_vectorchunk_fts JOIN responses_api_vectorchunk c "
            "ON c.id = responses_api_vectorchunk_fts.rowid "
            f"WHERE responses_api_vectorchunk_fts MATCH %s AND c.vector_store_file_id IN ({placeholders}) "
            "ORDER BY rank DESC, c.id LIMIT %s"
        )
        query = " OR ".join(f'"{w}"' for w in words)
        with connection.cursor() as cursor:
            cursor.execute(sql, [query, *row_ids, limit])
            return [(int(pk), max(float(rank), 0.0) / (max(float(rank), 0.0) + 1)) for pk, rank in cursor.fetchall()]
    raise NotImplementedError(f"full-text search on {connection.vendor}")


def embeddings(*, row_ids: list[int], batch: int = 2000) -> Iterator[tuple[int, bytes]]:
    """Every embedded chunk of these files: (chunk id, unit float32 vector), in batches."""
    last = 0
    while True:
        rows = list(
            VectorChunk.objects.filter(vector_store_file_id__in=row_ids, embedding__isnull=False, pk__gt=last)
            .order_by("pk")
            .values_list("pk", "embedding")[:batch]
        )
        for pk, data in rows:
            yield pk, bytes(data or b"")
        if len(rows) < batch:
            return
        last = rows[-1][0]


def chunks(*, chunk_ids: list[int]) -> dict[int, tuple[int, str]]:
    """Chunk id: (its file's row id, its text)."""
    return {
        pk: (row_id, text)
        for pk, row_id, text in VectorChunk.objects.filter(pk__in=chunk_ids).values_list(
            "pk", "vector_store_file_id", "text"
        )
    }
