"""Vector stores' work beyond the database: ingesting a file (extract its text, chunk it, embed
the chunks through the gateway's own embeddings route) on a worker, and hybrid search (the
database's full-text ranking blended with an exact cosine scan over the stored embeddings).

Embeddings come from the model route GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL names (fixed on a
store when it is created): the route's upstream `/v1/embeddings`, with the route's fallback and
retries, and the tokens recorded as the store owner's embeddings usage. Without one, a store is
searched by full text only.

The embeddings are searched by an exact scan (every chunk of the files in scope, a dot product of
unit vectors): the tested path. A pgvector index would replace `_vector_scores` alone (an
`ORDER BY embedding <=> %s LIMIT n` over a `vector` column); it is not built, as pgvector is not
in Debian bookworm's PostgreSQL packages.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings

from ..engine.failover import route_call
from ..protocol.errors import GatewayError, InvalidRequest
from ..protocol.guardrail_remote import Caller
from ..protocol.vector_stores import (
    SearchRequest,
    chunk_text,
    cosine,
    filter_keys,
    keywords,
    matches,
    pack_vector,
    search_options,
    unpack_vector,
)
from ..store import db
from ..store import vector_stores as store
from ..store.files import read_bytes
from ..store.usage import Endpoint, usage_writer
from ..upstreams.passthrough import forward, usage_tokens
from .guardrails import check_input
from .routing import route_get

log = logging.getLogger("gateway.vector_stores")

# The Celery task that ingests one attached file (tasks.ingest_vector_store_file), sent by name.
INGEST_TASK = "responses_api.ingest_vector_store_file"
EMBED_BATCH = 64  # inputs per /v1/embeddings call
TEXT_CANDIDATES = 200  # full-text matches ranked beside the vector scan


class UnsupportedFile(Exception):
    pass


def embeddings_model() -> str:
    """The route new vector stores embed with ("" : none, full-text search only)."""
    return str(settings.GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL or "")


# --------------------------------------------------------------------------- extraction

PDF = ("application/pdf",)
DOCX = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)
TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".json",
        ".jsonl",
        ".csv",
        ".tsv",
        ".html",
        ".htm",
        ".xml",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".log",
        ".rst",
        ".tex",
        ".py",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".java",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".go",
        ".rs",
        ".rb",
        ".php",
        ".sh",
        ".bash",
        ".sql",
        ".css",
        ".kt",
        ".swift",
        ".scala",
        ".lua",
        ".r",
        ".pl",
    ]
)


def extract_text(data: bytes, *, filename: str, content_type: str) -> str:
    """The text of a file: PDF (pypdf), Word .docx (python-docx), or text/markdown/JSON/code as
    UTF-8. Anything else is an UnsupportedFile; a file of its type that cannot be read raises."""
    name = filename.lower()
    suffix = name[name.rfind(".") :] if "." in name else ""
    if content_type in PDF or suffix == ".pdf" or data.startswith(b"%PDF-"):
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    if content_type in DOCX or suffix == ".docx":
        import docx

        document = docx.Document(io.BytesIO(data))
        return "\n".join(paragraph.text for paragraph in document.paragraphs)
    if suffix in TEXT_SUFFIXES or content_type.startswith("text/") or content_type == "application/json":
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValueError("The file is not valid UTF-8 text.") from None
    raise UnsupportedFile(
        f"Files of type '{content_type or suffix or 'unknown'}' cannot be searched: PDF, .docx and "
        "UTF-8 text (plain, markdown, JSON, code) can."
    )


# --------------------------------------------------------------------------- embeddings


async def embed(
    texts: list[str],
    *,
    model: str,
    tenant_id: int,
    api_key_id: int | None,
    renew: Callable[[], Awaitable[None]] | None = None,
) -> list[bytes]:
    """Unit float32 vectors of the texts, from the model's route (its upstream /v1/embeddings),
    in batches; each call's tokens recorded as embeddings usage of the store's owner. `renew`:
    called after each batch (an ingestion's claim). The texts go to a model, so they pass the
    input guardrails of the owner's tenant and key and the route first (`where`:
    `vector_stores`): a `block` fails the call (an ingestion records it as the file's
    last_error), a `redact` changes what is embedded (the stored chunk keeps its text: tool
    output guardrails see it where file_search gives it to a model)."""
    route = await db.run(route_get, model)
    whose = Caller(tenant_id, api_key_id)
    vectors: list[bytes] = []
    for start in range(0, len(texts), EMBED_BATCH):
        screened = await check_input(
            whose, model, {"input": texts[start : start + EMBED_BATCH]}, ("input",), where="vector_stores"
        )
        batch: list[str] = screened["input"]
        started = time.monotonic()

        async def open_one(target: Any, batch: list[str] = batch) -> Any:
            return await forward(target, "/embeddings", {"input": batch, "encoding_format": "float"}, stream=False)

        target, forwarded, slot = await route_call(route, open_one)
        try:
            raw = await forwarded.response.read()
        finally:
            forwarded.response.release()
            await slot.release()
        answer = json.loads(raw)
        data = sorted(answer["data"], key=lambda entry: entry["index"])
        if len(data) != len(batch):
            raise ValueError(f"The embeddings upstream answered {len(data)} vectors for {len(batch)} inputs.")
        vectors.extend(pack_vector([float(v) for v in entry["embedding"]]) for entry in data)
        input_tokens, _ = usage_tokens(answer.get("usage"))
        usage_writer.add(
            tenant_id=tenant_id,
            api_key_id=api_key_id,
            endpoint=Endpoint.EMBEDDINGS,
            model=model,
            upstream=target.label,
            status=200,
            input_tokens=input_tokens,
            output_tokens=0 if input_tokens is not None else None,
            latency_ms=int((time.monotonic() - started) * 1000),
        )
        if renew is not None:
            await renew()
    return vectors


# --------------------------------------------------------------------------- ingestion


async def ingest(row_id: int) -> str:
    """Ingest one attached file: its final status ("skipped" if it no longer waits)."""
    job = await db.run(store.ingest_job, row_id, stale_after=settings.GATEWAY_VECTOR_STORE_INGEST_STALE_SECONDS)
    if job is None:
        return "skipped"

    async def renew() -> None:
        await db.run(store.ingest_renew, row_id=row_id)

    try:
        data = await asyncio.to_thread(read_bytes, job.stored)
        text = await asyncio.to_thread(
            extract_text, data, filename=job.stored.filename, content_type=job.stored.content_type
        )
    except UnsupportedFile as exc:
        await db.run(store.ingest_fail, row_id=row_id, code="unsupported_file", message=str(exc))
        return "failed"
    except Exception as exc:  # noqa: BLE001 - whatever a parser raises on a broken file is the file's fault
        log.info("vector store file %s (%s) could not be read: %r", row_id, job.stored.id, exc)
        await db.run(
            store.ingest_fail, row_id=row_id, code="invalid_file", message=f"The file could not be read: {exc}"[:500]
        )
        return "failed"
    texts = chunk_text(text, job.size, job.overlap)
    vectors: list[bytes | None] = [None] * len(texts)
    if job.embedding_model and texts:
        try:
            vectors = list(
                await embed(
                    texts, model=job.embedding_model, tenant_id=job.tenant_id, api_key_id=job.api_key_id, renew=renew
                )
            )
        except GatewayError as exc:
            await db.run(
                store.ingest_fail,
                row_id=row_id,
                code="server_error",
                message=f"Embedding with '{job.embedding_model}' failed: {exc.message}",
            )
            return "failed"
        except (ValueError, KeyError, TypeError) as exc:
            await db.run(
                store.ingest_fail,
                row_id=row_id,
                code="server_error",
                message=f"Embedding with '{job.embedding_model}' failed: the upstream's answer was not usable ({exc}).",
            )
            return "failed"
    stored = await db.run(store.ingest_finish, row_id=row_id, texts=texts, vectors=vectors)
    return "completed" if stored else "skipped"


_embedded_tasks: set[asyncio.Task[str]] = set()


async def enqueue_ingest(row_ids: list[int]) -> None:
    """Hand attached files (committed) to a worker: Celery, or in-process tasks when embedded."""
    if not row_ids:
        return
    if settings.EMBEDDED_WORKER:
        loop = asyncio.get_running_loop()
        for row_id in row_ids:
            task = loop.create_task(ingest(row_id))
            _embedded_tasks.add(task)  # keep a reference: the loop holds tasks only weakly
            task.add_done_callback(_embedded_tasks.discard)
        return
    for row_id in row_ids:
        await asyncio.to_thread(current_app.send_task, INGEST_TASK, args=(row_id,))


async def requeue_stale_ingestions() -> int:
    """Files whose ingestion task was lost (a restarted process: the embedded runner's tasks die
    with it), enqueued again; the claim in `ingest` keeps a file from being ingested twice at once.
    Run by every web process's reaper (liveness.py)."""
    stale = await db.run(store.ingest_stale, stale_after=settings.GATEWAY_VECTOR_STORE_INGEST_STALE_SECONDS)
    await enqueue_ingest(stale)
    return len(stale)


