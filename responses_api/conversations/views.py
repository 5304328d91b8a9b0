"""`/v1/conversations` views: parse, call a service or selector, answer. Thin, like the others."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import db
from ..auth import Principal
from ..exception_handlers import json_response
from ..protocol.errors import InvalidRequest
from ..protocol.items import normalize_item
from ..protocol.request import _metadata
from ..views import _json_body, _limit, api_endpoint
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


def _body(request: HttpRequest) -> dict[str, Any]:
    body = _json_body(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    return body


async def create_conversation(request: HttpRequest, principal: Principal) -> HttpResponse:
    body = _body(request)
    items = _items(body.get("items"), required=False)
    metadata = _metadata(body.get("metadata")) or {}
    conversation = await db.run(
        services.conversation_create, tenant_id=principal.tenant_id, items=items, metadata=metadata
    )
    return json_response(selectors.conversation_object(conversation))


async def retrieve_conversation(request: HttpRequest, principal: Principal, conversation_id: str) -> HttpResponse:
    conversation = await db.run(
        selectors.conversation_get, tenant_id=principal.tenant_id, conversation_id=conversation_id
    )
    return json_response(selectors.conversation_object(conversation))


async def update_conversation(request: HttpRequest, principal: Principal, conversation_id: str) -> HttpResponse:
    body = _body(request)
    if "metadata" not in body:
        raise InvalidRequest("Missing required parameter: 'metadata'.", param="metadata")
    conversation = await db.run(
        services.conversation_update,
        tenant_id=principal.tenant_id,
        conversation_id=conversation_id,
        metadata=_metadata(body["metadata"]) or {},
    )
    return json_response(selectors.conversation_object(conversation))


async def delete_conversation(request: HttpRequest, principal: Principal, conversation_id: str) -> HttpResponse:
    await db.run(services.conversation_delete, tenant_id=principal.tenant_id, conversation_id=conversation_id)
    return json_response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_items(request: HttpRequest, principal: Principal, conversation_id: str) -> HttpResponse:
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    page = await db.run(
        selectors.conversation_items_page,
        tenant_id=principal.tenant_id,
        conversation_id=conversation_id,
        after=request.GET.get("after"),
        limit=_limit(request.GET.get("limit")),
        order=order,
    )
    return json_response(page.as_dict())


async def add_items(request: HttpRequest, principal: Principal, conversation_id: str) -> HttpResponse:
    items = _items(_body(request).get("items"), required=True)
    added = await db.run(
        services.conversation_items_add, tenant_id=principal.tenant_id, conversation_id=conversation_id, items=items
    )
    return json_response(
        {
            "object": "list",
            "data": added,
            "first_id": added[0]["id"] if added else None,
            "last_id": added[-1]["id"] if added else None,
            "has_more": False,
        }
    )


async def retrieve_item(request: HttpRequest, principal: Principal, conversation_id: str, item_id: str) -> HttpResponse:
    return json_response(
        await db.run(
            selectors.conversation_item_get,
            tenant_id=principal.tenant_id,
            conversation_id=conversation_id,
            item_id=item_id,
        )
    )


async def delete_item(request: HttpRequest, principal: Principal, conversation_id: str, item_id: str) -> HttpResponse:
    conversation = await db.run(
        services.conversation_item_delete,
        tenant_id=principal.tenant_id,
        conversation_id=conversation_id,
        item_id=item_id,
    )
    return json_response(selectors.conversation_object(conversation))


async def list_conversations(request: HttpRequest, principal: Principal) -> HttpResponse:
    """History: the key's tenant's conversations (every tenant's for an admin key), newest first."""
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    page = await db.run(
        selectors.conversations_page,
        tenant_id=None if principal.is_admin else principal.tenant_id,
        after=request.GET.get("after"),
        limit=_limit(request.GET.get("limit")),
        order=order,
    )
    return json_response(page.as_dict())


conversations = api_endpoint({"POST": create_conversation, "GET": list_conversations})
conversation_detail = api_endpoint(
    {"GET": retrieve_conversation, "POST": update_conversation, "DELETE": delete_conversation}
)
conversation_items = api_endpoint({"GET": list_items, "POST": add_items})
conversation_item = api_endpoint({"GET": retrieve_item, "DELETE": delete_item})
