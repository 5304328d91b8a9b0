"""Uploaded files in the admin: the list (tenant, purpose, size, created, expires) and deletion,
which removes the bytes with the row (store/files.py's post_delete receiver). Read-only
otherwise: files come in through /v1/files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.http import HttpRequest
from django.template.defaultfilters import filesizeformat

from ..models import StoredFile

# ModelAdmin is generic in django-stubs only: subscripted at runtime it raises TypeError.
if TYPE_CHECKING:
    StoredFileModelAdmin = admin.ModelAdmin[StoredFile]
else:
    StoredFileModelAdmin = admin.ModelAdmin


@admin.register(StoredFile)
class StoredFileAdmin(StoredFileModelAdmin):
    list_display = ("filename", "id", "tenant", "purpose", "size", "content_type", "created_at", "expires_at")
    list_filter = ("tenant", "purpose", ("created_at", admin.DateFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("id", "filename")
    search_help_text = "Search by file id or file name."
    ordering = ("-created_at",)
    fields = (
        "id",
        "tenant",
        "api_key",
        "filename",
        "purpose",
        "content_type",
        "bytes",
        "sha256",
        "storage_name",
        "created_at",
        "expires_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: StoredFile | None = None) -> bool:
        return False

    @admin.display(description="Size", ordering="bytes")
    def size(self, obj: StoredFile) -> str:
        return str(filesizeformat(obj.bytes))
