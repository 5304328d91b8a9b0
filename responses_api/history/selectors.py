"""Reads for the history API and the admin: response lists, threads, usage. Plain sync ORM.

Every function here costs a constant number of queries whatever the page,
chain or table size: lists fetch the output items of a whole page in one
query, and chains are walked by recursive CTEs in the database.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, TruncDate
from django.db.models.lookups import Exact
from django.utils import timezone

from ..domain import Price, TokenCounts
from ..models import Item, Response, ResponseItem, Tenant, UsageRecord
from ..protocol.errors import InvalidRequest, NotFound
from ..store.selectors import (
    FREE,
    ListPage,
    _loads,
    chain_step_sql,
    response_object_from_row,
    responses_visible,
    usage_counts,
    usage_sums,
    usd,
)
from ..store.selectors import route_prices as route_prices  # re-exported: the admin prices rows through history

# A usage bucket's identity: (day, model, tenant, key_id), any of them None when not grouped by.
BucketKey = tuple[Any, ...]

# The Postgres text-search document of an item: every "text" string at any
# depth (message parts, reasoning summaries), as a 'simple' (language-neutral,
# unstemmed) tsvector. Migration 0002 indexes exactly this expression (GIN);
# keep both in sync, or the search falls back to a sequential scan.
ITEM_SEARCH_VECTOR_SQL = (
    "jsonb_to_tsvector('simple'::regconfig, jsonb_path_query_array(data, 'strict $.**.text'::jsonpath), "
    "'[\"string\"]'::jsonb)"
)

# Fields a Response object is built from; `job` (the full validated request of
# worker-run responses) and the bookkeeping columns are never loaded for lists.
RESPONSE_OBJECT_FIELDS = (
    "id",
    "tenant_id",
    "previous_response_id",
    "status",
    "model",
    "params",
    "error",
    "incomplete_details",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "created_at",
    "completed_at",
)

ROLE_NAMES = {ResponseItem.Role.INPUT: "input", ResponseItem.Role.OUTPUT: "output"}


def _table(model: Any) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# --------------------------------------------------------------------------- lists


@dataclass(frozen=True, slots=True)
class ResponseFilters:
    model: str | None = None
    status: tuple[str, ...] = ()
    created_after: datetime | None = None  # created_at >= created_after
    created_before: datetime | None = None  # created_at < created_before
    metadata: tuple[tuple[str, str], ...] = ()
    previous_response_id: str | None = None
    root: str | None = None
    q: str | None = None


def _descendants_sql() -> str:
    """The ids of a response and of every response chained after it, at any depth."""
    response = _table(Response)
    return f"""
        WITH RECURSIVE down(id) AS (
            SELECT id FROM {response} WHERE id = %s
            UNION ALL
            SELECT r.id FROM {response} r JOIN down ON r.previous_response_id = down.id
        )
        SELECT id FROM down
    """


# Below this many matching responses, `q` is answered from the GIN index first
# (the matching ids, then the page among them); above it matches are dense and
# the newest-first scan meets 20 of them quickly. Either way the cost is bounded.
SEARCH_PROBE_LIMIT = 1000


def search_hits(*, tenant_id: int | None, q: str) -> list[str] | None:
    """PostgreSQL: the ids of responses with an item matching `q` when there are at most
    SEARCH_PROBE_LIMIT of them, else None (too many to list). One query, on the GIN index."""
    tenant = "i.tenant_id = %s AND " if tenant_id is not None else ""
    sql = (
        f"SELECT DISTINCT ri.response_id FROM {_table(Item)} i "
        f"JOIN {_table(ResponseItem)} ri ON ri.item_id = i.id "
        f"WHERE {tenant}{ITEM_SEARCH_VECTOR_SQL} @@ websearch_to_tsquery('simple'::regconfig, %s) "
        f"LIMIT {SEARCH_PROBE_LIMIT + 1}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant_id, q] if tenant_id is not None else [q])
        ids = [row[0] for row in cursor.fetchall()]
    return ids if len(ids) <= SEARCH_PROBE_LIMIT else None


def _text_match(q: str) -> Exists:
    """Responses having an input or output item whose text matches `q`."""
    items = ResponseItem.objects.filter(response_id=OuterRef("pk"))
    if connection.vendor == "postgresql":
        matching = RawSQL(
            f"SELECT id FROM {_table(Item)} WHERE {ITEM_SEARCH_VECTOR_SQL} "
            "@@ websearch_to_tsquery('simple'::regconfig, %s)",
            [q],
        )
        return Exists(items.filter(item_id__in=matching))
    # SQLite (embedded): a substring match over the stored item JSON.
    return Exists(items.filter(item__data__icontains=q))


def response_filter(
    qs: QuerySet[Response], filters: ResponseFilters, *, search_ids: list[str] | None = None
) -> QuerySet[Response]:
    """Apply the filters; `search_ids` (from `search_hits`) answers `q` when given."""
    if filters.model is not None:
        qs = qs.filter(model=filters.model)
    if filters.status:
        qs = qs.filter(status__in=filters.status)
    if filters.created_after is not None:
        qs = qs.filter(created_at__gte=filters.created_after)
    if filters.created_before is not None:
        qs = qs.filter(created_at__lt=filters.created_before)
    if filters.metadata:
        if connection.vendor == "postgresql":
            # jsonb containment: served by the GIN (jsonb_path_ops) index on metadata.
            qs = qs.filter(metadata__contains=dict(filters.metadata))
        else:
            for key, value in filters.metadata:
                # KeyTextTransform takes the key literally (no "__" path splitting).
                qs = qs.filter(Exact(KeyTextTransform(key, "metadata"), value))
    if filters.previous_response_id is not None:
        qs = qs.filter(previous_response_id=filters.previous_response_id)
    if filters.root is not None:
        qs = qs.filter(id__in=RawSQL(_descendants_sql(), [filters.root]))
    if filters.q:
        qs = qs.filter(id__in=search_ids) if search_ids is not None else qs.filter(_text_match(filters.q))
    return qs


def _page_after(qs: QuerySet[Response], anchor: tuple[datetime, str], descending: bool) -> QuerySet[Response]:
    created, rid = anchor
    if descending:  # older than the anchor, ties broken by id
        return qs.filter(created_at__lte=created).exclude(created_at=created, id__gte=rid)
    return qs.filter(created_at__gte=created).exclude(created_at=created, id__lte=rid)


def output_items_by_response(response_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """The output items of many responses, in order: one query."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = (
        ResponseItem.objects.filter(response_id__in=list(response_ids), role=ResponseItem.Role.OUTPUT)
        .order_by("response_id", "position")
        .values_list("response_id", "item__data")
    )
    for response_id, data in rows:
        grouped[response_id].append(_loads(data))
    return grouped