# --------------------------------------------------------------------------- search


@dataclass(frozen=True, slots=True)
class Hit:
    file_id: str
    filename: str
    score: float
    attributes: dict[str, Any]
    text: str

    def as_result(self) -> dict[str, Any]:
        return {
            "file_id": self.file_id,
            "filename": self.filename,
            "score": round(self.score, 6),
            "attributes": self.attributes,
            "content": [{"type": "text", "text": self.text}],
        }


def _vector_scores(row_ids: list[int], query: tuple[float, ...]) -> dict[int, float]:
    """The exact scan: the cosine of every embedded chunk of these files with the query."""
    return {pk: cosine(unpack_vector(data), query) for pk, data in store.embeddings(row_ids=row_ids)}


def _check_filter_keys(req: SearchRequest, vector_store_ids: list[str], param: str) -> None:
    """A filter on an attribute no file of the stores carries is a 400 naming it (a typo would
    otherwise quietly match nothing); one some files carry matches those that do."""
    if req.filters is None:
        return
    known = store.attribute_keys(vector_store_ids=vector_store_ids)
    for key, where in filter_keys(req.filters, param):
        if key not in known:
            raise InvalidRequest(
                f"Unknown attribute '{key}' in '{where}': no file of the vector store has it.",
                param=where,
                code="unknown_attribute",
            )


