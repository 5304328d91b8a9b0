"""`/v1/conversations` views: parse, call a service or selector, answer. Thin, like the others."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from ..api.drf import ApiRequest, ApiView
from ..api.openapi import json_body, ref
from ..api.queries import PageQuery
from ..orchestration.guardrails import check_input
from ..protocol.errors import InvalidRequest
from ..protocol.items import normalize_item
from ..protocol.request import _metadata
from ..store import db
from . import selectors, services

MAX_ITEMS_PER_CALL = 20  # as OpenAI: "You may add up to 20 items at a time."
# Items added here reach a model later, as the context of a response in this conversation, which
# is not checked again: they pass the input guardrails now (those of no route: there is no model
# yet), and are stored redacted where one redacts.
NO_MODEL = ""


async def _guarded(view: ApiView, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not items:
        return items
    checked = await check_input(view.principal, NO_MODEL, {"items": items}, ("items",), where="conversations")
    return list(checked["items"])


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


class ConversationsView(ApiView):
    """`/v1/conversations`: create one; list the tenant's (history; every tenant's for an admin key)."""

    @extend_schema(
        operation_id="createConversation",
        tags=["Conversations"],
        summary="Create a conversation",
        description=(
            "With up to 20 initial items (validated and normalised as the `input` items of "
            "`POST /v1/responses`) and metadata."
        ),
        request=json_body("CreateConversationBody"),
        responses={200: ref("Conversation")},
    )
    async def post(self, request: ApiRequest) -> Response:
        body = _body(request)
        items = await _guarded(self, _items(body.get("items"), required=False))
        metadata = _metadata(body.get("metadata")) or {}
        conversation = await db.run(
            services.conversation_create, tenant_id=self.principal.tenant_id, items=items, metadata=metadata
        )
        return Response(selectors.conversation_object(conversation))

    @extend_schema(
        operation_id="listConversations",
        tags=["Conversations"],
        summary="List conversations",
        description="The key's tenant's conversations, newest first; every tenant's for an admin key.",
        parameters=PageQuery.openapi_parameters(),
        responses={200: ref("ConversationList")},
    )
    async def get(self, request: ApiRequest) -> Response:
        principal = self.principal
        page = await db.run(
            selectors.conversations_page,
            tenant_id=None if principal.is_admin else principal.tenant_id,
            **PageQuery.parse(request.query_params),
        )
        return Response(page.as_dict())


class ConversationDetailView(ApiView):
    """`/v1/conversations/{id}`: retrieve, update its metadata, delete."""

    @extend_schema(
        operation_id="getConversation",
        tags=["Conversations"],
        summary="Retrieve a conversation",
        responses={200: ref("Conversation")},
    )
    async def get(self, request: ApiRequest, conversation_id: str) -> Response:
        conversation = await db.run(
            selectors.conversation_get, tenant_id=self.principal.tenant_id, conversation_id=conversation_id
        )
        return Response(selectors.conversation_object(conversation))

    @extend_schema(
        operation_id="updateConversation",
        tags=["Conversations"],
        summary="Update a conversation's metadata",
        request=json_body("UpdateConversationBody"),
        responses={200: ref("Conversation")},
    )
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

    @extend_schema(
        operation_id="deleteConversation",
        tags=["Conversations"],
        summary="Delete a conversation",
        description="Its items stay with the responses that used them.",
        responses={200: ref("DeletedConversation")},
    )
    async def delete(self, request: ApiRequest, conversation_id: str) -> Response:
        await db.run(services.conversation_delete, tenant_id=self.principal.tenant_id, conversation_id=conversation_id)
        return Response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


class ConversationItemsView(ApiView):
    """`/v1/conversations/{id}/items`: list (paged) and add items."""

    @extend_schema(
        operation_id="listConversationItems",
        tags=["Conversations"],
        summary="List a conversation's items",
        parameters=PageQuery.openapi_parameters(),
        responses={200: ref("ItemList")},
    )
    async def get(self, request: ApiRequest, conversation_id: str) -> Response:
        page = await db.run(
            selectors.conversation_items_page,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            **PageQuery.parse(request.query_params),
        )
        return Response(page.as_dict())

    @extend_schema(
        operation_id="createConversationItems",
        tags=["Conversations"],
        summary="Add items to a conversation",
        description=(
            "Up to 20 items at a time, validated and normalised exactly as the `input` items of "
            "`POST /v1/responses` (a 400 naming `items[i]....` otherwise; an item without an `id` gets "
            "one); the answer lists them as stored, with their ids."
        ),
        request=json_body("AddConversationItemsBody"),
        responses={200: ref("ItemList")},
    )
    async def post(self, request: ApiRequest, conversation_id: str) -> Response:
        items = await _guarded(self, _items(_body(request).get("items"), required=True))
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

    @extend_schema(
        operation_id="getConversationItem",
        tags=["Conversations"],
        summary="Retrieve a conversation item",
        responses={200: ref("ItemField")},
    )
    async def get(self, request: ApiRequest, conversation_id: str, item_id: str) -> Response:
        item = await db.run(
            selectors.conversation_item_get,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            item_id=item_id,
        )
        return Response(item)

    @extend_schema(
        operation_id="deleteConversationItem",
        tags=["Conversations"],
        summary="Delete a conversation item",
        description="The answer is the conversation.",
        responses={200: ref("Conversation")},
    )
    async def delete(self, request: ApiRequest, conversation_id: str, item_id: str) -> Response:
        conversation = await db.run(
            services.conversation_item_delete,
            tenant_id=self.principal.tenant_id,
            conversation_id=conversation_id,
            item_id=item_id,
        )
        return Response(selectors.conversation_object(conversation))
