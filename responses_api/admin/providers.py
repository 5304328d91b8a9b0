"""Providers and routes: credentials, the connection check, targets and their health."""

from __future__ import annotations

import time
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from ..engine.failover import target_health
from ..models import PRICE_FIELDS, ModelRoute, Provider, RouteTarget, validate_base_url
from ..ops.config_admin import ConfigManagedAdmin
from ..orchestration import routing
from ..protocol.errors import GatewayError
from ..upstreams import probe
from .common import ModelAdminOf, ModelFormOf, PageChangeList, TabularInlineOf, ago


class BaseUrlField(forms.CharField):
    """An upstream's base URL: http(s) with a host, one-label hosts such as a compose service
    name included (`models.validate_base_url`; Django's URLField refuses them); without a
    scheme it is taken as http."""

    def to_python(self, value: Any) -> str:
        value = super().to_python(value)
        return f"http://{value}" if value and "://" not in value else value


class ProviderForm(ModelFormOf[Provider]):
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
class ProviderAdmin(ConfigManagedAdmin, ModelAdminOf[Provider]):
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

    def save_model(self, request: HttpRequest, obj: Provider, form: forms.ModelForm[Provider], change: bool) -> None:
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
    """Ask the provider for its model list (upstreams/probe.py): (message level, message)."""
    try:
        config = routing.provider_config(provider)
    except GatewayError as exc:  # a missing env var, a key sealed under a dropped encryption key
        return messages.ERROR, f"{provider.name}: {exc}"
    found = probe.list_models(config, timeout=timeout)
    if not found.status:
        return messages.ERROR, f"{provider.name}: cannot reach {found.url}: {found.error}"
    if found.status != 200:
        return messages.ERROR, (
            f"{provider.name}: {found.url} answered HTTP {found.status} in {found.elapsed_ms:.0f} ms: {found.error}"
        )
    names = found.models
    if names is None:
        return messages.WARNING, f"{provider.name}: {found.url} answered 200 but not a model list."
    shown = ", ".join(names[:30]) + (f" … (+{len(names) - 30} more)" if len(names) > 30 else "")
    return messages.SUCCESS, f"{provider.name}: OK in {found.elapsed_ms:.0f} ms, {len(names)} model(s): {shown}"


class RouteTargetInline(TabularInlineOf[RouteTarget, ModelRoute]):
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
            format_html("<br>last error {} ago: {}", ago(now - health.last_error_at), health.last_error)
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
class ModelRouteAdmin(ConfigManagedAdmin, ModelAdminOf[ModelRoute]):
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
        return PageChangeList

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