def response_list_page(
    *,
    tenant_id: int | None,
    filters: ResponseFilters,
    after: str | None,
    limit: int,
    order: str,
) -> ListPage:
    """A page of full Response objects, newest first by default.

    Queries: the `after` anchor (only when given), the `q` probe (only with
    `q`, on PostgreSQL), the page rows, and the output items of the whole page."""
    descending = order == "desc"
    visible = responses_visible(tenant_id=tenant_id)
    search_ids = None
    if filters.q and connection.vendor == "postgresql":
        search_ids = search_hits(tenant_id=tenant_id, q=filters.q)
    qs = response_filter(visible, filters, search_ids=search_ids)
    if after is not None:
        anchor = visible.filter(id=after).values_list("created_at", "id").first()
        if anchor is None:
            raise InvalidRequest(f"'after': no response found with id '{after}'.", param="after")
        qs = _page_after(qs, anchor, descending)
    ordering = ("-created_at", "-id") if descending else ("created_at", "id")
    rows = list(qs.only(*RESPONSE_OBJECT_FIELDS).order_by(*ordering)[: limit + 1])
    rows, has_more = rows[:limit], len(rows) > limit
    outputs = output_items_by_response(r.id for r in rows) if rows else {}
    return ListPage([response_object_from_row(r, outputs.get(r.id, [])) for r in rows], has_more)


# --------------------------------------------------------------------------- threads


