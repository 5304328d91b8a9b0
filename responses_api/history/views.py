"""The history API: DRF views in the style of responses_api.api.views (thin: parse, select, render).

`GET /v1/responses` is answered here for `responses_api.api.views.ResponsesView`.
An admin key reads every tenant; any other key only its own. Without a key, a logged-in
staff user's admin session may GET them (drf_policies.KeyOrStaffSessionAuthentication):
every tenant, read-only, as DRF's browsable API in a browser.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

from ..api.drf import ApiRequest, ApiView
from ..api.drf_policies import KeyOrStaffSessionAuthentication
from ..api.openapi import ref
from ..api.queries import ResponseListQuery, ThreadQuery, UsageQuery
from ..domain import Principal
from ..orchestration.limits import current_use
from ..protocol.errors import InvalidRequest
from ..store import db
from . import selectors


def _scope(principal: Principal) -> int | None:
    """The tenant a principal reads (None: every tenant, for admin keys)."""
    return None if principal.is_admin else principal.tenant_id


list_responses_schema = extend_schema(
    operation_id="listResponses",
    tags=["History"],
    summary="List stored responses",
    description="Newest first, with filters; cursor paging with `after` = the last page's `last_id`. "
    "An admin key lists every tenant's responses. Deleted and `store: false` responses are never listed.",
    parameters=ResponseListQuery.openapi_parameters(),
    responses={200: ref("ResponseList")},
)


async def list_responses(request: ApiRequest, principal: Principal) -> Response:
    """List stored responses, newest first, with filters and cursor paging."""
    args = ResponseListQuery.parse(request.query_params)
    filters = selectors.ResponseFilters(
        model=args["model"],
        status=args["status"],
        created_after=args["created_after"],
        created_before=args["created_before"],
        metadata=tuple(args["metadata"].items()),
        previous_response_id=args["previous_response_id"],
        root=args["root"],
        q=args["q"],
    )
    page = await db.run(
        selectors.response_list_page,
        tenant_id=_scope(principal),
        filters=filters,
        after=args["after"],
        limit=args["limit"],
        order=args["order"],
    )
    return Response(page.as_dict())


class ResponseThreadView(ApiView):
    """The conversation up to a response: every item of its chain, oldest first."""

    authentication_classes = (KeyOrStaffSessionAuthentication,)

    @extend_schema(
        operation_id="getResponseThread",
        tags=["History"],
        summary="The conversation up to a response",
        description="Every item of the `previous_response_id` chain ending at this response: for each "
        "response, oldest first, its input items then its output items, each with the id of "
        "the response it belongs to. Cursor paging with `after`.",
        parameters=ThreadQuery.openapi_parameters(),
        responses={200: ref("ThreadList")},
    )
    async def get(self, request: ApiRequest, response_id: str) -> Response:
        args = ThreadQuery.parse(request.query_params)
        page = await db.run(
            selectors.thread_page,
            tenant_id=_scope(self.principal),
            response_id=response_id,
            after=args["after"],
            limit=args["limit"],
            order=args["order"],
        )
        return Response(page.as_dict())


# The CSV export's columns: the grouping's, then the figures, in this order.
CSV_DIMENSIONS = {
    "day": ("day",),
    "model": ("model",),
    "tenant": ("tenant",),
    "key": ("key_id", "key"),
    "prompt": ("prompt", "prompt_version"),
    "kind": ("kind",),
}


def usage_csv(data: list[dict[str, Any]], group_by: tuple[str, ...]) -> HttpResponse:
    """The buckets as a CSV file, one row each (a spreadsheet's import)."""
    columns = [
        c for dim in ("day", "model", "tenant", "key", "prompt", "kind") if dim in group_by for c in CSV_DIMENSIONS[dim]
    ]
    columns += [*selectors.USAGE_FIELDS, "cost_usd"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for bucket in data:
        writer.writerow(["" if bucket.get(c) is None else bucket[c] for c in columns])
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response


class UsageView(ApiView):
    """Requests, tokens and cost, grouped, with the caller's limits and their use."""

    authentication_classes = (KeyOrStaffSessionAuthentication,)

    @extend_schema(
        operation_id="getUsage",
        tags=["History"],
        summary="Token usage and cost summary",
        description="Requests, tokens and cost of the caller's tenant (every tenant for admin keys), grouped by "
        "model, UTC day, tenant and/or API key, with their total and each rate limit and budget of the key "
        "and its tenant. Cost is the model routes' current prices times the usage, cache reads and writes "
        "included. Deleted responses count: their tokens were spent. `format=csv`: the buckets as CSV.",
        parameters=UsageQuery.openapi_parameters(),
        responses={
            (200, "application/json"): ref("UsageList"),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="With `format=csv`."),
            403: OpenApiResponse(ref("GatewayError"), description="Grouping by tenant needs an admin key."),
        },
    )
    async def get(self, request: ApiRequest) -> Response | HttpResponse:
        principal = self.principal
        args = UsageQuery.parse(request.query_params)
        group_by = args["group_by"]
        if "tenant" in group_by and not principal.is_admin:
            raise InvalidRequest(
                "Grouping by 'tenant' needs an admin key.", param="group_by", code="admin_key_required", status=403
            )
        data = await db.run(
            selectors.usage_summary,
            tenant_id=_scope(principal),
            group_by=group_by,
            start=args["start"],
            end=args["end"],
            model=args["model"],
        )
        if args["format"] == "csv":
            return usage_csv(data, group_by)
        return Response(
            {
                "object": "list",
                "group_by": list(group_by),
                "start": int(args["start"].timestamp()) if args["start"] else None,
                "end": int(args["end"].timestamp()) if args["end"] else None,
                "data": data,
                "total": selectors.usage_total(data),
                # Each rate limit and budget of this key and its tenant, with its use now.
                "limits": await db.run(current_use, principal.quotas, principal.budgets),
            }
        )
