"""Budget alerts: the webhooks they go to and each delivery."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from ..models import AlertDelivery, AlertWebhook
from ..ops.config_admin import ConfigManagedAdmin
from ..orchestration import routing
from .common import ModelAdminOf, ModelFormOf


class AlertWebhookForm(ModelFormOf[AlertWebhook]):
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
class AlertWebhookAdmin(ConfigManagedAdmin, ModelAdminOf[AlertWebhook]):
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

    def save_model(
        self, request: HttpRequest, obj: AlertWebhook, form: forms.ModelForm[AlertWebhook], change: bool
    ) -> None:
        if form.cleaned_data.get("new_secret"):
            obj.secret_encrypted = routing.encrypt_secret(form.cleaned_data["new_secret"])
        elif form.cleaned_data.get("clear_secret"):
            obj.secret_encrypted = ""
        super().save_model(request, obj, form, change)


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ModelAdminOf[AlertDelivery]):
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