@dataclass(frozen=True, slots=True)
class ThreadCursor:
    """Where an entry sits in a thread; its string form is the entry's `id`."""

    response_id: str
    role: int
    position: int

    def __str__(self) -> str:
        return f"{self.response_id}:{ROLE_NAMES[self.role]}:{self.position}"  # type: ignore[index]  # role is a small-integer column, typed by the stubs as the field

    @classmethod
    def parse(cls, raw: str) -> ThreadCursor:
        try:
            response_id, role, position = raw.rsplit(":", 2)
            role_value = {"input": 0, "output": 1}[role]
            pos = int(position)
        except (ValueError, KeyError):
            raise InvalidRequest(
                f"'{raw}' is not a thread entry id (expected '<response id>:input|output:<n>').",
                param="after",
            ) from None
        if pos < 0 or not response_id:
            raise InvalidRequest(f"'{raw}' is not a thread entry id.", param="after")
        return cls(response_id, role_value, pos)


def _thread_sql(*, with_anchor: bool, descending: bool, limited: bool) -> str:
    response, response_item, item = _table(Response), _table(ResponseItem), _table(Item)
    # Oldest response first (highest depth), then its input, then its output.
    comparison = "<" if descending else ">"
    direction = "DESC" if descending else "ASC"
    anchor_filter = (
        f"WHERE seq {comparison} (SELECT seq FROM entries WHERE response_id = %s AND role = %s AND position = %s)"
        if with_anchor
        else ""
    )
    anchor_row = (
        "SELECT 'anchor' AS kind, NULL AS response_id, NULL AS role, NULL AS position, NULL AS data, seq "
        "FROM entries WHERE response_id = %s AND role = %s AND position = %s UNION ALL "
        if with_anchor
        else ""
    )
    limit = "LIMIT %s" if limited else ""
    step = chain_step_sql(response)
    return f"""
        WITH RECURSIVE chain(id, prev, depth) AS (
            SELECT id, previous_response_id, 0 FROM {response} WHERE id = %s
            UNION ALL
            {step}
        ),
        entries AS (
            SELECT chain.id AS response_id, ri.role AS role, ri.position AS position, i.data AS data,
                   ROW_NUMBER() OVER (ORDER BY chain.depth DESC, ri.role, ri.position) AS seq
            FROM chain
            JOIN {response_item} ri ON ri.response_id = chain.id
            JOIN {item} i ON i.id = ri.item_id
        )
        {anchor_row}
        SELECT * FROM (
            SELECT 'entry' AS kind, response_id, role, position, data, seq FROM entries
            {anchor_filter}
            ORDER BY seq {direction}
            {limit}
        ) page
    """


@dataclass(frozen=True, slots=True)
class ThreadEntry:
    response_id: str
    role: int
    position: int
    item: dict[str, Any]

    @property
    def role_name(self) -> str:
        return ROLE_NAMES[self.role]  # type: ignore[index]  # role is a small-integer column, typed by the stubs as the field

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": str(ThreadCursor(self.response_id, self.role, self.position)),
            "object": "response.thread_item",
            "response_id": self.response_id,
            "role": self.role_name,
            "item": self.item,
        }


def _thread_rows(
    response_id: str, *, after: ThreadCursor | None, limit: int | None, descending: bool
) -> tuple[list[ThreadEntry], bool]:
    """(entries, anchor found) for the chain ending at `response_id`: one query."""
    sql = _thread_sql(with_anchor=after is not None, descending=descending, limited=limit is not None)
    params: list[Any] = [response_id]
    if after is not None:
        anchor = [after.response_id, after.role, after.position]
        params += anchor + anchor
    if limit is not None:
        params.append(limit)
    rows: list[tuple[int, ThreadEntry]] = []
    anchor_found = after is None
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for kind, rid, role, position, data, seq in cursor.fetchall():
            if kind == "anchor":
                anchor_found = True
            else:
                rows.append((seq, ThreadEntry(rid, int(role), int(position), _loads(data))))
    # UNION ALL promises no order: put the page back in thread order.
    rows.sort(key=lambda row: row[0], reverse=descending)
    return [entry for _, entry in rows], anchor_found


