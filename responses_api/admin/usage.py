"""Usage and cost: the usage page, the month's cost tables and the limits with their use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from ..history import presenters
from ..history import selectors as history
from ..models import ApiKey, Tenant
from .common import ago


def month_start() -> datetime:
    now = timezone.now().astimezone(UTC)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def day_start() -> datetime:
    now = timezone.now().astimezone(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def month_cost_table(by: str, *, tenant_id: int | None, key_id: int | None = None, today: bool = False) -> str:
    """A tenant's (or, with `key_id`, one key's) requests, tokens and cost since the month began
    (UTC), per model or per key (`by`): the figures of /v1/usage for the same period, read by the
    same selector. `today`: a footer row with today's (UTC) totals as well. The one cost table of
    the tenant and key pages."""
    if tenant_id is None:  # an object not saved yet
        return "—"
    buckets = history.usage_summary(tenant_id=tenant_id, group_by=(by,), start=month_start(), key_id=key_id)
    rows = presenters.usage_by_model(buckets) if by == "model" else presenters.usage_by_key(buckets)
    if not rows:
        return "Nothing spent this month."
    totals = []
    if today:
        spent_today = history.usage_summary(tenant_id=tenant_id, group_by=(by,), start=day_start(), key_id=key_id)
        totals.append(("Today", "today", presenters.usage_totals(spent_today)))
    totals.append(("This month", "total", presenters.usage_totals(buckets)))
    return format_html(
        '<table class="gw-use" data-role="cost-table" data-by="{}"><thead><tr><th>{}</th><th>Requests</th>'
        "<th>Tokens</th><th>Cost</th></tr></thead><tbody>{}</tbody><tfoot>{}</tfoot></table>",
        by,
        "Model" if by == "model" else "API key",
        format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((name, agg["requests"], agg["total_tokens"], agg["cost"]) for name, agg in rows),
        ),
        format_html_join(
            "",
            '<tr><th>{}</th><td>{}</td><td>{}</td><td data-role="cost-{}">{}</td></tr>',
            ((label, t["requests"], t["total_tokens"], role, t["cost"]) for label, role, t in totals),
        ),
    )


def use_table(rows: list[dict[str, Any]], window: tuple[int, int] | None = None) -> str:
    """A tenant's or key's limits with their current use (the counters every process shares).

    A per-minute limit is a token bucket that refills continuously, so a bucket's reading
    falls back to 0 seconds after a burst: its row shows what the store saw in the last
    60 s (`window`: requests, tokens) first, then the bucket."""
    if not rows:
        return "No limits."
    recent = {"requests per minute": 0, "tokens per minute": 1}

    def used(row: dict[str, Any]) -> str:
        if row.get("used") is None:
            return "not counted yet"
        text = f"{row['used']:,}"
        if row.get("used_usd") is not None:
            text += f" (${row['used_usd']:,.2f})"
        if window is not None and row["limit"] in recent:
            text = f"{window[recent[row['limit']]]:,} in the last 60 s (bucket: {text} reserved)"
        elif "renews_in_seconds" in row:
            text += f", renews in {ago(row['renews_in_seconds'])}"
        return text

    def limit(row: dict[str, Any]) -> str:
        parts = (
            [f"{row['value']:,} tokens"]
            if row.get("value") is not None and "usd" in row
            else ([f"{row['value']:,}"] if row.get("value") is not None else [])
        )
        if row.get("usd") is not None:
            parts.append(f"${row['usd']:,.2f}")
        return " or ".join(parts)

    return format_html(
        '<table data-role="use-table"><tr><th>limit</th><th>value</th><th>in use</th></tr>{}</table>',
        format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", ((r["limit"], limit(r), used(r)) for r in rows)
        ),
    )


def limits_text(owner: Tenant | ApiKey) -> str:
    """A tenant's or key's limits in one line ("60 rpm · 10,000 tpm · 4 concurrent · $5.00 a month")."""
    parts = []
    if owner.requests_per_minute:
        parts.append(f"{owner.requests_per_minute:,} rpm")
    if owner.tokens_per_minute:
        parts.append(f"{owner.tokens_per_minute:,} tpm")
    if owner.max_concurrent_requests:
        parts.append(f"{owner.max_concurrent_requests:,} concurrent")
    period = "a day" if owner.budget_period == "day" else "a month"
    if owner.budget_tokens is not None:
        parts.append(f"{owner.budget_tokens:,} tokens {period}")
    if owner.budget_usd is not None:
        parts.append(f"${owner.budget_usd:,.2f} {period}")
    return " · ".join(parts) or "none"


def usage_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """The usage page (the response list's `usage/`): tokens or cost a day and model, and the
    totals per model and key, for the last `days` and one tenant or all."""
    if not model_admin.has_view_permission(request):
        raise Http404
    try:
        days = max(1, min(int(request.GET.get("days", 30)), 366))
    except ValueError:
        days = 30
    tenant_id: int | None
    try:
        tenant_id = int(request.GET["tenant"]) if request.GET.get("tenant") else None
    except ValueError:
        tenant_id = None
    today = timezone.now().astimezone(UTC).date()
    start_day = today - timedelta(days=days - 1)
    start = datetime(start_day.year, start_day.month, start_day.day, tzinfo=UTC)
    metric = "cost_usd" if request.GET.get("metric") == "cost" else "total_tokens"
    rows = history.usage_summary(tenant_id=tenant_id, group_by=("day", "model"), start=start)
    by_key = history.usage_summary(tenant_id=tenant_id, group_by=("key",), start=start)
    # The same figures from the API as CSV (a staff session may read it), per tenant.
    query = {"start": int(start.timestamp()), "format": "csv"}
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": "Usage and cost",
        "subtitle": None,
        "chart": presenters.usage_chart(rows, start_day, today, metric=metric),
        "metric": "cost" if metric == "cost_usd" else "tokens",
        "days": days,
        "day_choices": (7, 30, 90),
        "tenants": history.tenant_names(),
        "tenant_id": tenant_id,
        "by_model": presenters.usage_by_model(rows),
        "by_key": presenters.usage_by_key(by_key),
        "totals_display": presenters.usage_totals(rows),
        "period_start": start,
        "csv_by_day_url": "/v1/usage?" + urlencode({**query, "group_by": "day,model,tenant"}),
        "csv_by_key_url": "/v1/usage?" + urlencode({**query, "group_by": "key,model,tenant"}),
        "changelist_url": reverse("admin:responses_api_response_changelist"),
    }
    return TemplateResponse(request, "admin/responses_api/response/usage.html", context)
