"""The admin side of GATEWAY_CONFIG's rule (ops/config_sync.py): the fields of an entry that
the file sets are shown read-only ("managed by GATEWAY_CONFIG"); the rest stay editable."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.html import format_html


class ConfigManagedAdmin:
    """Mixin for a ModelAdmin whose model has `config_managed` (the file's keys).

    `config_fields` maps a file key to the admin fields it sets, where they differ from the key
    (e.g. a route's `price` sets both prices); `config_hidden` names form-only fields dropped
    while the file sets their key (a provider's new API key)."""

    config_fields: dict[str, tuple[str, ...]] = {}
    config_hidden: dict[str, tuple[str, ...]] = {}

    def managed_admin_fields(self, obj: Any) -> set[str]:
        keys = (getattr(obj, "config_managed", None) or []) if obj is not None else []
        return {field for key in keys for field in self.config_fields.get(key, (key,))}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        base = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]  # a mixin: the ModelAdmin method comes with the class it is mixed into
        managed = self.managed_admin_fields(obj) - set(base)
        hidden = {f for key in getattr(obj, "config_managed", None) or [] for f in self.config_hidden.get(key, ())}
        return [*base, "config_status", *sorted(managed - hidden)]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        hidden = {f for key in getattr(obj, "config_managed", None) or [] for f in self.config_hidden.get(key, ())}
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]  # a mixin: the ModelAdmin method comes with the class it is mixed into
        shown = [
            (name, {**options, "fields": tuple(f for f in options["fields"] if f not in hidden)})
            for name, options in fieldsets
        ]
        first_name, first = shown[0]
        if "config_status" not in first["fields"]:
            shown[0] = (first_name, {**first, "fields": ("config_status", *first["fields"])})
        return shown

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        hidden = {f for key in getattr(obj, "config_managed", None) or [] for f in self.config_hidden.get(key, ())}
        form = super().get_form(request, obj, change, **kwargs)  # type: ignore[misc]  # a mixin: the ModelAdmin method comes with the class it is mixed into
        for name in hidden:
            form.base_fields.pop(name, None)
        return form

    def config_status(self, obj: Any) -> str:
        keys = getattr(obj, "config_managed", None) or []
        if not keys:
            return "not in GATEWAY_CONFIG: every field is edited here"
        return format_html(
            "managed by GATEWAY_CONFIG{}: <code>{}</code> (read-only here; edit the file); the other fields are edited here",
            f" ({obj.config_source})" if getattr(obj, "config_source", "") else "",
            ", ".join(keys),
        )

    config_status.short_description = "Config file"  # type: ignore[attr-defined]  # the admin reads a column's title from the function
