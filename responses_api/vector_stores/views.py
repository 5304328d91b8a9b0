"""`/v1/vector_stores` views (stores, their files, file batches, search): parse, call, answer.

Files attached are ingested on a worker after the answer (orchestration/vector_stores.py): the
answer says `in_progress`, and the file's and the store's status and `file_counts` follow it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from ..api.drf import ApiRequest, ApiView
from ..api.openapi import json_body, ref
from ..api.queries import QueryParameters, _limit, _order, _text
from ..orchestration import vector_stores as orchestration
from ..protocol import vector_stores as fields
from ..protocol.errors import InvalidRequest
from ..protocol.request import _metadata, expect
from ..store import db
from ..store import vector_stores as store

SEARCH_HEADER = "x-gateway-vector-search"


class VectorStoreListQuery(QueryParameters):
    after = _text("An id from an earlier page (its `last_id`): return what follows it in this order.", 300)
    before = _text("An id from an earlier page (its `first_id`): return what precedes it in this order.", 300)
    limit = _limit()
    order = _order("desc", "is oldest first, `desc` newest first")


class VectorStoreFileListQuery(VectorStoreListQuery):
    filter = serializers.ChoiceField(
        choices=store.FILE_STATUSES,
        default=None,
        help_text="Only files in this status.",
        error_messages={"invalid_choice": "'{input}' is not one of " + ", ".join(store.FILE_STATUSES) + "."},
    )


def _body(request: ApiRequest) -> dict[str, Any]:
    body = request.data
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    return body


def _search_mode(embedding_model: str) -> str:
    return "hybrid" if embedding_model else "full_text"


def _attach(entry: dict[str, Any], param: str) -> store.Attach:
    """One file to attach, with its attributes and chunking strategy; `param`: where it is in the body."""
    file_id = expect(entry.get("file_id"), str, f"{param}file_id", "a file id")
    chunking_param = f"{param}chunking_strategy"
    size, overlap = fields.chunking_strategy(entry.get("chunking_strategy"), chunking_param, overlap_checked=False)
    return store.Attach(
        file_id=file_id,
        attributes=fields.attributes(entry.get("attributes"), f"{param}attributes"),
        size=size,
        overlap=overlap,
        param=f"{param}file_id",
        chunking_param=chunking_param,
    )


def _store_response(obj: dict[str, Any], embedding_model: str) -> Response:
    response = Response(obj)
    response[SEARCH_HEADER] = _search_mode(embedding_model)
    return response


class VectorStoresView(ApiView):
    """`/v1/vector_stores`: create one (optionally with files), list the tenant's."""

    @extend_schema(
        operation_id="createVectorStore",
        tags=["Vector stores"],
        summary="Create a vector store",
        description=(
            "With `file_ids` (the tenant's files), ingested on a worker: the store is `in_progress` until "
            "every file is `completed` or `failed`. Its search is hybrid when the operator named an "
            "embeddings route (GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL), full text otherwise: the "
            "`x-gateway-vector-search` header says which (`hybrid`, `full_text`)."
        ),
        request=json_body("CreateVectorStoreBody"),
        responses={200: ref("VectorStore")},
    )
    async def post(self, request: ApiRequest) -> Response:
        body = _body(request)
        chunking = fields.chunking_strategy(body.get("chunking_strategy"), overlap_checked=False)
        ids = fields.file_ids(body["file_ids"]) if body.get("file_ids") is not None else []
        attach = [
            store.Attach(file_id=f, attributes={}, size=chunking[0], overlap=chunking[1], param=f"file_ids[{i}]")
            for i, f in enumerate(ids)
        ]
        model = orchestration.embeddings_model()
        vector_store, row_ids = await db.run(
            store.vector_store_create,
            tenant_id=self.principal.tenant_id,
            api_key_id=self.principal.key_id,
            name=fields.optional_string(body, "name", 256) or "",
            description=fields.optional_string(body, "description", 512) or "",
            metadata=_metadata(body.get("metadata")) or {},
            expires_after_days=fields.expires_after(body.get("expires_after")),
            embedding_model=model,
            files=attach,
        )
        await orchestration.enqueue_ingest(row_ids)
        return _store_response(await db.run(store.vector_store_object, vector_store), model)

    @extend_schema(
        operation_id="listVectorStores",
        tags=["Vector stores"],
        summary="List vector stores",
        description="The key's tenant's vector stores, newest first by default.",
        parameters=VectorStoreListQuery.openapi_parameters(),
        responses={200: ref("VectorStoreList")},
    )
    async def get(self, request: ApiRequest) -> Response:
        page = await db.run(
            store.vector_stores_page,
            tenant_id=self.principal.tenant_id,
            **VectorStoreListQuery.parse(request.query_params),
        )
        return Response(page.as_dict())


