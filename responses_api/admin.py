"""The operator's admin: stored responses and their conversations, usage, keys, providers, routes.

Reads go through responses_api.history.selectors and writes through
responses_api.store.services; lists join what they show (`list_select_related`)
and never load the large JSON columns.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.db.models import Case, CharField, Count, Exists, OuterRef, Prefetch, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from .api.auth import budget_of, key_quota, tenant_quota
from .api.auth import clear_cache as clear_key_cache
from .domain import Budget
from .engine.router import target_health
from .history import presenters
from .history import selectors as history
from .models import (
    PRICE_FIELDS,
    AlertDelivery,
    AlertWebhook,
    ApiKey,
    MaintenanceRun,
    ModelRoute,
    Provider,
    Response,
    ResponseItem,
    RouteTarget,
    Tenant,
    validate_base_url,
)
from .ops.config_admin import ConfigManagedAdmin
from .orchestration import routing
from .orchestration.limits import current_use
from .protocol.compaction import COMPACTION_INSTRUCTIONS, client_instructions
from .protocol.errors import GatewayError
from .store import services
from .store.selectors import FLATTENED_SPANS, spend_since

# The front page shows today's traffic and spend and links the operator's daily pages (usage,
# route health, docs) above the models; the header names the gateway.
admin.site.index_template = "admin/gateway_index.html"
admin.site.site_header = "Open Responses gateway"
admin.site.site_title = "Open Responses gateway"
# No models sidebar: the lists' columns (key, tokens, cost, ...) get its 280 px, so a 1,400 px
# window shows them whole beside the filters; the front page and the breadcrumbs lead everywhere.
admin.site.enable_nav_sidebar = False
_site_index = admin.site.index


def _figures(row: dict[str, Any]) -> tuple[str, str, str]:
    """A usage bucket's requests, tokens and cost, for display."""
    return f"{row['requests']:,}", f"{row['total_tokens']:,}", presenters.money(row["cost_usd"])


def _index_with_today(request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
    today = history.today_summary()
    context = {
        **(extra_context or {}),
        "today_requests": f"{today.requests:,}",
        "today_errors": f"{today.errors:,}",
        "today_total": presenters.usage_totals([today.total]),
        "top_keys": [(r.get("key") or presenters.NO_KEY, r["tenant"], *_figures(r)) for r in today.top_keys],
        "top_models": [(r["model"], *_figures(r)) for r in today.top_models],
    }
    return _site_index(request, context)


admin.site.index = _index_with_today  # type: ignore[method-assign]  # the site's own view, with today's figures

STATUS_COLOURS = {
    "completed": "ok",
    "in_progress": "busy",
    "queued": "busy",
    "failed": "bad",
    "cancelled": "muted",
    "incomplete": "warn",
}


def status_badge(status: str) -> str:
    return format_html(
        '<span class="gw-badge gw-{}">{}</span>', STATUS_COLOURS.get(status, "muted"), status.replace("_", " ")
    )


def _when(moment: datetime | None) -> str:
    """A time in a list column: short, on one line, the full ISO time in its title."""
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    return format_html(
        '<span title="{}" style="white-space: nowrap">{}</span>', local.isoformat(), local.strftime("%b %-d, %H:%M")
    )


def _change_url(obj: Any) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])


# --------------------------------------------------------------------------- tenants


def _month_start() -> datetime:
    now = timezone.now().astimezone(UTC)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _cost_table(buckets: list[dict[str, Any]], by: str, label: str) -> str:
    """Requests, tokens and cost per model or per key since the month began (UTC): the figures
    of /v1/usage for the same period."""
    rows = presenters.usage_by_model(buckets) if by == "model" else presenters.usage_by_key(buckets)
    if not rows:
        return "Nothing spent this month."
    total = presenters.usage_totals(buckets)
    return format_html(
        '<table class="gw-use" data-role="cost-table" data-by="{}"><thead><tr><th>{}</th><th>Requests</th>'
        "<th>Tokens</th><th>Cost</th></tr></thead><tbody>{}</tbody><tfoot><tr><th>This month</th>"
        '<td>{}</td><td>{}</td><td data-role="cost-total">{}</td></tr></tfoot></table>',
        by,
        label,
        format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((name, agg["requests"], agg["total_tokens"], agg["cost"]) for name, agg in rows),
        ),
        total["requests"],
        total["total_tokens"],
        total["cost"],
    )


