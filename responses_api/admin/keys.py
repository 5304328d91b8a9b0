"""Tenants and their API keys: limits, budgets, secrets shown once, revocation."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from ..api.auth import clear_cache as clear_key_cache
from ..history import selectors as history
from ..models import ApiKey, ModelRoute, Tenant
from ..ops.config_admin import ConfigManagedAdmin
from ..orchestration.limits import current_use
from ..store import services
from ..store.selectors import budget_of, key_quota, tenant_quota
from ..store.selectors import usd_text as money
from .common import ModelAdminOf, ModelFormOf, PageChangeList, change_url, when
from .maintenance import retention_last_run_text
from .usage import limits_text, month_cost_table, month_start, use_table


class TenantForm(ModelFormOf[Tenant]):
    class Meta:
        model = Tenant
        fields = ("alert_thresholds",)  # the admin's fieldsets name the form's fields; this sets a widget
        widgets = {"alert_thresholds": forms.TextInput(attrs={"size": 20})}


@admin.register(Tenant)
class TenantAdmin(ConfigManagedAdmin, ModelAdminOf[Tenant]):
    form = TenantForm
    config_fields = {"budget": ("budget_period", "budget_tokens", "budget_usd", "alert_thresholds")}
    list_display = ("name", "key_count", "limits", "period_spend", "last_minute", "created_at")
    search_fields = ("name",)
    ordering = ("name",)
    fieldsets = (
        (None, {"fields": ("name", "mcp_adhoc_egress_allow", "retention_days", "retention_last_run", "created_at")}),
        (
            "Rate limits (all of the tenant's keys together)",
            {"fields": ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests", "current_use")},
        ),
        ("Budget", {"fields": ("budget_period", "budget_tokens", "budget_usd", "alert_thresholds")}),
        ("Cost this month (UTC)", {"fields": ("cost_by_key", "cost_by_model")}),
    )
    readonly_fields = ("created_at", "current_use", "retention_last_run", "cost_by_key", "cost_by_model")

    @admin.display(description="Retention last ran")
    def retention_last_run(self, obj: Tenant) -> str:
        return retention_last_run_text()

    @admin.display(description="By API key")
    def cost_by_key(self, obj: Tenant) -> str:
        return month_cost_table("key", tenant_id=obj.pk)

    @admin.display(description="By model")
    def cost_by_model(self, obj: Tenant) -> str:
        return month_cost_table("model", tenant_id=obj.pk)

    @admin.display(description="Current use")
    def current_use(self, obj: Tenant) -> str:
        if obj.pk is None:
            return "—"
        quota = tenant_quota(obj)
        budget = budget_of(obj)
        return use_table(
            current_use((quota,) if quota else (), (budget,) if budget else ()), history.recent_use(tenant_id=obj.pk)
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return super().get_queryset(request).annotate(_keys=Count("api_keys"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return PageChangeList

    def annotate_page(self, tenants: list[Tenant]) -> None:
        use = history.tenants_use(tenants)
        for tenant in tenants:
            tenant._use = use[tenant.pk]  # type: ignore[attr-defined]  # the page's annotation, set on the row for its columns

    @admin.display(description="API keys", ordering="_keys")
    def key_count(self, obj: Tenant) -> int:
        return int(obj._keys)  # type: ignore[attr-defined]  # the page's annotation (annotate_page)

    @admin.display(description="Limits and budget")
    def limits(self, obj: Tenant) -> str:
        return limits_text(obj)

    @admin.display(description="Spent this period")
    def period_spend(self, obj: Tenant) -> str:
        use: history.TenantUse = obj._use  # type: ignore[attr-defined]  # the page's annotation (annotate_page)
        period = "today" if obj.budget_period == "day" else "this month"
        text = f"{use.period_tokens:,} tokens (${use.period_micro_usd / 1_000_000:,.2f}) {period}"
        if obj.budget_tokens:
            text += f", {100 * use.period_tokens / obj.budget_tokens:.0f}% of the token budget"
        elif obj.budget_usd:
            text += f", {100 * use.period_micro_usd / 1_000_000 / float(obj.budget_usd):.0f}% of the budget"
        return text

    @admin.display(description="Last minute")
    def last_minute(self, obj: Tenant) -> str:
        use: history.TenantUse = obj._use  # type: ignore[attr-defined]  # the page's annotation (annotate_page)
        return f"{use.minute_requests:,} requests, {use.minute_tokens:,} tokens"


# --------------------------------------------------------------------------- API keys


class AllowedModelsField(forms.CharField):
    """A list of model names, typed comma-separated."""

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, (list, tuple)):
            return ", ".join(value)
        return value or ""

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]  # a list field, typed as text
        if isinstance(value, list):
            return value
        return list(dict.fromkeys(p.strip() for p in (value or "").split(",") if p.strip()))


class ApiKeyForm(ModelFormOf[ApiKey]):
    allowed_models = AllowedModelsField(
        required=False,
        help_text="Comma-separated model names this key may use; leave empty to allow every model.",
        widget=forms.TextInput(attrs={"size": 60, "list": "gw-model-names"}),
    )

    class Meta:
        model = ApiKey
        fields = ("tenant", "name", "is_admin", "allowed_models", "expires_at")
        widgets = {"alert_thresholds": forms.TextInput(attrs={"size": 20})}


class RevokedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("active", "Active"), ("expired", "Expired"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
        now = timezone.now()
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


def _secret_session_key(key_id: int) -> str:
    return f"gateway:new-api-key:{key_id}"


@admin.register(ApiKey)
class ApiKeyAdmin(ModelAdminOf[ApiKey]):
    form = ApiKeyForm
    list_display = (
        "name",
        "tenant",
        "key_prefix",
        "is_admin",
        "models_display",
        "limits",
        "month_cost",
        "state",
        "created",
        "last_used",
    )
    list_filter = (RevokedFilter, "is_admin", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("name", "prefix", "tenant__name")
    ordering = ("-created_at",)
    actions = ("revoke_keys",)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        if obj is None:
            return ["tenant", "name", "is_admin", "allowed_models", "expires_at"]
        return [
            "tenant",
            "key_prefix",
            "name",
            "is_admin",
            "allowed_models",
            "expires_at",
            "requests_per_minute",
            "tokens_per_minute",
            "max_concurrent_requests",
            "budget_period",
            "budget_tokens",
            "budget_usd",
            "alert_thresholds",
            "current_use",
            "spend",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return PageChangeList

    def annotate_page(self, keys: list[ApiKey]) -> None:
        """Each key's cost this month: one grouped read for the page's keys (and the price table)."""
        buckets = history.usage_summary(
            tenant_id=None, group_by=("key",), start=month_start(), key_ids=[k.pk for k in keys]
        )
        spent = {b["key_id"]: b["cost_usd"] for b in buckets}
        for key in keys:
            key._cost = spent.get(key.pk, 0.0)  # type: ignore[attr-defined]  # the page's annotation

    @admin.display(description="Cost this month")
    def month_cost(self, obj: ApiKey) -> str:
        return money(getattr(obj, "_cost", 0.0))

    @admin.display(description="Current use")
    def current_use(self, obj: ApiKey) -> str:
        quota, budget = key_quota(obj), budget_of(obj)
        return use_table(
            current_use((quota,) if quota else (), (budget,) if budget else ()), history.recent_use(key_id=obj.pk)
        )

    @admin.display(description="Spent (UTC)")
    def spend(self, obj: ApiKey) -> str:
        """This key's requests, tokens and cost this month per model, and today's and the month's
        totals: the figures /v1/usage gives for the same periods (one table, not two readings)."""
        return month_cost_table("model", tenant_id=obj.tenant_id, key_id=obj.pk, today=True)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return []
        return [
            "tenant",
            "key_prefix",
            "current_use",
            "spend",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]

    @admin.display(description="Key", ordering="prefix")
    def key_prefix(self, obj: ApiKey) -> str:
        return format_html("<code>{}{}_…</code>", services.KEY_PREFIX, obj.prefix)

    @admin.display(description="Limits")
    def limits(self, obj: ApiKey) -> str:
        return limits_text(obj)

    @admin.display(description="Created", ordering="created_at")
    def created(self, obj: ApiKey) -> str:
        return when(obj.created_at)

    @admin.display(description="Last used", ordering="last_used_at")
    def last_used(self, obj: ApiKey) -> str:
        return when(obj.last_used_at)

    @admin.display(description="Models")
    def models_display(self, obj: ApiKey) -> str:
        return ", ".join(obj.allowed_models) if obj.allowed_models else "all"

    @admin.display(description="State", ordering="revoked_at")
    def state(self, obj: ApiKey) -> str:
        if obj.revoked_at:
            return mark_safe('<span class="gw-badge gw-bad">revoked</span>')
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            return mark_safe('<span class="gw-badge gw-warn">expired</span>')
        return mark_safe('<span class="gw-badge gw-ok">active</span>')

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm[ApiKey], change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, raw = services.api_key_create(tenant_name=obj.tenant.name, name=obj.name, is_admin=obj.is_admin)
        if obj.allowed_models:
            ApiKey.objects.filter(pk=key.pk).update(allowed_models=obj.allowed_models)
            key.allowed_models = obj.allowed_models
        # The admin goes on with `obj` (log entry, redirect): make it the created key.
        obj.__dict__.update({k: v for k, v in key.__dict__.items() if k != "_state"})
        obj._state.adding = False
        # Shown once, on the next page, then dropped from the (server-side) session.
        request.session[_secret_session_key(key.pk)] = raw

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        messages.success(request, f"The API key “{obj.name}” was created. Copy its secret now: it is shown only once.")
        return HttpResponseRedirect(change_url(obj))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = dict(extra_context or {})
        try:
            key_id = int(unquote(object_id))
        except ValueError:
            key_id = -1
        secret = request.session.pop(_secret_session_key(key_id), None)
        if secret is not None:
            extra_context["new_secret"] = secret
        extra_context["model_names"] = list(ModelRoute.objects.order_by("name").values_list("name", flat=True))
        return super().change_view(request, object_id, form_url, extra_context)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = dict(extra_context or {})
        extra_context["model_names"] = list(ModelRoute.objects.order_by("name").values_list("name", flat=True))
        return super().add_view(request, form_url, extra_context)

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/regenerate/",
                self.admin_site.admin_view(self.regenerate_view),
                name="responses_api_apikey_regenerate",
            ),
            *super().get_urls(),
        ]

    def regenerate_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST (the key page's button): a new secret for this key, shown once on its page."""
        key = self.get_object(request, unquote(object_id))
        if key is None:
            raise Http404("No such API key.")
        if request.method != "POST" or not self.has_change_permission(request, key):
            return HttpResponseRedirect(change_url(key))
        if key.revoked_at is not None:
            messages.error(request, "A revoked key cannot be regenerated: create a new one.")
            return HttpResponseRedirect(change_url(key))
        raw = services.api_key_regenerate(key=key)
        clear_key_cache()  # this process at once; the others within GATEWAY_CACHE_SECONDS
        self.log_change(request, key, "Regenerated the secret.")
        request.session[_secret_session_key(key.pk)] = raw
        messages.success(
            request,
            f"The API key “{key.name}” has a new secret. Copy it now: it is shown only once. "
            f"The old one is refused within {settings.GATEWAY_CACHE_SECONDS:g} seconds.",
        )
        return HttpResponseRedirect(change_url(key))

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        keys = list(queryset.filter(revoked_at__isnull=True))
        for key in keys:
            services.api_key_revoke(key=key)
        self.message_user(
            request,
            f"Revoked {len(keys)} key(s). Clients using them are refused within the key cache time.",
            messages.SUCCESS,
        )