class VectorStoreDetailView(ApiView):
    """`/v1/vector_stores/{id}`: retrieve, update (name, metadata, expires_after), delete."""

    @extend_schema(
        operation_id="getVectorStore",
        tags=["Vector stores"],
        summary="Retrieve a vector store",
        responses={200: ref("VectorStore")},
    )
    async def get(self, request: ApiRequest, vector_store_id: str) -> Response:
        vector_store = await db.run(
            store.vector_store_get, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id
        )
        return _store_response(await db.run(store.vector_store_object, vector_store), vector_store.embedding_model)

    @extend_schema(
        operation_id="updateVectorStore",
        tags=["Vector stores"],
        summary="Update a vector store",
        description="`name`, `metadata` and `expires_after` (null removes the policy); what is not given stays.",
        request=json_body("UpdateVectorStoreBody"),
        responses={200: ref("VectorStore")},
    )
    async def post(self, request: ApiRequest, vector_store_id: str) -> Response:
        body = _body(request)
        changes: dict[str, Any] = {}
        if body.get("name") is not None:
            changes["name"] = fields.optional_string(body, "name", 256)
        if body.get("metadata") is not None:
            changes["metadata"] = _metadata(body["metadata"])
        days: int | None | bool = fields.expires_after(body["expires_after"]) if "expires_after" in body else False
        vector_store = await db.run(
            store.vector_store_update,
            tenant_id=self.principal.tenant_id,
            vector_store_id=vector_store_id,
            changes=changes,
            expires_after_days=days,
        )
        return _store_response(await db.run(store.vector_store_object, vector_store), vector_store.embedding_model)

    @extend_schema(
        operation_id="deleteVectorStore",
        tags=["Vector stores"],
        summary="Delete a vector store",
        description="Its chunks go; the files stay (`DELETE /v1/files/{id}` removes a file).",
        responses={200: ref("DeletedVectorStore")},
    )
    async def delete(self, request: ApiRequest, vector_store_id: str) -> Response:
        await db.run(store.vector_store_delete, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id)
        return Response({"id": vector_store_id, "object": "vector_store.deleted", "deleted": True})


class VectorStoreSearchView(ApiView):
    """`/v1/vector_stores/{id}/search`."""

    @extend_schema(
        operation_id="searchVectorStore",
        tags=["Vector stores"],
        summary="Search a vector store",
        description=(
            "Hybrid search: the database's full-text ranking blended with the cosine similarity of the "
            "chunks' embeddings (an exact scan), or full text alone without an embeddings route. Scores "
            "are between 0 and 1; `ranking_options.score_threshold` drops lower ones. `filters` compare "
            "the files' attributes; one on an attribute no file of the store has is a 400 naming it. "
            "`rewrite_query: true` searches the query's keywords (stop words dropped), which "
            "`search_query` shows."
        ),
        request=json_body("VectorStoreSearchBody"),
        responses={200: ref("VectorStoreSearchResults")},
    )
    async def post(self, request: ApiRequest, vector_store_id: str) -> Response:
        req = fields.search_request(_body(request))
        hits = await orchestration.search(
            tenant_id=self.principal.tenant_id,
            api_key_id=self.principal.key_id,
            vector_store_ids=[vector_store_id],
            req=req,
        )
        return Response(
            {
                "object": "vector_store.search_results.page",
                "search_query": [req.search_query],
                "data": [hit.as_result() for hit in hits],
                "has_more": False,
                "next_page": None,
            }
        )


