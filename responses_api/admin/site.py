"""The admin site: its name, and a front page with today's traffic and spend."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ..history import presenters
from ..history import selectors as history
from ..store.selectors import usd_text as money

# The front page shows today's traffic and spend and links the operator's daily pages (usage,
# route health, docs) above the models; the header names the gateway.
admin.site.index_template = "admin/gateway_index.html"
admin.site.site_header = "Open Responses gateway"
admin.site.site_title = "Open Responses gateway"
# No models sidebar: the lists' columns (key, tokens, cost, ...) get its 280 px, so a 1,400 px
# window shows them whole beside the filters; the front page and the breadcrumbs lead everywhere.
admin.site.enable_nav_sidebar = False
_site_index = admin.site.index


def _figures(row: dict[str, Any]) -> tuple[str, str, str]:
    """A usage bucket's requests, tokens and cost, for display."""
    return f"{row['requests']:,}", f"{row['total_tokens']:,}", money(row["cost_usd"])


def _index_with_today(request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
    today = history.today_summary()
    context = {
        **(extra_context or {}),
        "today_requests": f"{today.requests:,}",
        "today_errors": f"{today.errors:,}",
        "today_total": presenters.usage_totals([today.total]),
        "top_keys": [(r.get("key") or presenters.NO_KEY, r["tenant"], *_figures(r)) for r in today.top_keys],
        "top_models": [(r["model"], *_figures(r)) for r in today.top_models],
    }
    return _site_index(request, context)


admin.site.index = _index_with_today  # type: ignore[method-assign]  # the site's own view, with today's figures
