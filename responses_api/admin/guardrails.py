"""Guardrails: their definitions (the file's rule as for tools and prompts) and the audit of
their decisions, listed and filtered (never the matched text: it is not stored)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from ..models import Guardrail, GuardrailEvent
from ..ops.config_admin import ConfigManagedAdmin
from .common import ModelAdminOf


@admin.register(Guardrail)
class GuardrailAdmin(ConfigManagedAdmin, ModelAdminOf[Guardrail]):
    """Checks on what clients send. Every guardrail whose scope takes a request applies; none of
    tenant, key and route set: all traffic. Only `input` is served yet."""

    config_fields = {"key": ("api_key",)}
    list_display = ("name", "kind", "applies_to", "action", "tenant", "api_key", "route", "enabled", "updated_at")
    list_filter = ("kind", "action", "applies_to", "enabled", "tenant")
    search_fields = ("name", "description")
    fieldsets = (
        (None, {"fields": ("name", "description", "kind", "applies_to", "action", "config", "enabled")}),
        ("Scope", {"fields": ("tenant", "api_key", "route")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Guardrail]:
        return super().get_queryset(request).select_related("tenant", "api_key", "route")


@admin.register(GuardrailEvent)
class GuardrailEventAdmin(ModelAdminOf[GuardrailEvent]):
    """The audit: read-only, written by the gateway."""

    list_display = ("created_at", "guardrail_name", "category", "action", "where", "tenant", "api_key", "response_id")
    list_filter = ("action", "where", "category", "guardrail_name", "tenant")
    search_fields = ("response_id", "guardrail_name", "category")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "api_key")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
