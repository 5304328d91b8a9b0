"""Conversations in the admin: the list, and a conversation's items in order (read-only:
they change through the API)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from ..models import Conversation, ConversationItem, Response, ResponseItem
from ..protocol.items import item_text
from ..store.selectors import FREE, route_prices, usage_counts, usage_sums, usd, usd_text

# ModelAdmin is generic in django-stubs only: subscripted at runtime it raises TypeError.
if TYPE_CHECKING:
    ConversationModelAdmin = admin.ModelAdmin[Conversation]
else:
    ConversationModelAdmin = admin.ModelAdmin

ITEMS_SHOWN = 500


@admin.register(Conversation)
class ConversationAdmin(ConversationModelAdmin):
    # Ids are 69 characters: shown shortened (the whole id in the title, and searchable), so the
    # columns fit a 1400 px window beside the filters.
    list_display = ("short_id", "tenant", "item_count", "created")
    list_display_links = ("short_id",)
    list_filter = ("tenant", ("created_at", admin.DateFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("id", "metadata")
    search_help_text = "Search by conversation id or metadata text."
    ordering = ("-created_at",)
    fields = ("id", "tenant", "created_at", "metadata_display", "usage_display", "items_display")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return super().get_queryset(request).annotate(_items=Count("conversation_items"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        return False

    @admin.display(description="Conversation", ordering="id")
    def short_id(self, obj: Conversation) -> str:
        return format_html('<code title="{}">{}…{}</code>', obj.id, obj.id[:13], obj.id[-4:])

    @admin.display(description="Created at", ordering="created_at")
    def created(self, obj: Conversation) -> str:
        local = timezone.localtime(obj.created_at)
        return format_html(
            '<span title="{}" style="white-space: nowrap">{}</span>',
            local.isoformat(),
            local.strftime("%b %-d, %H:%M:%S"),
        )

    @admin.display(description="Items", ordering="_items")
    def item_count(self, obj: Conversation) -> int:
        return getattr(obj, "_items", 0)

    @admin.display(description="Metadata")
    def metadata_display(self, obj: Conversation) -> str:
        return json.dumps(obj.metadata or {}, ensure_ascii=False)

    @admin.display(description="Usage")
    def usage_display(self, obj: Conversation) -> str:
        """The tokens and cost of every response made in this conversation (one grouped read)."""
        rows = list(Response.objects.filter(conversation=obj).values("model").annotate(n=Count("pk"), **usage_sums()))
        prices = route_prices()
        counts = [(r["model"], usage_counts(r)) for r in rows]
        tokens = sum(c.input + c.output for _, c in counts)
        cost = sum((prices.get(model, FREE).cost(c) for model, c in counts), Decimal(0))
        made = sum(r["n"] for r in rows)
        return format_html(
            '<span data-role="conversation-usage">{} response{}, <strong>{}</strong> tokens, {}</span>',
            made,
            "" if made == 1 else "s",
            f"{tokens:,}",
            usd_text(usd(cost)),
        )

    @admin.display(description="Items, oldest first")
    def items_display(self, obj: Conversation) -> str:
        rows = list(
            ConversationItem.objects.filter(conversation=obj)
            .order_by("position")
            .values_list("position", "item_id", "item__public_id", "item__data")[:ITEMS_SHOWN]
        )
        # The response each shown item came in with (its input or its output): one query.
        made_by = dict(
            ResponseItem.objects.filter(response__conversation=obj, item_id__in=[r[1] for r in rows]).values_list(
                "item_id", "response_id"
            )
        )
        body = format_html_join(
            "",
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    position,
                    public_id,
                    data.get("type"),
                    data.get("role", ""),
                    _response_link(made_by.get(item_id)),
                    _excerpt(data),
                )
                for position, item_id, public_id, data in rows
            ),
        )
        return format_html(
            "<table><thead><tr><th>#</th><th>Item</th><th>Type</th><th>Role</th><th>Response</th><th>Text</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            body,
        )


def _response_link(response_id: str | None) -> str:
    if response_id is None:
        return "—"  # added through the conversation's items API, not by a response
    url = reverse("admin:responses_api_response_change", args=[quote(response_id)])
    return format_html('<a href="{}" title="{}"><code>{}…</code></a>', url, response_id, response_id[:14])


def _excerpt(data: dict[str, Any]) -> str:
    if data.get("type") == "message":
        text = item_text(data)
    else:
        text = data.get("arguments") or data.get("output") or data.get("name") or ""
        text = text if isinstance(text, str) else json.dumps(text)
    return text if len(text) <= 300 else text[:300] + "…"