def _scope(tenant_id: int, vector_store_ids: list[str], req: SearchRequest, param: str, filters_param: str) -> Any:
    stores, files = store.search_scope(tenant_id=tenant_id, vector_store_ids=vector_store_ids, param=param)
    _check_filter_keys(req, [s.id for s in stores], filters_param)
    return stores, [f for f in files if matches(req.filters, f.attributes)]


async def search(
    *,
    tenant_id: int,
    api_key_id: int | None,
    vector_store_ids: list[str],
    req: SearchRequest,
    param: str = "vector_store_id",
    filters_param: str = "filters",
) -> list[Hit]:
    """The best chunks for the query, best first, at most `max_num_results`, none under the
    score threshold. Score: the cosine similarity (negatives as 0) and the full-text rank (in
    [0, 1)) blended by the hybrid weights (0.7 and 0.3 unless given); the full-text rank alone
    where the stores have no embeddings. The ranker (`auto`, `default-2024-11-15`, `none`) does
    not change this: the gateway has no reranking model."""
    stores, files = await db.run(_scope, tenant_id, vector_store_ids, req, param, filters_param)
    if not files:
        return []
    query = req.search_query
    by_row = {f.row_id: f for f in files}
    row_ids = list(by_row)
    text_scores = dict(await db.run(store.text_matches, row_ids=row_ids, words=keywords(query), limit=TEXT_CANDIDATES))
    models = {s.embedding_model for s in stores if s.embedding_model}
    vector_scores: dict[int, float] = {}
    for model in sorted(models):  # stores of one model in practice; each store's chunks match its own
        (vector,) = await embed([query], model=model, tenant_id=tenant_id, api_key_id=api_key_id)
        if vector:
            scored = await db.run(_vector_scores, row_ids, unpack_vector(vector))
            for pk, value in scored.items():
                vector_scores[pk] = max(vector_scores.get(pk, 0.0), value)
    score: Callable[[int], float]
    if vector_scores:
        total = req.embedding_weight + req.text_weight
        w_vec, w_text = req.embedding_weight / total, req.text_weight / total

        def score(pk: int) -> float:
            return w_vec * max(vector_scores.get(pk, 0.0), 0.0) + w_text * text_scores.get(pk, 0.0)
    else:

        def score(pk: int) -> float:
            return text_scores.get(pk, 0.0)

    ranked = sorted(
        ((score(pk), pk) for pk in set(text_scores) | set(vector_scores)), key=lambda pair: (-pair[0], pair[1])
    )
    ranked = [(s, pk) for s, pk in ranked if s > 0 and s >= req.score_threshold][: req.max_num_results]
    texts = await db.run(store.chunks, chunk_ids=[pk for _, pk in ranked])
    hits = []
    for value, pk in ranked:
        row_id, text = texts[pk]
        found = by_row[row_id]
        hits.append(Hit(found.file_id, found.filename, value, found.attributes, text))
    return hits