class VectorStoreFilesView(ApiView):
    """`/v1/vector_stores/{id}/files`: attach a file, list the attached ones."""

    @extend_schema(
        operation_id="createVectorStoreFile",
        tags=["Vector stores"],
        summary="Attach a file to a vector store",
        description=(
            "The file is ingested on a worker (text extracted, chunked, embedded); poll it until its "
            "`status` is `completed` or `failed` (`last_error` says why). Attaching an attached file "
            "again ingests it anew."
        ),
        request=json_body("CreateVectorStoreFileBody"),
        responses={200: ref("VectorStoreFile")},
    )
    async def post(self, request: ApiRequest, vector_store_id: str) -> Response:
        attach = _attach(_body(request), "")
        row = await db.run(
            store.vs_file_attach, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id, attach=attach
        )
        await orchestration.enqueue_ingest([row.pk])
        return Response(store.vs_file_object(row))

    @extend_schema(
        operation_id="listVectorStoreFiles",
        tags=["Vector stores"],
        summary="List a vector store's files",
        parameters=VectorStoreFileListQuery.openapi_parameters(),
        responses={200: ref("VectorStoreFileList")},
    )
    async def get(self, request: ApiRequest, vector_store_id: str) -> Response:
        query = VectorStoreFileListQuery.parse(request.query_params)
        page = await db.run(
            store.vs_files_page,
            tenant_id=self.principal.tenant_id,
            vector_store_id=vector_store_id,
            status=query.pop("filter"),
            **query,
        )
        return Response(page.as_dict())


class VectorStoreFileDetailView(ApiView):
    """`/v1/vector_stores/{id}/files/{file_id}`: retrieve, update attributes, detach."""

    @extend_schema(
        operation_id="getVectorStoreFile",
        tags=["Vector stores"],
        summary="Retrieve a vector store file",
        responses={200: ref("VectorStoreFile")},
    )
    async def get(self, request: ApiRequest, vector_store_id: str, file_id: str) -> Response:
        row = await db.run(
            store.vs_file_get, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id, file_id=file_id
        )
        return Response(store.vs_file_object(row))

    @extend_schema(
        operation_id="updateVectorStoreFile",
        tags=["Vector stores"],
        summary="Update a vector store file's attributes",
        request=json_body("UpdateVectorStoreFileBody"),
        responses={200: ref("VectorStoreFile")},
    )
    async def post(self, request: ApiRequest, vector_store_id: str, file_id: str) -> Response:
        body = _body(request)
        if "attributes" not in body:
            raise InvalidRequest("Missing required parameter: 'attributes'.", param="attributes")
        row = await db.run(
            store.vs_file_update,
            tenant_id=self.principal.tenant_id,
            vector_store_id=vector_store_id,
            file_id=file_id,
            attributes=fields.attributes(body["attributes"]),
        )
        return Response(store.vs_file_object(row))

    @extend_schema(
        operation_id="deleteVectorStoreFile",
        tags=["Vector stores"],
        summary="Remove a file from a vector store",
        description="Its chunks go; the file stays.",
        responses={200: ref("DeletedVectorStoreFile")},
    )
    async def delete(self, request: ApiRequest, vector_store_id: str, file_id: str) -> Response:
        await db.run(
            store.vs_file_delete, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id, file_id=file_id
        )
        return Response({"id": file_id, "object": "vector_store.file.deleted", "deleted": True})


class VectorStoreFileContentView(ApiView):
    """`/v1/vector_stores/{id}/files/{file_id}/content`: the parsed text."""

    @extend_schema(
        operation_id="getVectorStoreFileContent",
        tags=["Vector stores"],
        summary="A vector store file's parsed content",
        description="Its chunks' text, in order (consecutive chunks overlap as its chunking strategy says).",
        responses={200: ref("VectorStoreFileContent")},
    )
    async def get(self, request: ApiRequest, vector_store_id: str, file_id: str) -> Response:
        parts = await db.run(
            store.vs_file_content,
            tenant_id=self.principal.tenant_id,
            vector_store_id=vector_store_id,
            file_id=file_id,
        )
        return Response(
            {"object": "vector_store.file_content.page", "data": parts, "has_more": False, "next_page": None}
        )


