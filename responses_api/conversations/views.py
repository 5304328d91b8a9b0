"""`/v1/conversations` views: parse, call a service or selector, answer. Thin, like the others."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from ..api.drf import ApiRequest, ApiView
from ..api.views import page_limit, page_order
from ..protocol.errors import InvalidRequest
from ..protocol.items import normalize_item
from ..protocol.request import _metadata
from ..store import db
from . import selectors, services

MAX_ITEMS_PER_CALL = 20  # as OpenAI: "You may add up to 20 items at a time."


def _items(raw: Any, required: bool) -> list[dict[str, Any]]:
    if raw is None and not required:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("Invalid 'items': expected an array of items.", param="items")
    if len(raw) > MAX_ITEMS_PER_CALL:
        raise InvalidRequest(f"'items' may hold at most {MAX_ITEMS_PER_CALL} items per call.", param="items")
    items = [normalize_item(entry, f"items[{i}]") for i, entry in enumerate(raw)]
    for i, item in enumerate(items):
        if item["type"] == "item_reference":
            raise InvalidRequest("An item_reference cannot be added to a conversation.", param=f"items[{i}]")
    return items


def _body(request: ApiRequest) -> dict[str, Any]:
    body = request.data
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    return body


def _page_args(request: ApiRequest) -> dict[str, Any]:
    params = request.query_params
    return {
        "after": params.get("after"),
        "limit": page_limit(params.get("limit")),
        "order": page_order(params.get("order")),
    }


class ConversationsView(ApiView):
    """`/v1/conversations`: create one; list the tenant's (history; every tenant's for an admin key)."""

    async def post(self, request: ApiRequest) -> Response:
        body = _body(request)
        items = _items(body.get("items"), required=False)
        metadata = _metadata(body.get("metadata")) or {}
        conversation = await db.run(
            services.conversation_create, tenant_id=self.principal.tenant_id, items=items, metadata=metadata
        )
        return Response(selectors.conversation_object(conversation))

    async def get(self, request: ApiRequest) -> Response:
        principal = self.principal
        page = await db.run(
            selectors.conversations_page,
            tenant_id=None if principal.is_admin else principal.tenant_id,
            **_page_args(request),
        )
        return Response(page.as_dict())


class ConversationDetailView(ApiView):
    """`/v1/conversations/{id}`: retrieve, update its metadata, delete."""

    async def get(self, request: ApiRequest, conversation_id: str) -> Response:
        conversation = await db.run(
            selectors.conversation_get, tenant_id=self.principal.tenant_id, conversation_id=conversation_id
        )
        return Response(selectors.conversation_object(conversation))

    async def post(self, request: ApiRequest, conversation_id: str) -> Response:
        body = _body(request)
        if "metadata" not in body:
            raise InvalidRequest("Missing required parameter: 'metadata'.", param="metadata")
        conversation = await db.run(
            services.conversation_update,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            metadata=_metadata(body["metadata"]) or {},
        )
        return Response(selectors.conversation_object(conversation))

    async def delete(self, request: ApiRequest, conversation_id: str) -> Response:
        await db.run(services.conversation_delete, tenant_id=self.principal.tenant_id, conversation_id=conversation_id)
        return Response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


class ConversationItemsView(ApiView):
    """`/v1/conversations/{id}/items`: list (paged) and add items."""

    async def get(self, request: ApiRequest, conversation_id: str) -> Response:
        page = await db.run(
            selectors.conversation_items_page,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            **_page_args(request),
        )
        return Response(page.as_dict())

    async def post(self, request: ApiRequest, conversation_id: str) -> Response:
        items = _items(_body(request).get("items"), required=True)
        added = await db.run(
            services.conversation_items_add,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            items=items,
        )
        return Response(
            {
                "object": "list",
                "data": added,
                "first_id": added[0]["id"] if added else None,
                "last_id": added[-1]["id"] if added else None,
                "has_more": False,
            }
        )


class ConversationItemView(ApiView):
    """`/v1/conversations/{id}/items/{item_id}`: retrieve, delete."""

    async def get(self, request: ApiRequest, conversation_id: str, item_id: str) -> Response:
        item = await db.run(
            selectors.conversation_item_get,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            item_id=item_id,
        )
        return Response(item)

    async def delete(self, request: ApiRequest, conversation_id: str, item_id: str) -> Response:
        conversation = await db.run(
            services.conversation_item_delete,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            item_id=item_id,
        )
        return Response(selectors.conversation_object(conversation))
