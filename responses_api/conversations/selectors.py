"""Reads of conversations and their items (sync ORM; async callers use `db.run`)."""

from __future__ import annotations

import json
from typing import Any

from ..models import Conversation, ConversationItem
from ..protocol.errors import InvalidRequest, NotFound
from ..store.selectors import ListPage, epoch, items_page


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def conversation_get(*, tenant_id: int, conversation_id: str, param: str = "conversation_id") -> Conversation:
    conversation = Conversation.objects.filter(id=conversation_id, tenant_id=tenant_id).first()
    if conversation is None:  # another tenant's id is exactly an unknown one
        raise NotFound(f"Conversation with id '{conversation_id}' not found.", param=param)
    return conversation


def conversation_object(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation.id,
        "object": "conversation",
        "created_at": epoch(conversation.created_at),
        "metadata": conversation.metadata or {},
    }


def conversation_items_page(
    *,
    tenant_id: int,
    conversation_id: str,
    after: str | None,
    limit: int,
    order: str,
) -> ListPage:
    conversation = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    return items_page(
        ConversationItem.objects.filter(conversation=conversation),
        tenant_id=conversation.tenant_id,
        after=after,
        limit=limit,
        order=order,
        unknown_after=f"No item with id '{after}' in this conversation.",
    )


def conversation_item_get(*, tenant_id: int, conversation_id: str, item_id: str) -> dict[str, Any]:
    conversation = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    data = (
        # The tenant too: items are indexed by (tenant, public id).
        ConversationItem.objects.filter(conversation=conversation, item__tenant_id=tenant_id, item__public_id=item_id)
        .order_by("position")
        .values_list("item__data", flat=True)
        .first()
    )
    if data is None:
        raise NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", param="item_id")
    item: dict[str, Any] = _loads(data)  # a stored item is a JSON object
    return item


def conversations_page(*, tenant_id: int | None, after: str | None, limit: int, order: str) -> ListPage:
    """Conversations for the history API, newest first by default; `tenant_id` None: every
    tenant's (admin keys). `after` is a conversation id from an earlier page."""
    qs = Conversation.objects.all() if tenant_id is None else Conversation.objects.filter(tenant_id=tenant_id)
    descending = order == "desc"
    if after is not None:
        anchor = qs.filter(id=after).values_list("created_at", flat=True).first()
        if anchor is None:
            raise InvalidRequest(f"'after': no conversation found with id '{after}'.", param="after")
        qs = (
            (qs.filter(created_at__lt=anchor) | qs.filter(created_at=anchor, id__lt=after))
            if descending
            else (qs.filter(created_at__gt=anchor) | qs.filter(created_at=anchor, id__gt=after))
        )
    ordering = ("-created_at", "-id") if descending else ("created_at", "id")
    rows = list(qs.order_by(*ordering)[: limit + 1])
    return ListPage([conversation_object(c) for c in rows[:limit]], len(rows) > limit)