class FileBatchesView(ApiView):
    """`/v1/vector_stores/{id}/file_batches`: attach many files at once."""

    @extend_schema(
        operation_id="createVectorStoreFileBatch",
        tags=["Vector stores"],
        summary="Attach files to a vector store in a batch",
        description=(
            "`file_ids` (with the batch's `attributes` and `chunking_strategy`) or `files` (each with its "
            "own), not both; up to 2000. An unknown file id stores nothing (a 400 naming it)."
        ),
        request=json_body("CreateVectorStoreFileBatchBody"),
        responses={200: ref("VectorStoreFileBatch")},
    )
    async def post(self, request: ApiRequest, vector_store_id: str) -> Response:
        body = _body(request)
        if ("file_ids" in body) == ("files" in body):
            raise InvalidRequest("Give either 'file_ids' or 'files'.", param="file_ids")
        if "file_ids" in body:
            attrs = fields.attributes(body.get("attributes"))
            size, overlap = fields.chunking_strategy(body.get("chunking_strategy"), overlap_checked=False)
            attach = [
                store.Attach(file_id=f, attributes=attrs, size=size, overlap=overlap, param=f"file_ids[{i}]")
                for i, f in enumerate(fields.file_ids(body["file_ids"]))
            ]
        else:
            entries = expect(body["files"], list, "files", "an array of files")
            if len(entries) > fields.MAX_FILES_PER_BATCH:
                raise InvalidRequest(f"'files' may name at most {fields.MAX_FILES_PER_BATCH} files.", param="files")
            attach = [
                _attach(expect(entry, dict, f"files[{i}]", "an object"), f"files[{i}].")
                for i, entry in enumerate(entries)
            ]
        batch, row_ids = await db.run(
            store.batch_create, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id, files=attach
        )
        await orchestration.enqueue_ingest(row_ids)
        return Response(await db.run(store.batch_object, batch))


class FileBatchDetailView(ApiView):
    """`/v1/vector_stores/{id}/file_batches/{batch_id}`."""

    @extend_schema(
        operation_id="getVectorStoreFileBatch",
        tags=["Vector stores"],
        summary="Retrieve a file batch",
        responses={200: ref("VectorStoreFileBatch")},
    )
    async def get(self, request: ApiRequest, vector_store_id: str, batch_id: str) -> Response:
        batch = await db.run(
            store.batch_get, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id, batch_id=batch_id
        )
        return Response(await db.run(store.batch_object, batch))


class FileBatchCancelView(ApiView):
    """`/v1/vector_stores/{id}/file_batches/{batch_id}/cancel`."""

    @extend_schema(
        operation_id="cancelVectorStoreFileBatch",
        tags=["Vector stores"],
        summary="Cancel a file batch",
        description="Its files not yet ingested are cancelled; those ingested stay.",
        request=None,
        responses={200: ref("VectorStoreFileBatch")},
    )
    async def post(self, request: ApiRequest, vector_store_id: str, batch_id: str) -> Response:
        batch = await db.run(
            store.batch_cancel, tenant_id=self.principal.tenant_id, vector_store_id=vector_store_id, batch_id=batch_id
        )
        return Response(await db.run(store.batch_object, batch))


class FileBatchFilesView(ApiView):
    """`/v1/vector_stores/{id}/file_batches/{batch_id}/files`."""

    @extend_schema(
        operation_id="listVectorStoreFileBatchFiles",
        tags=["Vector stores"],
        summary="List a file batch's files",
        parameters=VectorStoreFileListQuery.openapi_parameters(),
        responses={200: ref("VectorStoreFileList")},
    )
    async def get(self, request: ApiRequest, vector_store_id: str, batch_id: str) -> Response:
        query = VectorStoreFileListQuery.parse(request.query_params)
        page = await db.run(
            store.vs_files_page,
            tenant_id=self.principal.tenant_id,
            vector_store_id=vector_store_id,
            batch_id=batch_id,
            status=query.pop("filter"),
            **query,
        )
        return Response(page.as_dict())
