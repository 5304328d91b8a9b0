"""Writes of conversations: create, update, delete, add and remove items. A finishing response
appends its items through store/services.py, in the transaction of its finish, with the same
lock and append used here: appends lock the conversation row, so concurrent writers take
consecutive positions and a response's items stay together."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..models import Conversation, ConversationItem, Item
from ..protocol.errors import NotFound
from ..protocol.ids import new_id
from ..store.services import conversation_append, conversation_lock
from .selectors import conversation_get


def conversation_create(*, tenant_id: int, items: list[dict[str, Any]], metadata: dict[str, str]) -> Conversation:
    with transaction.atomic():
        conversation = Conversation.objects.create(id=new_id("conv"), tenant_id=tenant_id, metadata=metadata)
        conversation_append(conversation, _new_items(tenant_id, items))
    return conversation


def conversation_update(*, tenant_id: int, conversation_id: str, metadata: dict[str, str]) -> Conversation:
    conversation = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    conversation.metadata = metadata
    conversation.save(update_fields=["metadata"])
    return conversation


def conversation_delete(*, tenant_id: int, conversation_id: str) -> None:
    """The conversation and its item links go; the items stay where responses use them."""
    conversation_get(tenant_id=tenant_id, conversation_id=conversation_id).delete()


def conversation_items_add(
    *, tenant_id: int, conversation_id: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    with transaction.atomic():
        conversation = conversation_lock(tenant_id, conversation_id)
        conversation_append(conversation, _new_items(tenant_id, items))
    return items


def conversation_item_delete(*, tenant_id: int, conversation_id: str, item_id: str) -> Conversation:
    conversation = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    link = (  # the tenant too: items are indexed by (tenant, public id)
        ConversationItem.objects.filter(conversation=conversation, item__tenant_id=tenant_id, item__public_id=item_id)
        .order_by("position")
        .first()
    )
    if link is None:
        raise NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", param="item_id")
    link.delete()
    return conversation


def _new_items(tenant_id: int, items: list[dict[str, Any]]) -> list[Item]:
    return Item.objects.bulk_create(
        [Item(tenant_id=tenant_id, public_id=i["id"], type=i["type"], data=i) for i in items]
    )
