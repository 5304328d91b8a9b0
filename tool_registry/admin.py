"""Admin for the tool registry: tools (schema validated on save, a test-call page), egress allowlist, call log."""
from __future__ import annotations

import asyncio
import json

from django import forms
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from .executors import execute
from .models import EgressAllow, Tool, ToolCallRecord
from .services import egress_policy, spec_of


class TestCallForm(forms.Form):
    arguments = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80, "style": "font-family: monospace"}),
        initial="{}", help_text="The call's arguments, as the model would send them (JSON object).",
    )

    def clean_arguments(self) -> str:
        value = self.cleaned_data["arguments"]
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise forms.ValidationError("The arguments must be a JSON object.")
        return value


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = ("name", "executor", "target", "enabled", "strict", "run_on_worker", "timeout", "updated_at", "test_link")
    list_filter = ("executor", "enabled", "run_on_worker")
    search_fields = ("name", "description", "url", "python_callable")
    filter_horizontal = ("tenants", "routes")
    fieldsets = (
        (None, {"fields": ("name", "description", "parameters", "strict", "enabled", "timeout")}),
        ("Executor", {"fields": ("executor", "url", "headers_env", "signing_secret_env", "python_callable")}),
        ("Access", {"fields": ("tenants", "routes", "run_on_worker")}),
    )

    @admin.display(description="target")
    def target(self, tool: Tool) -> str:
        return tool.url if tool.executor == Tool.Executor.HTTP else tool.python_callable

    @admin.display(description="")
    def test_link(self, tool: Tool) -> str:
        return format_html('<a href="{}">test call</a>', reverse("admin:tool_registry_tool_test", args=[tool.pk]))

    def get_urls(self):  # type: ignore[no-untyped-def]
        extra = [path("<int:tool_id>/test/", self.admin_site.admin_view(self.test_call_view), name="tool_registry_tool_test")]
        return extra + super().get_urls()

    def test_call_view(self, request: HttpRequest, tool_id: int) -> HttpResponse:
        tool = get_object_or_404(Tool, pk=tool_id)
        result = None
        form = TestCallForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            outcome = asyncio.run(
                execute(spec_of(tool), form.cleaned_data["arguments"], policy=egress_policy(),
                        allowed_modules=frozenset(settings.GATEWAY_PYTHON_TOOL_MODULES))
            )
            result = {"ok": outcome.ok, "output": outcome.output}
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "original": tool,
            "title": f"Test call: {tool.name}", "form": form, "result": result,
        }
        return TemplateResponse(request, "admin/tool_registry/tool/test_call.html", context)


@admin.register(EgressAllow)
class EgressAllowAdmin(admin.ModelAdmin):
    list_display = ("entry", "note", "created_at")
    search_fields = ("entry", "note")


@admin.register(ToolCallRecord)
class ToolCallRecordAdmin(admin.ModelAdmin):
    list_display = ("call_id", "tool_name", "response_id", "succeeded", "started_at", "finished_at")
    list_filter = ("succeeded", "tool_name")
    search_fields = ("call_id", "response_id", "tool_name")
    readonly_fields = [f.name for f in ToolCallRecord._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