def _use_table(rows: list[dict[str, Any]], window: tuple[int, int] | None = None) -> str:
    """A tenant's or key's limits with their current use (the counters every process shares).

    A per-minute limit is a token bucket that refills continuously, so a bucket's reading
    falls back to 0 seconds after a burst: its row shows what the store saw in the last
    60 s (`window`: requests, tokens) first, then the bucket."""
    if not rows:
        return "No limits."
    recent = {"requests per minute": 0, "tokens per minute": 1}

    def used(row: dict[str, Any]) -> str:
        if row.get("used") is None:
            return "not counted yet"
        text = f"{row['used']:,}"
        if row.get("used_usd") is not None:
            text += f" (${row['used_usd']:,.2f})"
        if window is not None and row["limit"] in recent:
            text = f"{window[recent[row['limit']]]:,} in the last 60 s (bucket: {text} reserved)"
        elif "renews_in_seconds" in row:
            text += f", renews in {_ago(row['renews_in_seconds'])}"
        return text

    def limit(row: dict[str, Any]) -> str:
        parts = (
            [f"{row['value']:,} tokens"]
            if row.get("value") is not None and "usd" in row
            else ([f"{row['value']:,}"] if row.get("value") is not None else [])
        )
        if row.get("usd") is not None:
            parts.append(f"${row['usd']:,.2f}")
        return " or ".join(parts)

    return format_html(
        '<table data-role="use-table"><tr><th>limit</th><th>value</th><th>in use</th></tr>{}</table>',
        format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", ((r["limit"], limit(r), used(r)) for r in rows)
        ),
    )


def _limits_text(owner: Tenant | ApiKey) -> str:
    """A tenant's or key's limits in one line ("60 rpm · 10,000 tpm · 4 concurrent · $5.00 a month")."""
    parts = []
    if owner.requests_per_minute:
        parts.append(f"{owner.requests_per_minute:,} rpm")
    if owner.tokens_per_minute:
        parts.append(f"{owner.tokens_per_minute:,} tpm")
    if owner.max_concurrent_requests:
        parts.append(f"{owner.max_concurrent_requests:,} concurrent")
    period = "a day" if owner.budget_period == "day" else "a month"
    if owner.budget_tokens is not None:
        parts.append(f"{owner.budget_tokens:,} tokens {period}")
    if owner.budget_usd is not None:
        parts.append(f"${owner.budget_usd:,.2f} {period}")
    return " · ".join(parts) or "none"


