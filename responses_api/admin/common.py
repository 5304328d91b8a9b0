"""What the admin's pages share: status badges, times, change links, page annotation."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

T = TypeVar("T")


class _Subscripted(Generic[T]):
    """`ModelAdminOf[Tenant]` is `admin.ModelAdmin` at run time: the stubs make these classes
    generic, Django does not (django_stubs_ext would patch them, but it is a development
    dependency only)."""

    def __init__(self, cls: T) -> None:
        self._cls = cls

    def __getitem__(self, _model: object) -> T:
        return self._cls


if TYPE_CHECKING:
    ModelAdminOf = admin.ModelAdmin
    ModelFormOf = forms.ModelForm
    TabularInlineOf = admin.TabularInline
else:
    ModelAdminOf = _Subscripted(admin.ModelAdmin)
    ModelFormOf = _Subscripted(forms.ModelForm)
    TabularInlineOf = _Subscripted(admin.TabularInline)

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


def when(moment: datetime | None) -> str:
    """A time in a list column: short, on one line, the full ISO time in its title."""
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    return format_html(
        '<span title="{}" style="white-space: nowrap">{}</span>', local.isoformat(), local.strftime("%b %-d, %H:%M")
    )


def change_url(obj: Any) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])


def ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


class PageChangeList(ChangeList):
    """A changelist whose page of rows its admin annotates in a constant number of look-ups
    (`annotate_page`), after the rows are fetched and before they are shown."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.model_admin.annotate_page(list(self.result_list))  # type: ignore[attr-defined]  # annotate_page is declared by this app's admins that use this changelist
