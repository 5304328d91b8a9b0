"""The history API: DRF views in the style of responses_api.api.views (thin: parse, select, render).

`GET /v1/responses` is answered here for `responses_api.api.views.ResponsesView`.
An admin key reads every tenant; any other key only its own.
"""

from __future__ import annotations

from rest_framework.response import Response

from ..api.auth import Principal
from ..api.drf import ApiRequest, ApiView
from ..orchestration.limits import current_use
from ..protocol.errors import InvalidRequest
from ..store import db
from . import selectors
from .params import RESPONSE_LIST_PARAMS, THREAD_PARAMS, USAGE_PARAMS, parse_query


def _scope(principal: Principal) -> int | None:
    """The tenant a principal reads (None: every tenant, for admin keys)."""
    return None if principal.is_admin else principal.tenant_id


async def list_responses(request: ApiRequest, principal: Principal) -> Response:
    """List stored responses, newest first, with filters and cursor paging."""
    args = parse_query(request.query_params, RESPONSE_LIST_PARAMS)
    filters = selectors.ResponseFilters(
        model=args["model"],
        status=args["status"] or (),
        created_after=args["created_after"],
        created_before=args["created_before"],
        metadata=args["metadata"],
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
    async def get(self, request: ApiRequest, response_id: str) -> Response:
        """Every item of the chain ending at this response, in conversation order."""
        args = parse_query(request.query_params, THREAD_PARAMS)
        page = await db.run(
            selectors.thread_page,
            tenant_id=_scope(self.principal),
            response_id=response_id,
            after=args["after"],
            limit=args["limit"],
            order=args["order"],
        )
        return Response(page.as_dict())


class UsageView(ApiView):
    async def get(self, request: ApiRequest) -> Response:
        """Token and request totals of the caller's tenant (every tenant for admin keys)."""
        principal = self.principal
        args = parse_query(request.query_params, USAGE_PARAMS)
        group_by = args["group_by"]
        if "tenant" in group_by and not principal.is_admin:
            raise InvalidRequest(
                "Grouping by 'tenant' needs an admin key.", param="group_by", code="admin_key_required"
            )
        data = await db.run(
            selectors.usage_summary,
            tenant_id=_scope(principal),
            group_by=group_by,
            start=args["start"],
            end=args["end"],
            model=args["model"],
        )
        return Response(
            {
                "object": "list",
                "group_by": list(group_by),
                "start": int(args["start"].timestamp()) if args["start"] else None,
                "end": int(args["end"].timestamp()) if args["end"] else None,
                "data": data,
                # Each rate limit and budget of this key and its tenant, with its use now.
                "limits": await db.run(current_use, principal.quotas, principal.budget),
            }
        )
