"""Reusable prompts: a prompt and its versions, inline. A saved version is immutable (a create
that used it names it): a change is a new version, numbered next."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Max, QuerySet
from django.forms import BaseInlineFormSet
from django.http import HttpRequest

from ..models import Prompt, PromptVersion
from ..ops.config_admin import ConfigManagedAdmin
from .common import ModelAdminOf, TabularInlineOf


class PromptVersionInline(TabularInlineOf[PromptVersion, Prompt]):
    model = PromptVersion
    extra = 1
    fields = ("version", "instructions", "input", "model", "tools", "text_format", "reasoning", "created_at")
    readonly_fields = ("version", "created_at")
    ordering = ("-version",)

    def _file_managed(self, obj: Prompt | None) -> bool:
        return obj is not None and "versions" in (obj.config_managed or [])

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._file_managed(obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # saved versions are shown, never edited: a change is a new version

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._file_managed(obj) and super().has_delete_permission(request, obj)


@admin.register(Prompt)
class PromptAdmin(ConfigManagedAdmin, ModelAdminOf[Prompt]):
    """What clients send as `prompt: {id, version, variables}`: a tenant's, or every tenant's
    (no tenant). `{{name}}` in a version's instructions or input messages places a variable."""

    inlines = (PromptVersionInline,)
    config_fields = {"versions": ()}
    list_display = ("id", "name", "tenant", "default_version", "newest_version", "created_at")
    list_filter = ("tenant",)
    search_fields = ("id", "name", "description")
    fieldsets = ((None, {"fields": ("id", "name", "tenant", "description", "default_version")}),)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "id"] if obj is not None else fields  # clients use it: fixed once saved

    def get_queryset(self, request: HttpRequest) -> QuerySet[Prompt]:
        return super().get_queryset(request).select_related("tenant").annotate(newest=Max("versions__version"))

    @admin.display(description="Newest version")
    def newest_version(self, obj: Prompt) -> int | None:
        return getattr(obj, "newest", None)

    def save_formset(
        self, request: HttpRequest, form: Any, formset: BaseInlineFormSet[Any, Any, Any], change: bool
    ) -> None:
        # New versions are numbered after the newest saved one.
        instances = formset.save(commit=False)
        for gone in formset.deleted_objects:
            gone.delete()
        prompt = form.instance
        newest = PromptVersion.objects.filter(prompt=prompt).aggregate(n=Max("version"))["n"] or 0
        for version in instances:
            if version.pk is None:
                newest += 1
                version.version = newest
                version.save()
        formset.save_m2m()
