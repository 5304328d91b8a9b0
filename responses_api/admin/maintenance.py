"""Maintenance: hiding and purging stored responses, and when retention last ran."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ..models import MaintenanceRun, Response
from ..store import services
from .common import ModelAdminOf


def retention_last_run_text() -> str:
    """When the retention job last ran (for every tenant), and what it deleted."""
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


class ResponseMaintenance(ModelAdminOf[Response]):
    """The response list's actions: a soft delete (staff with the delete permission) and a
    purge (superusers); hard delete itself is never offered."""

    actions = ("soft_delete", "purge")

    def has_hide_permission(self, request: HttpRequest) -> bool:
        """Soft delete needs the model's delete permission (hard delete itself is never offered)."""
        return request.user.has_perm("responses_api.delete_response")

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