class _PageChangeList(ChangeList):
    """A changelist whose page of rows its admin annotates in a constant number of look-ups
    (`annotate_page`), after the rows are fetched and before they are shown."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.model_admin.annotate_page(list(self.result_list))  # type: ignore[attr-defined]  # annotate_page is declared by this app's admins that use this changelist


class TenantForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ("alert_thresholds",)  # the admin's fieldsets name the form's fields; this sets a widget
        widgets = {"alert_thresholds": forms.TextInput(attrs={"size": 20})}


@admin.register(Tenant)
class TenantAdmin(ConfigManagedAdmin, admin.ModelAdmin):
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
        run = MaintenanceRun.objects.filter(name=services.RETENTION_JOB).first()
        if run is None:
            return (
                "never: it runs every GATEWAY_RETENTION_INTERVAL_SECONDS on Celery beat, or in the embedded "
                "process; `manage.py expire_responses` runs it now"
            )
        deleted = run.result or {}
        return (
            f"{run.ran_at:%Y-%m-%d %H:%M:%S} UTC (all tenants): deleted {deleted.get('responses', 0):,} "
            f"response(s) and {deleted.get('items', 0):,} item(s)"
        )

    @admin.display(description="By API key")
    def cost_by_key(self, obj: Tenant) -> str:
        if obj.pk is None:
            return "—"
        buckets = history.usage_summary(tenant_id=obj.pk, group_by=("key",), start=_month_start())
        return _cost_table(buckets, "key", "API key")

    @admin.display(description="By model")
    def cost_by_model(self, obj: Tenant) -> str:
        if obj.pk is None:
            return "—"
        buckets = history.usage_summary(tenant_id=obj.pk, group_by=("model",), start=_month_start())
        return _cost_table(buckets, "model", "Model")

    @admin.display(description="Current use")
    def current_use(self, obj: Tenant) -> str:
        if obj.pk is None:
            return "—"
        quota = tenant_quota(obj)
        budget = budget_of(obj)
        return _use_table(
            current_use((quota,) if quota else (), (budget,) if budget else ()), history.recent_use(tenant_id=obj.pk)
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return super().get_queryset(request).annotate(_keys=Count("api_keys"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _PageChangeList

    def annotate_page(self, tenants: list[Tenant]) -> None:
        use = history.tenants_use(tenants)
        for tenant in tenants:
            tenant._use = use[tenant.pk]  # type: ignore[attr-defined]  # the page's annotation, set on the row for its columns

    @admin.display(description="API keys", ordering="_keys")
    def key_count(self, obj: Tenant) -> int:
        return obj._keys  # type: ignore[attr-defined]  # the page's annotation (annotate_page)

    @admin.display(description="Limits and budget")
    def limits(self, obj: Tenant) -> str:
        return _limits_text(obj)

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


class ApiKeyForm(forms.ModelForm):
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

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
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
class ApiKeyAdmin(admin.ModelAdmin):
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
            "cost_by_model",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]

    @admin.display(description="Cost this month (UTC)")
    def cost_by_model(self, obj: ApiKey) -> str:
        buckets = history.usage_summary(
            tenant_id=obj.tenant_id, group_by=("model",), start=_month_start(), key_id=obj.pk
        )
        return _cost_table(buckets, "model", "Model")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _PageChangeList

    def annotate_page(self, keys: list[ApiKey]) -> None:
        """Each key's cost this month: one grouped read for the page's keys (and the price table)."""
        buckets = history.usage_summary(
            tenant_id=None, group_by=("key",), start=_month_start(), key_ids=[k.pk for k in keys]
        )
        spent = {b["key_id"]: b["cost_usd"] for b in buckets}
        for key in keys:
            key._cost = spent.get(key.pk, 0.0)  # type: ignore[attr-defined]  # the page's annotation

    @admin.display(description="Cost this month")
    def month_cost(self, obj: ApiKey) -> str:
        return presenters.money(getattr(obj, "_cost", 0.0))

    @admin.display(description="Current use")
    def current_use(self, obj: ApiKey) -> str:
        quota, budget = key_quota(obj), budget_of(obj)
        return _use_table(
            current_use((quota,) if quota else (), (budget,) if budget else ()), history.recent_use(key_id=obj.pk)
        )

    @admin.display(description="Spent")
    def spend(self, obj: ApiKey) -> str:
        """This key's tokens and cost today and this month, from the stored usage (responses and
        usage records) at the routes' current prices."""
        now = time.time()
        rows = []
        for label, period in (("today (UTC)", "day"), ("this month (UTC)", "month")):
            start = datetime.fromtimestamp(Budget(obj.tenant_id, period).window(now)[1], UTC)
            tokens, micro_usd = spend_since(tenant_id=obj.tenant_id, key_id=obj.pk, start=start)
            rows.append((label, f"{tokens:,} tokens", f"${micro_usd / 1_000_000:,.4f}"))
        return format_html(
            '<table data-role="key-spend"><tr><th>period</th><th>tokens</th><th>cost</th></tr>{}</table>',
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return []
        return [
            "tenant",
            "key_prefix",
            "current_use",
            "spend",
            "cost_by_model",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]

    @admin.display(description="Key", ordering="prefix")
    def key_prefix(self, obj: ApiKey) -> str:
        return format_html("<code>{}{}_…</code>", services.KEY_PREFIX, obj.prefix)

    @admin.display(description="Limits")
    def limits(self, obj: ApiKey) -> str:
        return _limits_text(obj)

    @admin.display(description="Created", ordering="created_at")
    def created(self, obj: ApiKey) -> str:
        return _when(obj.created_at)

    @admin.display(description="Last used", ordering="last_used_at")
    def last_used(self, obj: ApiKey) -> str:
        return _when(obj.last_used_at)

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

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
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
        return HttpResponseRedirect(_change_url(obj))

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
            return HttpResponseRedirect(_change_url(key))
        if key.revoked_at is not None:
            messages.error(request, "A revoked key cannot be regenerated: create a new one.")
            return HttpResponseRedirect(_change_url(key))
        raw = services.api_key_regenerate(key=key)
        clear_key_cache()  # this process at once; the others within GATEWAY_CACHE_SECONDS
        self.log_change(request, key, "Regenerated the secret.")
        request.session[_secret_session_key(key.pk)] = raw
        messages.success(
            request,
            f"The API key “{key.name}” has a new secret. Copy it now: it is shown only once. "
            f"The old one is refused within {settings.GATEWAY_CACHE_SECONDS:g} seconds.",
        )
        return HttpResponseRedirect(_change_url(key))

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


# --------------------------------------------------------------------------- providers and routes


class BaseUrlField(forms.CharField):
    """An upstream's base URL: http(s) with a host, one-label hosts such as a compose service
    name included (`models.validate_base_url`; Django's URLField refuses them); without a
    scheme it is taken as http."""

    def to_python(self, value: Any) -> str:
        value = super().to_python(value)
        return f"http://{value}" if value and "://" not in value else value


class ProviderForm(forms.ModelForm):
    base_url = BaseUrlField(
        max_length=500,
        validators=[validate_base_url],
        help_text="e.g. http://127.0.0.1:8000/v1 or http://vllm:8000/v1 (the gateway appends /chat/completions).",
    )
    new_api_key = forms.CharField(
        required=False,
        label="API key",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "size": 60}),
        help_text="Stored encrypted and never shown again. Leave empty to keep the current key; "
        "or name an environment variable above instead.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored API key")

    class Meta:
        model = Provider
        fields = (
            "name",
            "kind",
            "base_url",
            "api_key_env",
            "connect_timeout",
            "first_byte_timeout",
            "idle_timeout",
            "timeout",
            "options",
            "headers",
            "enabled",
        )