def thread_page(*, tenant_id: int | None, response_id: str, after: str | None, limit: int, order: str) -> ListPage:
    """A page of the items of the whole chain ending at `response_id`, oldest first by default.

    Two queries: the visibility check of the head, and the page (recursive CTE)."""
    if not responses_visible(tenant_id=tenant_id).filter(id=response_id).exists():
        raise NotFound(f"No response found with id '{response_id}'.", param="response_id")
    cursor = ThreadCursor.parse(after) if after is not None else None
    entries, anchor_found = _thread_rows(response_id, after=cursor, limit=limit + 1, descending=order == "desc")
    if not anchor_found:
        raise InvalidRequest(f"'after': no entry '{after}' in this thread.", param="after")
    return ListPage([e.as_dict() for e in entries[:limit]], len(entries) > limit)


def thread_entries(*, response_id: str) -> list[ThreadEntry]:
    """Every entry of the chain ending at `response_id`, oldest first (the admin's conversation view)."""
    return _thread_rows(response_id, after=None, limit=None, descending=False)[0]


def chain_responses(*, response_id: str) -> list[Response]:
    """The responses of the chain ending at `response_id`, oldest first, with their tenant: one query."""
    response = _table(Response)
    step = chain_step_sql(response)
    sql = f"""
        WITH RECURSIVE chain(id, prev, depth) AS (
            SELECT id, previous_response_id, 0 FROM {response} WHERE id = %s
            UNION ALL
            {step}
        )
        SELECT id FROM chain
    """
    rows = Response.objects.filter(id__in=RawSQL(sql, [response_id])).defer("job").order_by("created_at", "id")
    return list(rows)


def response_items(*, response_id: str) -> list[ThreadEntry]:
    """A response's own items: input then output, each in order. One query."""
    rows = (
        ResponseItem.objects.filter(response_id=response_id)
        .order_by("role", "position")
        .values_list("role", "position", "item__data")
    )
    return [ThreadEntry(response_id, role, position, _loads(data)) for role, position, data in rows]


def response_next_ids(*, response_id: str) -> list[str]:
    """Responses chained directly after this one (a chain may branch)."""
    return list(
        Response.objects.filter(previous_response_id=response_id)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )


# --------------------------------------------------------------------------- usage

USAGE_DIMENSIONS = ("model", "day", "tenant", "key")
# What a usage bucket adds up; `cost_usd` is priced from them.
USAGE_FIELDS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
)


# What tells one bucket from another (those of the dimensions not asked for are absent: None).
_BUCKET_KEYS = ("day", "model", "tenant", "key_id", "prompt", "prompt_version", "kind")
# group_by=kind: a stored response's kind; a usage record's is its endpoint (UsageRecord.Endpoint).
RESPONSES_KIND = "responses"


