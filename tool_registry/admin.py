"""Admin for the tool registry: tools (schema validated on save, a test-call page, the chosen
executor's fields only), egress allowlist, call log."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from responses_api.ops.config_admin import ConfigManagedAdmin

from .executors import execute
from .mcp_client import McpUnavailable
from .models import EgressAllow, McpServer, Tool, ToolCallRecord
from .services import egress_policy, mcp_listing_refresh, spec_of

# ModelAdmin is generic in django-stubs only: subscripted at runtime it raises TypeError.
if TYPE_CHECKING:
    ToolModelAdmin = admin.ModelAdmin[Tool]
    McpServerModelAdmin = admin.ModelAdmin[McpServer]
    EgressAllowModelAdmin = admin.ModelAdmin[EgressAllow]
    ToolCallRecordModelAdmin = admin.ModelAdmin[ToolCallRecord]
else:
    ToolModelAdmin = McpServerModelAdmin = EgressAllowModelAdmin = ToolCallRecordModelAdmin = admin.ModelAdmin


def _python_allowlist() -> str:
    modules = sorted(settings.GATEWAY_PYTHON_TOOL_MODULES)
    if not modules:
        return format_html(
            '<span data-role="python-allowlist">No module may serve a Python tool: '
            "<code>GATEWAY_PYTHON_TOOL_MODULES</code> is empty (set it to a comma-separated list of "
            "modules in the gateway's environment).</span>"
        )
    return format_html(
        '<span data-role="python-allowlist">The function\'s module must be one of '
        "<code>GATEWAY_PYTHON_TOOL_MODULES</code>: {}.</span>",
        format_html_join(", ", "<code>{}</code>", ((m,) for m in modules)),
    )


class TestCallForm(forms.Form):
    arguments = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80, "style": "font-family: monospace"}),
        initial="{}",
        help_text="The call's arguments, as the model would send them (JSON object).",
    )

    def clean_arguments(self) -> str:
        value: str = self.cleaned_data["arguments"]  # a CharField's value
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise forms.ValidationError("The arguments must be a JSON object.")
        return value


@admin.register(Tool)
class ToolAdmin(ConfigManagedAdmin, ToolModelAdmin):
    config_fields = {"executor": ("executor", "url", "headers_env", "signing_secret_env", "python_callable")}
    list_display = (
        "name",
        "executor",
        "target",
        "enabled",
        "strict",
        "run_on_worker",
        "defer_loading",
        "timeout",
        "updated_at",
        "test_link",
    )
    list_filter = ("executor", "enabled", "run_on_worker", "defer_loading")
    search_fields = ("name", "description", "url", "python_callable")
    filter_horizontal = ("tenants", "routes")
    fieldsets = (
        (None, {"fields": ("name", "description", "parameters", "strict", "enabled", "timeout")}),
        ("Executor", {"fields": ("executor",)}),
        (
            "HTTP webhook",
            {"fields": ("url", "headers_env", "signing_secret_env"), "classes": ("gw-executor", "gw-executor-http")},
        ),
        ("Python function", {"fields": ("python_callable",), "classes": ("gw-executor", "gw-executor-python")}),
        ("Access", {"fields": ("tenants", "routes", "run_on_worker", "defer_loading")}),
    )

    class Media:
        js = ("tool_registry/executor_fields.js",)  # the chosen executor's fieldset only

    def get_fieldsets(self, request: HttpRequest, obj: Tool | None = None) -> Any:
        """The chosen executor's fields only. Where the executor cannot be changed here (the
        config file sets it) there is no choice for the script to follow: the other executor's
        section is left out. The Python section names the allowlist its module must be in."""
        fieldsets = super().get_fieldsets(request, obj)
        fixed = obj.executor if obj is not None and "executor" in self.managed_admin_fields(obj) else None
        shown = []
        for name, options in fieldsets:
            classes = options.get("classes", ())
            if fixed and "gw-executor" in classes and f"gw-executor-{fixed}" not in classes:
                continue
            if "gw-executor-python" in classes:
                options = {**options, "description": _python_allowlist()}
            shown.append((name, options))
        return shown

    @admin.display(description="target")
    def target(self, tool: Tool) -> str:
        return tool.url if tool.executor == Tool.Executor.HTTP else tool.python_callable

    @admin.display(description="")
    def test_link(self, tool: Tool) -> str:
        return format_html('<a href="{}">test call</a>', reverse("admin:tool_registry_tool_test", args=[tool.pk]))

    def get_urls(self) -> list[URLPattern]:
        extra = [
            path("<int:tool_id>/test/", self.admin_site.admin_view(self.test_call_view), name="tool_registry_tool_test")
        ]
        return extra + super().get_urls()

    def test_call_view(self, request: HttpRequest, tool_id: int) -> HttpResponse:
        tool = get_object_or_404(Tool, pk=tool_id)
        result = None
        form = TestCallForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            outcome = asyncio.run(
                execute(
                    spec_of(tool),
                    form.cleaned_data["arguments"],
                    policy=egress_policy(),
                    allowed_modules=frozenset(settings.GATEWAY_PYTHON_TOOL_MODULES),
                )
            )
            result = {"ok": outcome.ok, "output": outcome.output}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": tool,
            "title": f"Test call: {tool.name}",
            "form": form,
            "result": result,
        }
        return TemplateResponse(request, "admin/tool_registry/tool/test_call.html", context)


@admin.register(McpServer)
class McpServerAdmin(ConfigManagedAdmin, McpServerModelAdmin):
    config_fields = {"require_approval": ("approval", "approval_tools")}
    list_display = (
        "label",
        "url",
        "approval",
        "enabled",
        "defer_loading",
        "tool_count",
        "tools_fetched_at",
        "last_error",
    )
    list_filter = ("enabled", "approval", "defer_loading")
    search_fields = ("label", "url", "description")
    filter_horizontal = ("tenants", "routes")
    readonly_fields = ("listed_tools", "tools_fetched_at", "last_error")
    actions = ("refresh_tools",)
    fieldsets = (
        (None, {"fields": ("label", "description", "url", "headers_env", "enabled", "timeout")}),
        (
            "Tools",
            {
                "fields": (
                    "allowed_tools",
                    "approval",
                    "approval_tools",
                    "cache_seconds",
                    "defer_loading",
                    "listed_tools",
                    "tools_fetched_at",
                    "last_error",
                )
            },
        ),
        ("Access", {"fields": ("tenants", "routes")}),
    )

    @admin.display(description="tools")
    def tool_count(self, server: McpServer) -> int:
        return len(server.tools_cache or [])

    @admin.display(description="listed tools")
    def listed_tools(self, server: McpServer) -> str:
        if not server.tools_cache:
            return "(not listed yet: use the 'Refresh tool listing' action)"
        rows = ((t["name"], t.get("description") or "") for t in server.tools_cache)
        return format_html("<ul>{}</ul>", format_html_join("", "<li><code>{}</code>: {}</li>", rows))

    @admin.action(description="Refresh tool listing from the server")
    def refresh_tools(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            try:
                tools = mcp_listing_refresh(server)
            except McpUnavailable as exc:
                self.message_user(request, f"{server.label}: {exc.message}", messages.ERROR)
                continue
            self.message_user(request, f"{server.label}: {len(tools)} tools listed.", messages.SUCCESS)


@admin.register(EgressAllow)
class EgressAllowAdmin(EgressAllowModelAdmin):
    list_display = ("entry", "note", "created_at")
    search_fields = ("entry", "note")


@admin.register(ToolCallRecord)
class ToolCallRecordAdmin(ToolCallRecordModelAdmin):
    list_display = ("call_id", "tool_name", "response_id", "succeeded", "started_at", "finished_at")
    list_filter = ("succeeded", "tool_name")
    search_fields = ("call_id", "response_id", "tool_name")
    readonly_fields = [f.name for f in ToolCallRecord._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