@admin.register(Provider)
class ProviderAdmin(ConfigManagedAdmin, admin.ModelAdmin):
    form = ProviderForm
    config_fields = {"api_key": ()}
    config_hidden = {"api_key": ("new_api_key", "clear_api_key")}
    list_display = ("name", "kind", "base_url", "key_source", "enabled", "updated_at")
    list_filter = ("enabled", "kind")
    search_fields = ("name", "base_url")
    actions = ("check_connection",)
    fieldsets = (
        (None, {"fields": ("name", "kind", "base_url", "enabled")}),
        ("Credentials", {"fields": ("api_key_env", "new_api_key", "clear_api_key")}),
        (
            "Connection",
            {"fields": ("connect_timeout", "first_byte_timeout", "idle_timeout", "timeout", "options", "headers")},
        ),
    )

    @admin.display(description="Key")
    def key_source(self, obj: Provider) -> str:
        if obj.api_key_env:
            return format_html("env <code>${}</code>", obj.api_key_env)
        if obj.api_key_encrypted:
            return "stored (encrypted)"
        return "none"

    def save_model(self, request: HttpRequest, obj: Provider, form: forms.ModelForm, change: bool) -> None:
        if form.cleaned_data.get("new_api_key"):
            obj.api_key_encrypted = routing.encrypt_secret(form.cleaned_data["new_api_key"])
        elif form.cleaned_data.get("clear_api_key"):
            obj.api_key_encrypted = ""
        super().save_model(request, obj, form, change)

    @admin.action(description="Check connection (GET /models)")
    def check_connection(self, request: HttpRequest, queryset: QuerySet[Provider]) -> None:
        for provider in queryset:
            level, text = provider_check(provider)
            self.message_user(request, text, level)