def usage_summary(
    *,
    tenant_id: int | None,
    group_by: tuple[str, ...],
    start: datetime | None = None,
    end: datetime | None = None,
    model: str | None = None,
    key_id: int | None = None,
    key_ids: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Requests, tokens and cost grouped by any of model, day (UTC), tenant, API key and reusable
    prompt (its id and version; calls not stored, UsageRecord rows, are counted as no prompt's): one
    query for responses, one for passed-through and unstored calls (UsageRecord), one for the
    price table.

    Counts every response that reached the database, deleted ones included: their tokens were
    spent. Cost is priced per model (`Price.cost`, the function budgets settle with) at the
    routes' current prices, then added up into the buckets asked for."""
    prices = route_prices()
    merged: dict[BucketKey, dict[str, Any]] = {}
    for source in (Response.objects.all(), UsageRecord.objects.all()):
        for bucket, cost in _usage_buckets(
            source,
            tenant_id=tenant_id,
            group_by=group_by,
            start=start,
            end=end,
            model=model,
            key_ids=[key_id] if key_id is not None else key_ids,
            prices=prices,
        ):
            key = tuple(bucket.get(k) for k in _BUCKET_KEYS)
            if key in merged:
                entry = merged[key]
                for field in USAGE_FIELDS:
                    entry[field] += bucket[field]
                entry["_micro_usd"] += cost
            else:
                merged[key] = {**bucket, "_micro_usd": cost}
    data = []
    for key in sorted(merged, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        entry = merged[key]
        entry["cost_usd"] = usd(entry.pop("_micro_usd"))
        data.append(entry)
    return data


def row_cost_usd(row: Response | UsageRecord, prices: dict[str, Price]) -> float | None:
    """One stored call's cost (None before its usage is known), as /v1/usage prices it."""
    if row.input_tokens is None:
        return None
    counts = TokenCounts(
        row.input_tokens,
        row.output_tokens or 0,
        row.cached_tokens or 0,
        row.cache_write_tokens or 0,
        row.cache_write_1h_tokens or 0,
    )
    return usd(prices.get(row.model, FREE).cost(counts))


def usage_total(buckets: list[dict[str, Any]]) -> dict[str, Any]:
    """The buckets added up: their cost is the sum of theirs as shown (to the micro-dollar), so a
    client adding up the buckets (or the CSV's rows) gets the same figure."""
    total: dict[str, Any] = {"object": "usage.bucket", **dict.fromkeys(USAGE_FIELDS, 0)}
    for bucket in buckets:
        for field in USAGE_FIELDS:
            total[field] += bucket[field]
    total["cost_usd"] = float(sum((Decimal(str(b["cost_usd"])) for b in buckets), Decimal(0)))
    return total


def _usage_buckets(
    qs: Any,
    *,
    tenant_id: int | None,
    group_by: tuple[str, ...],
    start: datetime | None,
    end: datetime | None,
    model: str | None,
    key_ids: list[int] | None,
    prices: dict[str, Price],
) -> list[tuple[dict[str, Any], Decimal]]:
    """Buckets of one source with their cost in micro-USD: grouped by model too (each model
    has its price), folded back into the buckets asked for."""
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if start is not None:
        qs = qs.filter(created_at__gte=start)
    if end is not None:
        qs = qs.filter(created_at__lt=end)
    if model is not None:
        qs = qs.filter(model=model)
    if key_ids is not None:
        qs = qs.filter(api_key_id__in=key_ids)
    keys: list[str] = ["model"]
    if "day" in group_by:
        qs = qs.annotate(day=TruncDate("created_at"))
        keys.append("day")
    if "tenant" in group_by:
        qs = qs.annotate(tenant_name=F("tenant__name"))
        keys.append("tenant_name")
    if "key" in group_by:
        qs = qs.annotate(key_name=F("api_key__name"), key_prefix=F("api_key__prefix"))
        keys += ["api_key_id", "key_name", "key_prefix"]
    if "prompt" in group_by and qs.model is Response:
        keys += ["prompt_id", "prompt_version"]
    if "kind" in group_by and qs.model is UsageRecord:
        keys.append("endpoint")
    rows = qs.values(*keys).annotate(requests=Count("id"), **usage_sums()).order_by(*keys)
    folded: dict[BucketKey, tuple[dict[str, Any], list[Decimal]]] = {}
    for row in rows:
        entry: dict[str, Any] = {"object": "usage.bucket"}
        if "day" in row:
            day = row["day"]
            entry["day"] = day.isoformat() if isinstance(day, date) else str(day)
        if "model" in group_by:
            entry["model"] = row["model"]
        if "tenant_name" in row:
            entry["tenant"] = row["tenant_name"]
        if "key" in group_by:
            # A key deleted since: its calls stay, as no key's (SET_NULL).
            entry["key_id"] = row["api_key_id"]
            entry["key"] = f"{row['key_name']} ({row['key_prefix']}…)" if row["api_key_id"] is not None else None
        if "prompt" in group_by:
            entry["prompt"] = row.get("prompt_id") or None
            entry["prompt_version"] = row.get("prompt_version") or None
        if "kind" in group_by:
            entry["kind"] = row.get("endpoint") or RESPONSES_KIND
        counts = usage_counts(row)
        cost = prices.get(row["model"], FREE).cost(counts)
        figures = {
            "requests": row["requests"],
            "input_tokens": counts.input,
            "output_tokens": counts.output,
            "total_tokens": counts.input + counts.output,
            "cached_tokens": counts.cached,
            "cache_write_tokens": counts.cache_write,
            "cache_write_1h_tokens": counts.cache_write_1h,
        }
        ident = tuple(entry.get(k) for k in _BUCKET_KEYS)
        if ident in folded:
            into, cost_acc = folded[ident]
            for field in USAGE_FIELDS:
                into[field] += figures[field]
            cost_acc[0] += cost
        else:
            folded[ident] = ({**entry, **figures}, [cost])
    return [(entry, cost[0]) for entry, cost in folded.values()]


@dataclass(frozen=True, slots=True)
class Today:
    """The admin's front page: today's (UTC) traffic, errors, tokens and cost, and who spent most."""

    requests: int
    errors: int
    total: dict[str, Any]
    top_keys: list[dict[str, Any]]
    top_models: list[dict[str, Any]]


def today_summary(*, top: int = 5) -> Today:
    """Today's figures, as /v1/usage gives them from 00:00 UTC: two grouped reads per source
    (by key, by model), the price table and one count of errors (failed responses and calls
    answered with an error status)."""
    start = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    by_model = usage_summary(tenant_id=None, group_by=("model",), start=start)
    by_key = usage_summary(tenant_id=None, group_by=("key", "tenant"), start=start)
    total = usage_total(by_model)
    errors = Response.objects.filter(created_at__gte=start, status=Response.Status.FAILED).count()
    errors += UsageRecord.objects.filter(created_at__gte=start, status__gte=400).count()

    def costliest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: (-r["cost_usd"], -r["total_tokens"]))[:top]

    return Today(total["requests"], errors, total, costliest(by_key), costliest(by_model))


def tenant_names() -> list[tuple[int, str]]:
    return list(Tenant.objects.order_by("name").values_list("id", "name"))


def recent_use(*, tenant_id: int | None = None, key_id: int | None = None, seconds: int = 60) -> tuple[int, int]:
    """Requests and tokens of a tenant or a key in the last `seconds`, from the store (stored
    responses and usage records): what a per-minute limit's window saw, where the limit's own
    token bucket has already refilled. Two queries."""
    since = timezone.now() - timedelta(seconds=seconds)
    where = {"tenant_id": tenant_id} if key_id is None else {"api_key_id": key_id}
    requests = tokens = 0
    for source in (Response.objects.all(), UsageRecord.objects.all()):
        row = source.filter(created_at__gte=since, **where).aggregate(
            n=Count("pk"), t=Coalesce(Sum("input_tokens"), 0) + Coalesce(Sum("output_tokens"), 0)
        )
        requests += row["n"]
        tokens += row["t"]
    return requests, tokens


@dataclass(frozen=True, slots=True)
class TenantUse:
    """What the tenants list shows of each tenant: its budget period's spend, the last minute."""

    period_tokens: int = 0
    period_micro_usd: int = 0
    minute_requests: int = 0
    minute_tokens: int = 0


def tenants_use(tenants: Iterable[Tenant]) -> dict[int, TenantUse]:
    """Each tenant's spend in its budget period (the month when it has no budget) and its use
    in the last minute, for a page of tenants: three queries whatever the page's size."""
    tenants = list(tenants)
    if not tenants:
        return {}
    now = timezone.now().astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    minute = now - timedelta(seconds=60)
    prices = route_prices()
    daily = {t.pk for t in tenants if t.budget_period == "day"}
    acc: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for source in (Response.objects.all(), UsageRecord.objects.all()):
        rows = (
            source.filter(tenant_id__in=[t.pk for t in tenants], created_at__gte=min(month, day))
            .values("tenant_id", "model")
            .annotate(
                **usage_sums("m_"),
                **usage_sums("d_", created_at__gte=day),
                n=Count("pk", filter=Q(created_at__gte=minute)),
                nt=Coalesce(Sum("input_tokens", filter=Q(created_at__gte=minute)), 0)
                + Coalesce(Sum("output_tokens", filter=Q(created_at__gte=minute)), 0),
            )
        )
        for row in rows:
            counts = usage_counts(row, "d_" if row["tenant_id"] in daily else "m_")
            entry = acc[row["tenant_id"]]
            entry[0] += counts.input + counts.output
            entry[1] += int(prices.get(row["model"], FREE).cost(counts))
            entry[2] += row["n"]
            entry[3] += row["nt"]
    return {t.pk: TenantUse(*acc[t.pk]) if t.pk in acc else TenantUse() for t in tenants}