# --------------------------------------------------------------------------- the hosted file_search tool


def file_search_specs(tools: list[Any]) -> dict[str, dict[str, Any]]:
    """The run's file_search tools the gateway serves: function name -> the tool as sent."""
    return {t.name: t.report for t in tools if t.kind == "file_search" and t.source == "gateway" and t.report}


def _check_file_search(tenant_id: int, specs: dict[str, dict[str, Any]], params: dict[str, str]) -> None:
    """Before any model call: every vector store named is the tenant's (a 404 naming it), not
    expired, and the filters name attributes its files have (a 400 naming the key)."""
    for name, spec in specs.items():
        param = params[name]
        ids = list(spec["vector_store_ids"])
        req = SearchRequest(query="-", **search_options(spec, prefix=f"{param}."))
        for i, store_id in enumerate(ids):
            found = store.vector_store_get(
                tenant_id=tenant_id, vector_store_id=store_id, param=f"{param}.vector_store_ids[{i}]"
            )
            if store.is_expired(found):
                raise InvalidRequest(
                    f"Vector store '{store_id}' has expired.",
                    param=f"{param}.vector_store_ids[{i}]",
                    code="vector_store_expired",
                )
        _check_filter_keys(req, ids, f"{param}.filters")


async def check_file_search(tenant_id: int, request: Any) -> dict[str, dict[str, Any]]:
    """The run's gateway-served file_search tools (by function name), checked."""
    specs = file_search_specs(request.tools)
    if specs:
        where = {id(h.spec): h.param for h in request.hosted_tools}
        params = {name: where.get(id(spec), "tools") for name, spec in specs.items()}
        await db.run(_check_file_search, tenant_id, specs, params)
    return specs


class FileSearchRunner:
    """The run's tool runner, with the gateway's file_search tools: a search over the request's
    vector stores (their filters, max_num_results and ranking options), its results as JSON to
    the model and, through the event builder, on the file_search_call item."""

    def __init__(self, inner: Any, *, tenant_id: int, specs: dict[str, dict[str, Any]]) -> None:
        self.inner = inner
        self.tenant_id = tenant_id
        self.specs = specs

    def is_server_tool(self, name: str) -> bool:
        return bool(self.inner.is_server_tool(name))

    async def execute(self, call: dict[str, Any]) -> str:
        spec = self.specs.get(call["name"])
        if spec is None:
            return str(await self.inner.execute(call))
        try:
            arguments = json.loads(call.get("arguments") or "{}")
        except ValueError:
            arguments = {}
        query = arguments.get("query") if isinstance(arguments, dict) else None
        if not isinstance(query, str) or not query.strip():
            return json.dumps({"error": "Give a non-empty 'query'.", "results": []})
        try:
            req = SearchRequest(query=query, **search_options(spec))
            hits = await search(
                tenant_id=self.tenant_id, api_key_id=None, vector_store_ids=list(spec["vector_store_ids"]), req=req
            )
        except GatewayError as exc:  # the stores were checked before the run: gone or expired since
            return json.dumps({"error": exc.message, "results": []})
        return json.dumps(
            {
                "results": [
                    {
                        "file_id": h.file_id,
                        "filename": h.filename,
                        "score": round(h.score, 6),
                        "text": h.text,
                        "attributes": h.attributes,
                    }
                    for h in hits
                ]
            },
            ensure_ascii=False,
        )