def provider_check(provider: Provider, timeout: float = 5.0) -> tuple[int, str]:
    """Ask the provider for its model list: (message level, message)."""
    url = provider.base_url.rstrip("/") + "/models"
    try:
        secret = routing.provider_secret(provider)
    except GatewayError as exc:  # a missing env var, a key sealed under a dropped encryption key
        return messages.ERROR, f"{provider.name}: {exc}"
    headers = {str(k): str(v) for k, v in (provider.headers or {}).items()}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    started = time.monotonic()
    try:
        reply = httpx.get(
            url, headers=headers, timeout=httpx.Timeout(timeout, connect=min(provider.connect_timeout, timeout))
        )
    except httpx.HTTPError as exc:
        return messages.ERROR, f"{provider.name}: cannot reach {url}: {exc.__class__.__name__}: {exc}"
    elapsed = (time.monotonic() - started) * 1000
    if reply.status_code != 200:
        return messages.ERROR, (
            f"{provider.name}: {url} answered HTTP {reply.status_code} in {elapsed:.0f} ms: {reply.text[:300]}"
        )
    try:
        names = [m.get("id", "?") for m in reply.json().get("data", [])]
    except (ValueError, AttributeError):
        return messages.WARNING, f"{provider.name}: {url} answered 200 but not a model list."
    shown = ", ".join(names[:30]) + (f" … (+{len(names) - 30} more)" if len(names) > 30 else "")
    return messages.SUCCESS, f"{provider.name}: OK in {elapsed:.0f} ms, {len(names)} model(s): {shown}"


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


