"""Stored responses and their threads: the list, a response's page, its conversation."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.db.models import Case, CharField, Exists, OuterRef, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from ..history import presenters
from ..history import selectors as history
from ..models import Response, ResponseItem
from ..protocol.compaction import COMPACTION_INSTRUCTIONS, client_instructions
from ..store.guardrails import events_by_response
from ..store.selectors import FLATTENED_SPANS, route_prices
from ..store.selectors import usd_text as money
from .common import PageChangeList, change_url, status_badge
from .maintenance import ResponseMaintenance
from .usage import usage_view


class ModelFilter(admin.SimpleListFilter):
    title = "model"
    parameter_name = "model"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = Response.objects.order_by("model").values_list("model", flat=True).distinct()
        return [(n, n) for n in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Response]) -> QuerySet[Response]:
        return queryset.filter(model=self.value()) if self.value() else queryset


class DeletedFilter(admin.SimpleListFilter):
    title = "visibility"
    parameter_name = "visibility"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "Live"), ("deleted", "Deleted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Response]) -> QuerySet[Response]:
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


class KindFilter(admin.SimpleListFilter):
    """Ordinary responses, or the compactions among them (both kinds, or each)."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("response", "Responses"),
            ("compaction", "Compactions (both kinds)"),
            (KIND_COMPACT, "/v1/responses/compact summaries"),
            (KIND_TRIGGER, "compaction_trigger creates"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # Any: its rows carry `_kind` (with_kind), which the model's fields do not name.
        if self.value() == "compaction":
            return queryset.filter(_kind__in=(KIND_COMPACT, KIND_TRIGGER))
        if self.value() in ("response", KIND_COMPACT, KIND_TRIGGER):
            return queryset.filter(_kind=self.value())
        return queryset


KIND_COMPACT = "compact"  # the summary run of /v1/responses/compact (the gateway's prompt appended)
KIND_TRIGGER = "compaction"  # a create whose input ended with a compaction_trigger
KIND_LABELS = {KIND_COMPACT: "compaction (/compact)", KIND_TRIGGER: "compaction (trigger)"}


def with_kind(queryset: QuerySet[Response]) -> QuerySet[Response]:
    """Each response's kind as `_kind`, computed by the database (the instructions text is
    compared there, never loaded): a compaction_trigger create answers one `compaction`
    output item; a /compact summary run's instructions end with the gateway's prompt."""
    compaction_output = ResponseItem.objects.filter(
        response=OuterRef("pk"), role=ResponseItem.Role.OUTPUT, item__type="compaction"
    )
    return queryset.annotate(
        _kind=Case(
            When(Exists(compaction_output), then=Value(KIND_TRIGGER)),
            When(instructions__endswith=COMPACTION_INSTRUCTIONS, then=Value(KIND_COMPACT)),
            default=Value("response"),
            output_field=CharField(),
        )
    )


# Columns a changelist row never needs: the big JSON and text.
LIST_DEFERRED = ("params", "error", "incomplete_details", "job", "instructions", "metadata")


@admin.register(Response)
class ResponseAdmin(ResponseMaintenance):
    list_display = (
        "short_id",
        "status_display",
        "kind",
        "model",
        "tenant",
        "key_display",
        "tokens",
        "cost",
        "latency",
        "created",
        "conversation_link",
    )
    list_filter = (
        "status",
        KindFilter,
        ModelFilter,
        "tenant",
        ("created_at", admin.DateFieldListFilter),
        DeletedFilter,
        "completion_window",
    )
    list_select_related = ("tenant", "api_key")
    search_fields = ("id", "model", "metadata", "continuation_id")
    search_help_text = "Search by response id, model name, metadata text or background continuation id."
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
    actions = ("soft_delete", "purge")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "status_display",
                    "kind",
                    "model",
                    "upstream",
                    "tenant",
                    "api_key_display",
                    "conversation_display",
                )
            },
        ),
        ("Timing and usage", {"fields": ("created_at", "completed_at", "latency", "usage_display")}),
        (
            "Request",
            {"fields": ("instructions_display", "metadata_display", "params_display"), "classes": ("collapse",)},
        ),
        ("Outcome", {"fields": ("error_display", "incomplete_display", "background", "on_worker", "deleted_at")}),
        # background_options: not in the Response object the API returns, so shown here.
        ("Background options", {"fields": ("completion_window", "continuation_id")}),
    )
    readonly_fields = (
        "id",
        "status_display",
        "model",
        "upstream",
        "tenant",
        "api_key_display",
        "conversation_display",
        "created_at",
        "completed_at",
        "latency",
        "usage_display",
        "kind",
        "instructions_display",
        "metadata_display",
        "params_display",
        "error_display",
        "incomplete_display",
        "background",
        "on_worker",
        "deleted_at",
        "completion_window",
        "continuation_id",
    )

    # Stored history is evidence: read-only, hidden (not removed) by the soft-delete action.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Response]:
        qs = with_kind(super().get_queryset(request))
        if request.resolver_match and request.resolver_match.url_name == "responses_api_response_changelist":
            return qs.defer(*LIST_DEFERRED)  # list_select_related joins the tenant and the key
        return qs.select_related("tenant", "api_key")

    # -- columns

    @admin.display(description="Response", ordering="id")
    def short_id(self, obj: Response) -> str:
        return format_html('<code title="{}">{}…{}</code>', obj.id, obj.id[:11], obj.id[-4:])

    @admin.display(description="Status", ordering="status")
    def status_display(self, obj: Response) -> str:
        badge = status_badge(obj.status)
        if obj.deleted_at:
            badge += mark_safe(' <span class="gw-badge gw-muted">deleted</span>')
        return badge

    @admin.display(description="Kind", ordering="_kind")
    def kind(self, obj: Response) -> str:
        kind = getattr(obj, "_kind", "response")
        if kind not in KIND_LABELS:
            return "—"  # a plain response: the column stays as narrow as the badges
        return format_html('<span class="gw-badge gw-busy" data-kind="{}">{}</span>', kind, KIND_LABELS[kind])

    @admin.display(description="Tokens in/out")
    def tokens(self, obj: Response) -> str:
        if obj.input_tokens is None:
            return "—"
        return format_html(
            '<span title="{} total">{} / {}</span>',
            f"{obj.total_tokens:,}",
            f"{obj.input_tokens:,}",
            f"{obj.output_tokens or 0:,}",
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return PageChangeList

    def annotate_page(self, rows: list[Response]) -> None:
        """The price table, read once for the page's cost column."""
        prices = route_prices()
        for row in rows:
            row._cost = history.row_cost_usd(row, prices)  # type: ignore[attr-defined]  # the page's annotation

    @admin.display(description="Key", ordering="api_key__name")
    def key_display(self, obj: Response) -> str:
        if obj.api_key is None:
            return "—"
        return format_html(
            '<a href="{}" title="{}">{}</a>', change_url(obj.api_key), str(obj.api_key), obj.api_key.name
        )

    @admin.display(description="Cost")
    def cost(self, obj: Response) -> str:
        value = getattr(obj, "_cost", None)
        return "—" if value is None else money(value)

    @admin.display(description="Latency", ordering="latency_ms")
    def latency(self, obj: Response) -> str:
        if obj.latency_ms is None:
            return "—"
        return f"{obj.latency_ms / 1000:.2f} s" if obj.latency_ms >= 1000 else f"{obj.latency_ms} ms"

    @admin.display(description="Created", ordering="created_at")
    def created(self, obj: Response) -> str:
        local = timezone.localtime(obj.created_at)
        return format_html('<span title="{}">{}</span>', local.isoformat(), local.strftime("%b %-d, %H:%M:%S"))

    @admin.display(description="")
    def conversation_link(self, obj: Response) -> str:
        url = reverse("admin:responses_api_response_conversation", args=[quote(obj.pk)])
        return format_html('<a class="gw-link" href="{}" title="Conversation">chat →</a>', url)

    # -- detail fields

    @admin.display(description="API key")
    def api_key_display(self, obj: Response) -> str:
        if obj.api_key is None:
            return "—"
        return format_html('<a href="{}">{}</a>', change_url(obj.api_key), str(obj.api_key))

    @admin.display(description="Conversation")
    def conversation_display(self, obj: Response) -> str:
        if obj.conversation_id is None:
            return "—"
        url = reverse("admin:responses_api_conversation_change", args=[quote(obj.conversation_id)])
        return format_html('<a href="{}" data-role="conversation-link">{}</a>', url, obj.conversation_id)

    @admin.display(description="Usage")
    def usage_display(self, obj: Response) -> str:
        if obj.input_tokens is None:
            return "—"
        cost = history.row_cost_usd(obj, route_prices())
        return format_html(
            "{} input ({} cached, {} cache writes) + {} output ({} reasoning) = <strong>{}</strong> tokens, "
            '<strong data-role="cost">{}</strong> at the route\'s current prices',
            f"{obj.input_tokens:,}",
            f"{obj.cached_tokens or 0:,}",
            f"{obj.cache_write_tokens or 0:,}",
            f"{obj.output_tokens or 0:,}",
            f"{obj.reasoning_tokens or 0:,}",
            f"{obj.total_tokens:,}",
            money(cost or 0),
        )

    @admin.display(description="Instructions (the client's)")
    def instructions_display(self, obj: Response) -> str:
        client, gateway_prompt = client_instructions(obj.instructions)
        shown = format_html('<pre class="gw-json">{}</pre>', client) if client else "—"
        if gateway_prompt:
            shown = format_html(
                '{}<p class="help" data-role="gateway-prompt">The gateway appended its own summariser prompt '
                "(/v1/responses/compact); it is not shown here.</p>",
                shown,
            )
        return shown

    @admin.display(description="Metadata")
    def metadata_display(self, obj: Response) -> str:
        return format_html('<pre class="gw-json">{}</pre>', presenters.pretty_json(obj.metadata or {}))

    @admin.display(description="Parameters")
    def params_display(self, obj: Response) -> str:
        params = dict(obj.params or {})
        params.pop(FLATTENED_SPANS, None)  # the gateway's bookkeeping, not a request parameter
        if isinstance(params.get("instructions"), str):  # the client's, as in the field above
            params["instructions"] = client_instructions(params["instructions"])[0]
        return format_html('<pre class="gw-json">{}</pre>', presenters.pretty_json(params))

    @admin.display(description="Error")
    def error_display(self, obj: Response) -> str:
        if not obj.error:
            return "—"
        return format_html('<pre class="gw-json gw-error-text">{}</pre>', presenters.pretty_json(obj.error))

    @admin.display(description="Incomplete details")
    def incomplete_display(self, obj: Response) -> str:
        if not obj.incomplete_details:
            return "—"
        return format_html('<pre class="gw-json">{}</pre>', presenters.pretty_json(obj.incomplete_details))

    # -- views

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("usage/", view(self.usage_view), name="responses_api_response_usage"),
            path(
                "<path:object_id>/conversation/",
                view(self.conversation_view),
                name="responses_api_response_conversation",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response_id = unquote(object_id)
        extra_context = dict(extra_context or {})
        row = Response.objects.filter(pk=response_id).values_list("previous_response_id", flat=True).first()
        extra_context.update(
            previous_url=reverse("admin:responses_api_response_change", args=[quote(row)]) if row else None,
            items=[presenters.item_block(e.item, e.role_name) for e in history.response_items(response_id=response_id)],
            next_ids=[
                (rid, reverse("admin:responses_api_response_change", args=[quote(rid)]))
                for rid in history.response_next_ids(response_id=response_id)
            ],
            conversation_url=reverse("admin:responses_api_response_conversation", args=[quote(response_id)]),
        )
        return super().change_view(request, object_id, form_url, extra_context)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = dict(extra_context or {})
        extra_context["usage_url"] = reverse("admin:responses_api_response_usage")
        return super().changelist_view(request, extra_context)

    def conversation_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        response_id = unquote(object_id)
        head = Response.objects.filter(pk=response_id).defer("job").select_related("tenant").first()
        if head is None or not self.has_view_permission(request, head):
            raise Http404("No such response.")
        chain = history.chain_responses(response_id=head.id)
        entries = history.thread_entries(response_id=head.id)
        turns = presenters.conversation_turns(chain, entries, head.id)
        decided = events_by_response(turn.response.id for turn in turns)
        for turn in turns:
            turn.guardrail_events = decided.get(turn.response.id, [])
            turn.instructions, turn.gateway_prompt = client_instructions(turn.response.instructions)
            turn.change_url = reverse("admin:responses_api_response_change", args=[quote(turn.response.id)])
            turn.conversation_url = reverse("admin:responses_api_response_conversation", args=[quote(turn.response.id)])
            if turn.response.prompt_id:
                turn.prompt_url = reverse("admin:responses_api_prompt_change", args=[quote(turn.response.prompt_id)])
        next_ids = history.response_next_ids(response_id=head.id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Conversation up to {head.id}",
            "subtitle": None,
            "head": head,
            "turns": turns,
            "chain_root": chain[0] if chain else head,
            "next_links": [
                (rid, reverse("admin:responses_api_response_conversation", args=[quote(rid)])) for rid in next_ids
            ],
            "change_url": reverse("admin:responses_api_response_change", args=[quote(head.id)]),
            "total_tokens": sum((r.input_tokens or 0) + (r.output_tokens or 0) for r in chain),
        }
        return TemplateResponse(request, "admin/responses_api/response/conversation.html", context)

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        return usage_view(self, request)