class RouteTargetInline(admin.TabularInline):
    model = RouteTarget
    extra = 1
    fields = ("provider", "upstream_model", "priority", "weight", "max_concurrent", "health")
    readonly_fields = ("health",)

    # A route whose targets GATEWAY_CONFIG sets: shown, not edited here.
    def _file_managed(self, obj: ModelRoute | None) -> bool:
        return obj is not None and "targets" in (obj.config_managed or [])

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._file_managed(obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._file_managed(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._file_managed(obj) and super().has_delete_permission(request, obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[RouteTarget]:
        return super().get_queryset(request).select_related("provider")

    @admin.display(description="Health (shared by every process)")
    def health(self, obj: RouteTarget) -> str:
        if obj.pk is None:
            return "—"
        label = _target_label(obj)
        found = target_health([label]).get(label)
        if found is None:
            return "unknown (the health store is unreachable)"
        health, in_flight = found
        now = time.time()
        state: str
        if health.cooling(now):
            state = format_html(
                "<strong>cooling down</strong> for {} s more ({} failures in a row)",
                int(health.cooled_until - now) + 1,
                health.failures,
            )
        elif health.failures:
            state = format_html("healthy, {} recent failure(s)", health.failures)
        else:
            state = "healthy"
        last = (
            format_html("<br>last error {} ago: {}", _ago(now - health.last_error_at), health.last_error)
            if health.last_error
            else ""
        )
        busy = format_html("<br>{} request(s) in flight", in_flight) if obj.max_concurrent else ""
        return format_html("{}{}{}", state, last, busy)


def _target_label(target: RouteTarget) -> str:
    return f"{target.provider.name}:{target.upstream_model}"


def _health_badge(label: str, found: Any, now: float) -> str:
    """One target's state as a badge: healthy, failing, cooling down (seconds left), unknown."""
    if found is None:
        return format_html('<span class="gw-badge gw-muted" title="{}">unknown</span>', label)
    health, _ = found
    if health.cooling(now):
        return format_html(
            '<span class="gw-badge gw-bad" title="{}: {}">cooling {} s</span>',
            label,
            health.last_error or "",
            int(health.cooled_until - now) + 1,
        )
    if health.failures:
        return format_html('<span class="gw-badge gw-warn" title="{}">{} failure(s)</span>', label, health.failures)
    return format_html('<span class="gw-badge gw-ok" title="{}">healthy</span>', label)


@admin.register(ModelRoute)
class ModelRouteAdmin(ConfigManagedAdmin, admin.ModelAdmin):
    inlines = (RouteTargetInline,)
    config_fields = {"price": PRICE_FIELDS, "targets": ()}
    list_display = ("name", "targets_display", "health", "enabled", "run_on_worker", "updated_at")
    list_filter = ("enabled", "run_on_worker")
    search_fields = ("name", "description", "targets__upstream_model")
    fields = (
        "name",
        "description",
        "enabled",
        "run_on_worker",
        "hosted_tools",
        "context_window",
        *PRICE_FIELDS,
        "created_at",
        "updated_at",
    )
    readonly_fields = ("created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelRoute]:
        targets = RouteTarget.objects.select_related("provider").order_by("id")
        return super().get_queryset(request).prefetch_related(Prefetch("targets", queryset=targets))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _PageChangeList

    def annotate_page(self, routes: list[ModelRoute]) -> None:
        """Every target's health on the page in one look-up of the shared health store."""
        labels = [_target_label(t) for route in routes for t in route.targets.all()]
        found = target_health(labels) if labels else {}
        for route in routes:
            route._health = {label: found.get(label) for label in map(_target_label, route.targets.all())}  # type: ignore[attr-defined]  # the page's annotation, set on the row for its columns

    @admin.display(description="Health")
    def health(self, obj: ModelRoute) -> str:
        states: dict[str, Any] = getattr(obj, "_health", {})
        if not states:
            return "—"
        now = time.time()
        # One badge a target, in the targets column's order (each names its target in its title).
        return format_html_join(
            mark_safe("<br>"),
            '<span data-target="{}">{}</span>',
            ((label, _health_badge(label, f, now)) for label, f in states.items()),
        )

    @admin.display(description="Targets (weight)")
    def targets_display(self, obj: ModelRoute) -> str:
        return (
            format_html_join(
                ", ",
                "<code>{}:{}</code> ({})",
                ((t.provider.name, t.upstream_model, t.weight or "fallback") for t in obj.targets.all()),
            )
            or "—"
        )


# --------------------------------------------------------------------------- responses


class ModelFilter(admin.SimpleListFilter):
    title = "model"
    parameter_name = "model"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = Response.objects.order_by("model").values_list("model", flat=True).distinct()
        return [(n, n) for n in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(model=self.value()) if self.value() else queryset


class DeletedFilter(admin.SimpleListFilter):
    title = "visibility"
    parameter_name = "visibility"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "Live"), ("deleted", "Deleted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
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

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
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
class ResponseAdmin(admin.ModelAdmin):
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
    )
    list_select_related = ("tenant", "api_key")
    search_fields = ("id", "model", "metadata")
    search_help_text = "Search by response id, model name or metadata text."
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

    def has_hide_permission(self, request: HttpRequest) -> bool:
        """Soft delete needs the model's delete permission (hard delete itself is never offered)."""
        return request.user.has_perm("responses_api.delete_response")

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
        return _PageChangeList

    def annotate_page(self, rows: list[Response]) -> None:
        """The price table, read once for the page's cost column."""
        prices = history.route_prices()
        for row in rows:
            row._cost = history.row_cost_usd(row, prices)  # type: ignore[attr-defined]  # the page's annotation

    @admin.display(description="Key", ordering="api_key__name")
    def key_display(self, obj: Response) -> str:
        if obj.api_key is None:
            return "—"
        return format_html(
            '<a href="{}" title="{}">{}</a>', _change_url(obj.api_key), str(obj.api_key), obj.api_key.name
        )

    @admin.display(description="Cost")
    def cost(self, obj: Response) -> str:
        value = getattr(obj, "_cost", None)
        return "—" if value is None else presenters.money(value)

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
        return format_html('<a href="{}">{}</a>', _change_url(obj.api_key), str(obj.api_key))

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
        cost = history.row_cost_usd(obj, history.route_prices())
        return format_html(
            "{} input ({} cached, {} cache writes) + {} output ({} reasoning) = <strong>{}</strong> tokens, "
            '<strong data-role="cost">{}</strong> at the route\'s current prices',
            f"{obj.input_tokens:,}",
            f"{obj.cached_tokens or 0:,}",
            f"{obj.cache_write_tokens or 0:,}",
            f"{obj.output_tokens or 0:,}",
            f"{obj.reasoning_tokens or 0:,}",
            f"{obj.total_tokens:,}",
            presenters.money(cost or 0),
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
        for turn in turns:
            turn.instructions, turn.gateway_prompt = client_instructions(turn.response.instructions)
            turn.change_url = reverse("admin:responses_api_response_change", args=[quote(turn.response.id)])
            turn.conversation_url = reverse("admin:responses_api_response_conversation", args=[quote(turn.response.id)])
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
        if not self.has_view_permission(request):
            raise Http404
        try:
            days = max(1, min(int(request.GET.get("days", 30)), 366))
        except ValueError:
            days = 30
        tenant_id: int | None
        try:
            tenant_id = int(request.GET["tenant"]) if request.GET.get("tenant") else None
        except ValueError:
            tenant_id = None
        today = timezone.now().astimezone(UTC).date()
        start_day = today - timedelta(days=days - 1)
        start = datetime(start_day.year, start_day.month, start_day.day, tzinfo=UTC)
        metric = "cost_usd" if request.GET.get("metric") == "cost" else "total_tokens"
        rows = history.usage_summary(tenant_id=tenant_id, group_by=("day", "model"), start=start)
        by_key = history.usage_summary(tenant_id=tenant_id, group_by=("key",), start=start)
        # The same figures from the API as CSV (a staff session may read it), per tenant.
        query = {"start": int(start.timestamp()), "format": "csv"}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Usage and cost",
            "subtitle": None,
            "chart": presenters.usage_chart(rows, start_day, today, metric=metric),
            "metric": "cost" if metric == "cost_usd" else "tokens",
            "days": days,
            "day_choices": (7, 30, 90),
            "tenants": history.tenant_names(),
            "tenant_id": tenant_id,
            "by_model": presenters.usage_by_model(rows),
            "by_key": presenters.usage_by_key(by_key),
            "totals_display": presenters.usage_totals(rows),
            "period_start": start,
            "csv_by_day_url": "/v1/usage?" + urlencode({**query, "group_by": "day,model,tenant"}),
            "csv_by_key_url": "/v1/usage?" + urlencode({**query, "group_by": "key,model,tenant"}),
            "changelist_url": reverse("admin:responses_api_response_changelist"),
        }
        return TemplateResponse(request, "admin/responses_api/response/usage.html", context)

    @admin.action(
        description="Delete selected responses (hide from the API; chains keep their context)", permissions=["hide"]
    )
    def soft_delete(self, request: HttpRequest, queryset: QuerySet[Response]) -> None:
        rows = list(queryset.filter(deleted_at__isnull=True).values_list("id", "tenant_id"))
        for response_id, tenant_id in rows:
            services.response_delete(tenant_id=tenant_id, response_id=response_id)
        self.message_user(request, f"Deleted {len(rows)} response(s).", messages.SUCCESS)

    @admin.action(description="Purge selected responses (remove their content everywhere)", permissions=["purge"])
    def purge(self, request: HttpRequest, queryset: QuerySet[Response]) -> TemplateResponse | None:
        rows = list(queryset.select_related("tenant").order_by("created_at"))
        ids = [r.id for r in rows]
        if request.POST.get("confirmed") != "yes":
            return TemplateResponse(
                request,
                "admin/responses_api/response/purge_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Purge responses",
                    "rows": rows,
                    "descendants": len(services.response_descendants(ids)),
                    "running": [
                        r.id for r in rows if r.status in (Response.Status.QUEUED, Response.Status.IN_PROGRESS)
                    ],
                },
            )
        try:
            counts = services.responses_purge(response_ids=ids)
        except services.PurgeRefused as exc:
            self.message_user(request, f"Nothing purged: {exc}", messages.ERROR)
            return None
        self.message_user(
            request,
            f"Purged {counts['responses']} response(s) and {counts['items']} item(s); "
            f"{counts['broken_chains']} later response(s) can no longer be continued.",
            messages.SUCCESS,
        )
        return None

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)


# --------------------------------------------------------------------------- budget alerts


class AlertWebhookForm(forms.ModelForm):
    new_secret = forms.CharField(
        required=False,
        label="Signing secret",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "size": 60}),
        help_text="Signs each delivery: X-Gateway-Signature: sha256=<HMAC-SHA256 of the body>. Stored "
        "encrypted and never shown again; leave empty to keep the current one.",
    )
    clear_secret = forms.BooleanField(required=False, label="Remove the signing secret")

    class Meta:
        model = AlertWebhook
        fields = ("name", "url", "enabled")


@admin.register(AlertWebhook)
class AlertWebhookAdmin(ConfigManagedAdmin, admin.ModelAdmin):
    """Where budget alerts go: each threshold crossed (set per tenant and key, 80% and 100% by
    default) is POSTed to every enabled webhook."""

    form = AlertWebhookForm
    config_fields = {"secret": ()}
    config_hidden = {"secret": ("new_secret", "clear_secret")}
    list_display = ("name", "url", "enabled", "signed", "created_at")
    fieldsets = ((None, {"fields": ("name", "url", "enabled", "new_secret", "clear_secret")}),)

    @admin.display(description="Signed", boolean=True)
    def signed(self, obj: AlertWebhook) -> bool:
        return bool(obj.secret_encrypted)

    def save_model(self, request: HttpRequest, obj: AlertWebhook, form: forms.ModelForm, change: bool) -> None:
        if form.cleaned_data.get("new_secret"):
            obj.secret_encrypted = routing.encrypt_secret(form.cleaned_data["new_secret"])
        elif form.cleaned_data.get("clear_secret"):
            obj.secret_encrypted = ""
        super().save_model(request, obj, form, change)


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    """Each alert sent to each webhook, with its last attempt: read-only."""

    list_display = ("created_at", "alert", "webhook", "status", "attempts", "response_status", "delivered_at")
    list_filter = ("status", "webhook")
    list_select_related = ("webhook",)
    ordering = ("-created_at",)
    readonly_fields = (
        "webhook",
        "event",
        "status",
        "attempts",
        "response_status",
        "error",
        "created_at",
        "attempted_at",
        "delivered_at",
    )

    @admin.display(description="Alert")
    def alert(self, obj: AlertDelivery) -> str:
        event = obj.event or {}
        who = (event.get("api_key") or {}).get("name") or (event.get("tenant") or {}).get("name") or "?"
        if "limit" in event:  # a per-minute or concurrency limit's (limit.threshold_crossed)
            limit = str(event["limit"]).replace("_", " ")
            return f"{event.get('scope', '')} {who}: {event.get('threshold_percent')}% of the {limit} limit"
        return f"{event.get('scope', '')} {who}: {event.get('threshold_percent')}% of the {event.get('period')} budget"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


from .conversations import admin as conversations_admin  # noqa: E402,F401 - registers ConversationAdmin
