"""Reads: responses and their items, a request's context (its chain, by one recursive SQL
query whatever the length, or its conversation, then its input with item references
resolved), the jobs the reaper looks for, a tenant's spend for budgets, the models a key may
use. Sync functions.

Async callers go through `responses_api.store.db.run`, which runs them in a worker
thread and releases the connection at once.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max, Min, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..domain import Budget, Price, Principal, Quota, TokenCounts
from ..models import (
    PRICE_FIELDS,
    ApiKey,
    Conversation,
    ConversationItem,
    Item,
    ModelRoute,
    Prompt,
    PromptVersion,
    Response,
    ResponseItem,
    Tenant,
    UsageRecord,
    WorkerProcess,
    route_price,
)
from ..protocol import wirejson
from ..protocol.compaction import InputSpans, span_after
from ..protocol.errors import InvalidRequest, NotFound
from ..protocol.prompts import PromptTemplate
from ..protocol.response import response_object

CHAIN_ITEMS_SQL = """
WITH RECURSIVE chain(id, prev, depth) AS (
    SELECT id, previous_response_id, 0 FROM {response} WHERE id = %s
    UNION ALL
    {step}
)
SELECT {select} FROM chain
JOIN {response_item} ri ON ri.response_id = chain.id
JOIN {item} i ON i.id = ri.item_id
"""
# Oldest first: the deepest response, then its input before its output, in position order.
_CHAIN_ORDER = "chain.depth DESC, ri.role, ri.position"
# On PostgreSQL the chain comes back as one JSON array: one decode in C instead of one
# per item (a 500-turn chain is 1,000 items; bench/chain.py).
CHAIN_SELECT = {
    "postgresql": f"COALESCE(json_agg(i.data ORDER BY {_CHAIN_ORDER}), '[]')::text",
    "default": "i.data",
}
# The recursive step. On Postgres a LATERAL primary-key lookup: with a plain
# join the planner may scan the whole table at every step while the table is
# small, so a long chain costs its length squared (bench/chain.py).
CHAIN_STEP_SQL = {
    "postgresql": """SELECT r.id, r.previous_response_id, chain.depth + 1 FROM chain
    CROSS JOIN LATERAL (
        SELECT id, previous_response_id FROM {response} WHERE id = chain.prev LIMIT 1
    ) r""",
    "default": """SELECT r.id, r.previous_response_id, chain.depth + 1
    FROM {response} r JOIN chain ON r.id = chain.prev""",
}


def chain_step_sql(response_table: str) -> str:
    """The recursive step of a `chain(id, prev, depth)` CTE walking back to the root."""
    return CHAIN_STEP_SQL.get(connection.vendor, CHAIN_STEP_SQL["default"]).format(response=response_table)


_item_type = operator.itemgetter("type")


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def epoch(value: datetime | None) -> int | None:
    return int(value.timestamp()) if value is not None else None


@dataclass(slots=True)
class ChainHead:
    id: str
    status: str


def chain_head_get(*, tenant_id: int, response_id: str) -> ChainHead:
    """The response a new one chains to; unknown, deleted, unstored or foreign ids are one error."""
    row = (
        responses_visible(tenant_id=tenant_id)
        .filter(id=response_id)
        .values_list("id", "status", "chain_purged")
        .first()
    )
    if row is not None and row[2]:
        raise InvalidRequest(
            f"Previous response with id '{response_id}' cannot be continued: an earlier response of its "
            "chain was purged, and with it the context.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if row is None:
        raise InvalidRequest(
            f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if row[1] in ("queued", "in_progress"):
        raise InvalidRequest(
            f"Previous response '{response_id}' is still {row[1]}; wait until it ends.",
            param="previous_response_id",
            code="previous_response_in_progress",
        )
    return ChainHead(row[0], row[1])


def chain_items_list(*, response_id: str) -> list[dict[str, Any]]:
    """Every item of a chain, oldest first: one query whatever its length."""
    aggregated = connection.vendor == "postgresql"
    response = connection.ops.quote_name(Response._meta.db_table)
    sql = CHAIN_ITEMS_SQL.format(
        select=CHAIN_SELECT["postgresql" if aggregated else "default"],
        step=chain_step_sql(response),
        response=response,
        response_item=connection.ops.quote_name(ResponseItem._meta.db_table),
        item=connection.ops.quote_name(Item._meta.db_table),
    )
    with connection.cursor() as cursor:
        if aggregated:
            cursor.execute(sql, [response_id])
            chain: list[dict[str, Any]] = json.loads(cursor.fetchone()[0])  # the JSON array of the items
            return chain
        cursor.execute(f"{sql} ORDER BY {_CHAIN_ORDER}", [response_id])
        return [_loads(row[0]) for row in cursor.fetchall()]


# How many items each response of a chain has in its input (role 0) and its output (role 1),
# in the order chain_items_list returns them.
CHAIN_PARTS_SQL = """
WITH RECURSIVE chain(id, prev, depth) AS (
    SELECT id, previous_response_id, 0 FROM {response} WHERE id = %s
    UNION ALL
    {step}
)
SELECT chain.id, ri.role, COUNT(*) FROM chain
JOIN {response_item} ri ON ri.response_id = chain.id
GROUP BY chain.depth, chain.id, ri.role
ORDER BY chain.depth DESC, ri.role
"""

# The params key of a stored response that continued an unstored one (a WebSocket's memory):
# its input is then that whole context, and this says where the requests' inputs lie in it
# ([start, stop] pairs), as the connection knew them.
FLATTENED_SPANS = "input_spans"


def chain_input_spans(*, response_id: str) -> InputSpans:
    """Where each response's input lies in `chain_items_list`'s items: what a compaction item
    of the chain keeps before it. Two queries; asked only for a chain that holds one.

    A root that continued an unstored response (`FLATTENED_SPANS`) has the spans of the
    requests whose context it stored, not one span for its whole input: a continuation read
    from here keeps what one on the same WebSocket connection keeps."""
    response = connection.ops.quote_name(Response._meta.db_table)
    sql = CHAIN_PARTS_SQL.format(
        step=chain_step_sql(response),
        response=response,
        response_item=connection.ops.quote_name(ResponseItem._meta.db_table),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [response_id])
        parts = cursor.fetchall()
    flattened = _flattened_spans(parts[0][0]) if parts else None
    spans: InputSpans = ()
    start = 0
    for response, role, count in parts:
        if role == ResponseItem.Role.INPUT:  # joined to the one before when it answered nothing
            if response == parts[0][0] and flattened and flattened[-1][1] == count:
                for span_start, span_stop in flattened:
                    spans = span_after(spans, start + span_start, start + span_stop)
            else:
                spans = span_after(spans, start, start + count)
        start += count
    return spans


def _flattened_spans(root_id: str) -> list[list[int]] | None:
    """The root's stored spans, if it continued an unstored response (only a root can: its
    `previous_response_id` was not stored)."""
    stored = (
        Response.objects.filter(id=root_id, params__has_key=FLATTENED_SPANS)
        .values_list(f"params__{FLATTENED_SPANS}", flat=True)
        .first()
    )
    return stored if isinstance(stored, list) else None


def items_by_public_id(*, tenant_id: int, public_ids: list[str]) -> dict[str, Item]:
    """The newest stored item for each public id (for `item_reference`)."""
    found: dict[str, Item] = {}
    for item in Item.objects.filter(tenant_id=tenant_id, public_id__in=public_ids).order_by("id"):
        found[item.public_id] = item
    return found


def resolve_references(tenant_id: int, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with every `item_reference` replaced by the stored item (one query, if any)."""
    refs = [i["id"] for i in items if i["type"] == "item_reference"]
    if not refs:
        return items
    found = items_by_public_id(tenant_id=tenant_id, public_ids=refs)
    resolved = []
    for index, item in enumerate(items):
        if item["type"] == "item_reference":
            stored = found.get(item["id"])
            if stored is None:
                raise InvalidRequest(
                    f"Item with id '{item['id']}' not found.",
                    param=f"input[{index}].id",
                    code="item_not_found",
                )
            resolved.append(stored.data)
        else:
            resolved.append(item)
    return resolved


def conversation_input_spans(*, conversation_id: str, context: list[dict[str, Any]]) -> InputSpans:
    """Where the input of each stored response that placed a compaction item in the conversation
    lies in `context` (its items, as `conversation_context` read them): what that item keeps
    before it. A compaction item no stored response's input holds (a `store: false` turn, an
    item added by the items API, a response's output) keeps nothing before it. Two queries,
    asked only for a conversation that holds a compaction item."""
    ids = list(
        ConversationItem.objects.filter(conversation_id=conversation_id)
        .order_by("position")
        .values_list("item_id", flat=True)
    )
    if len(ids) != len(context):  # appended to since it was read: no span rather than a wrong one
        return ()
    compactions = {ids[n] for n, item in enumerate(context) if item["type"] == "compaction"}
    links = ResponseItem.objects.filter(
        response_id__in=ResponseItem.objects.filter(item_id__in=compactions, role=ResponseItem.Role.INPUT).values(
            "response_id"
        ),
        role=ResponseItem.Role.INPUT,
    ).values_list("response_id", "item_id")
    inputs: dict[int, set[str]] = {}  # item id -> the responses whose input holds it
    for response_id, item_id in links:
        inputs.setdefault(item_id, set()).add(response_id)
    spans: list[range] = []
    for n, item_id in enumerate(ids):
        if item_id not in compactions:
            continue
        for response_id in inputs.get(item_id, ()):
            start = n  # that response's input, appended at once, runs back from its compaction item
            while start and response_id in inputs.get(ids[start - 1], ()):
                start -= 1
            spans.append(range(start, n + 1))
    return tuple(spans)


def conversation_context(*, tenant_id: int, conversation_id: str) -> list[dict[str, Any]]:
    """Every item of the conversation, oldest first, for a response's context: one query,
    whatever the length (the tenant check is part of it)."""
    rows = list(
        ConversationItem.objects.filter(conversation_id=conversation_id, conversation__tenant_id=tenant_id)
        .order_by("position")
        .values_list("item__data", flat=True)
    )
    if not rows and not Conversation.objects.filter(id=conversation_id, tenant_id=tenant_id).exists():
        raise _conversation_not_found(conversation_id)
    return [_loads(r) for r in rows]


def _conversation_not_found(conversation_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.", param="conversation")


@dataclass(slots=True)
class Context:
    """A request's context and where each request's input lies in it (its own last)."""

    items: list[dict[str, Any]]
    input_spans: InputSpans


def context_get(
    *, tenant_id: int, previous_response_id: str | None, conversation_id: str | None, input_items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What a request's model sees: the chain (or the conversation), then its input with item
    references resolved. Chain head (1 query), chain items (1 query, whatever the length),
    item references (1 query, only if any); another tenant's chain is previous_response_not_found."""
    return context_load(
        tenant_id=tenant_id,
        previous_response_id=previous_response_id,
        conversation_id=conversation_id,
        input_items=input_items,
    ).items


def context_load(
    *, tenant_id: int, previous_response_id: str | None, conversation_id: str | None, input_items: list[dict[str, Any]]
) -> Context:
    """`context_get`, with where each request's input lies in it; a chain or conversation that
    holds a compaction item costs one or two queries more (the spans are what it keeps)."""
    history = history_load(  # first: an unknown chain is the error a request hears first
        tenant_id=tenant_id,
        previous_response_id=previous_response_id,
        conversation_id=conversation_id,
        compacted="compaction" in map(_item_type, input_items),  # one named by reference: not its input's
    )
    own = resolve_references(tenant_id, input_items)
    start = len(history.items)
    return Context(history.items + own, span_after(history.input_spans, start, start + len(own)))


def history_load(
    *, tenant_id: int, previous_response_id: str | None, conversation_id: str | None, compacted: bool = False
) -> Context:
    """The chain (its head checked) or the conversation a request continues, with the spans of
    the inputs in it that a compaction item keeps items of (`compacted`: the request's own
    input holds one, which may keep a warm-up's input before it)."""
    if previous_response_id is not None:
        chain_head_get(tenant_id=tenant_id, response_id=previous_response_id)
        return chain_load(response_id=previous_response_id, compacted=compacted)
    if conversation_id is not None:
        return conversation_load(tenant_id=tenant_id, conversation_id=conversation_id)
    return Context([], ())


def chain_load(*, response_id: str, compacted: bool = False) -> Context:
    """A chain's items, and (only when it or the request continuing it, `compacted`, holds a
    compaction item) its inputs' spans."""
    items = chain_items_list(response_id=response_id)
    if not compacted and "compaction" not in map(_item_type, items):  # in C: the common case costs no query
        return Context(items, ())
    return Context(items, chain_input_spans(response_id=response_id))


def conversation_load(*, tenant_id: int, conversation_id: str) -> Context:
    """A conversation's items, and (only when it holds a compaction item) the spans it keeps."""
    items = conversation_context(tenant_id=tenant_id, conversation_id=conversation_id)
    if "compaction" not in map(_item_type, items):
        return Context(items, ())
    return Context(items, conversation_input_spans(conversation_id=conversation_id, context=items))


def context_check(
    *, tenant_id: int, previous_response_id: str | None, conversation_id: str | None, input_items: list[dict[str, Any]]
) -> None:
    """The errors `context_get` would raise, without reading the context: the chain's head
    (1 query) or the conversation (1 query), the item references (1 query, only if any)."""
    if previous_response_id is not None:
        chain_head_get(tenant_id=tenant_id, response_id=previous_response_id)
    elif (
        conversation_id is not None
        and not Conversation.objects.filter(id=conversation_id, tenant_id=tenant_id).exists()
    ):
        raise _conversation_not_found(conversation_id)
    resolve_references(tenant_id, input_items)


def route_enabled(name: str) -> ModelRoute | None:
    """The enabled route of this public model name, its targets and their providers prefetched
    (three queries, whatever the number of targets)."""
    return ModelRoute.objects.filter(name=name, enabled=True).prefetch_related("targets__provider").first()


def route_prices() -> dict[str, Price]:
    """Every route's `Price` by its name (one query): usage is priced with the routes' current
    prices wherever it is read; a model no route names costs nothing."""
    return {row[0]: route_price(*row[1:]) for row in ModelRoute.objects.values_list("name", *PRICE_FIELDS)}


# The token sums a cost needs, per model: `usage_sums()` annotates them, `usage_counts` reads
# them back as `TokenCounts`. Response and UsageRecord have the same columns.
USAGE_SUMS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cached_tokens": "cached",
    "cache_write_tokens": "cache_write",
    "cache_write_1h_tokens": "cache_write_1h",
}


def usage_sums(prefix: str = "", **filters: Any) -> dict[str, Any]:
    """`Sum` annotations of each USAGE_SUMS column as `<prefix><column>`, optionally filtered."""
    where = Q(**filters) if filters else None
    return {f"{prefix}{column}": Coalesce(Sum(column, filter=where), 0) for column in USAGE_SUMS}


def usage_counts(row: Mapping[str, Any], prefix: str = "") -> TokenCounts:
    return TokenCounts(**{field: row[f"{prefix}{column}"] for column, field in USAGE_SUMS.items()})


def spend_since(*, tenant_id: int, start: datetime, key_id: int | None = None) -> tuple[int, int]:
    """A tenant's (or, with `key_id`, one key's) tokens and cost (micro-USD, at the routes'
    current prices, cache reads and writes included) since `start`: what a budget's period has
    spent before this process counted it. Two queries and the price table."""
    prices = route_prices()
    tokens = micro_usd = 0
    for source in (Response.objects.all(), UsageRecord.objects.all()):
        if key_id is not None:
            source = source.filter(api_key_id=key_id)
        rows = source.filter(tenant_id=tenant_id, created_at__gte=start).values("model").annotate(**usage_sums())
        for row in rows:
            counts = usage_counts(row)
            tokens += counts.input + counts.output
            micro_usd += int(prices.get(row["model"], FREE).cost(counts))
    return tokens, micro_usd


def usd(micro_usd: Decimal | int) -> float:
    """Micro-USD as USD, to the micro-dollar: what /v1/usage and the admin show alike."""
    return float(round(Decimal(micro_usd) / 1_000_000, 6))


def usd_text(usd: float) -> str:
    """A cost for display: cents above a dollar, the micro-dollar below (small bills show)."""
    if usd >= 1 or usd == 0:
        return f"${usd:,.2f}"
    return f"${usd:.6f}".rstrip("0")


RESPONSE_STATUSES = tuple(Response.Status.values)  # what `status` filters may name
FREE = Price()


def responses_visible(*, tenant_id: int | None) -> QuerySet[Response]:
    """Responses a caller may read or continue: stored, not deleted, in its tenant (None: every
    tenant). The one definition every read, list and chain uses."""
    qs = Response.objects.filter(deleted_at__isnull=True, store=True)
    return qs if tenant_id is None else qs.filter(tenant_id=tenant_id)


def models_visible(principal: Principal) -> list[dict[str, Any]]:
    """`GET /v1/models`: the enabled routes the key may use, as model objects."""
    routes = ModelRoute.objects.filter(enabled=True).order_by("name").values_list("name", "created_at")
    return [
        {"id": name, "object": "model", "created": int(created.timestamp()), "owned_by": "gateway"}
        for name, created in routes
        if principal.may_use(name)
    ]


def database_ping() -> None:
    """The database answers a query (/readyz); raises when it does not."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def api_key_by_prefix(prefix: str) -> ApiKey | None:
    """Authentication's look-up: the key with this prefix, its tenant joined (one query)."""
    return ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()


def key_principal(key: ApiKey) -> Principal:
    """Who a key is (its tenant joined): its allowed models, its and its tenant's limits and
    budgets, and when it expires."""
    return Principal(
        tenant_id=key.tenant_id,
        tenant_name=key.tenant.name,
        key_id=key.id,
        key_name=key.name,
        is_admin=key.is_admin,
        allowed_models=tuple(key.allowed_models or ()),
        quotas=tuple(q for q in (key_quota(key), tenant_quota(key.tenant)) if q is not None),
        budgets=tuple(b for b in (budget_of(key), budget_of(key.tenant)) if b is not None),
        expires_at=key.expires_at.timestamp() if key.expires_at is not None else None,
    )


def quota_of(scope: str, label: str, owner: ApiKey | Tenant) -> Quota | None:
    """A key's or tenant's per-minute and concurrency limits; None when it has none."""
    if not (owner.requests_per_minute or owner.tokens_per_minute or owner.max_concurrent_requests):
        return None
    return Quota(
        scope,
        label,
        owner.requests_per_minute,
        owner.tokens_per_minute,
        owner.max_concurrent_requests,
        alert_at=tuple(sorted({t for t in owner.alert_thresholds or () if t <= 100})),
    )


def key_quota(key: ApiKey) -> Quota | None:
    return quota_of(f"key:{key.id}", f"API key '{key.name}'", key)


def tenant_quota(tenant: Tenant) -> Quota | None:
    return quota_of(f"tenant:{tenant.id}", f"tenant '{tenant.name}'", tenant)


def budget_of(owner: ApiKey | Tenant) -> Budget | None:
    """A key's own budget, or its tenant's (all its keys together); None when it has none."""
    if owner.budget_tokens is None and owner.budget_usd is None:
        return None
    is_key = isinstance(owner, ApiKey)
    return Budget(
        owner.tenant_id if isinstance(owner, ApiKey) else owner.id,
        owner.budget_period,
        owner.budget_tokens,
        owner.budget_usd,
        key_id=owner.id if is_key else None,
        label=f"API key '{owner.name}'" if is_key else "this tenant",
        alert_at=tuple(sorted(set(owner.alert_thresholds or ()))),
    )


def response_get_row(*, tenant_id: int | None, response_id: str) -> Response:
    row = responses_visible(tenant_id=tenant_id).filter(id=response_id).first()
    if row is None:
        raise NotFound(f"No response found with id '{response_id}'.", param="response_id")
    return row


def response_output_list(*, response_id: str) -> list[dict[str, Any]]:
    return [
        _loads(data)
        for data in ResponseItem.objects.filter(response_id=response_id, role=ResponseItem.Role.OUTPUT)
        .order_by("position")
        .values_list("item__data", flat=True)
    ]


def response_object_from_row(row: Response, output: list[dict[str, Any]]) -> dict[str, Any]:
    usage = None
    if row.input_tokens is not None or row.status in Response.ENDED:
        usage = {
            "input_tokens": row.input_tokens or 0,
            "output_tokens": row.output_tokens or 0,
            "total_tokens": (row.input_tokens or 0) + (row.output_tokens or 0),
            "input_tokens_details": {
                "cached_tokens": row.cached_tokens or 0,
                "cache_write_tokens": row.cache_write_tokens or 0,
            },
            "output_tokens_details": {"reasoning_tokens": row.reasoning_tokens or 0},
        }
    return response_object(
        response_id=row.id,
        created_at=epoch(row.created_at) or 0,
        status=row.status,
        model=row.model,
        previous_response_id=row.previous_response_id,
        params=row.params,
        output=output,
        usage=usage,
        error=row.error,
        incomplete_details=row.incomplete_details,
        completed_at=epoch(row.completed_at),
    )


def response_retrieve(*, tenant_id: int | None, response_id: str) -> dict[str, Any]:
    """The stored Response object: two queries (row, output items)."""
    row = response_get_row(tenant_id=tenant_id, response_id=response_id)
    return response_object_from_row(row, response_output_list(response_id=row.id))


# The columns a Response object is built of (`response_object_from_row`), and its output
# items as one JSON array, in one statement: a retrieve's row and items in one round trip,
# run on the event loop (`db.fetch_one`) with no thread hop, no ORM query building and none of
# the row's other columns (its `job` holds the whole request). PostgreSQL only.
_RETRIEVE_COLUMNS = (
    "id",
    "created_at",
    "status",
    "model",
    "previous_response_id",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "completed_at",
)
_RETRIEVE_JSON_COLUMNS = ("params", "error", "incomplete_details")


def response_retrieve_statement(*, tenant_id: int | None, response_id: str) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: `response_retrieve` as one statement (no database access to build it); its
    row, if the response is visible, goes to `response_from_record`."""
    return _retrieve_sql(tenant_id is not None), {"id": response_id, "tenant_id": tenant_id}


@functools.lru_cache(maxsize=2)
def _retrieve_sql(by_tenant: bool) -> str:
    quote = connection.ops.quote_name
    response = Response._meta
    column = {f.attname: str(f.column) for f in response.concrete_fields}
    columns = [f"r.{quote(column[n])}" for n in _RETRIEVE_COLUMNS]
    columns += [f"r.{quote(column[n])}::text" for n in _RETRIEVE_JSON_COLUMNS]
    # As `responses_visible` and `response_output_list`: stored, not deleted, the caller's tenant.
    return (
        "SELECT {columns}, (SELECT COALESCE(json_agg(i.data ORDER BY ri.position), '[]')::text"
        " FROM {response_item} ri JOIN {item} i ON i.id = ri.item_id"
        " WHERE ri.response_id = r.id AND ri.role = {output})"
        " FROM {response} r WHERE r.id = %(id)s AND r.deleted_at IS NULL AND r.store{tenant}"
    ).format(
        columns=", ".join(columns),
        response_item=quote(ResponseItem._meta.db_table),
        item=quote(Item._meta.db_table),
        output=int(ResponseItem.Role.OUTPUT),
        response=quote(response.db_table),
        tenant=" AND r.tenant_id = %(tenant_id)s" if by_tenant else "",
    )


def response_from_record(record: tuple[Any, ...] | None, response_id: str) -> dict[str, Any]:
    """The Response object of a `response_retrieve_statement` row (as `response_retrieve`)."""
    if record is None:
        raise NotFound(f"No response found with id '{response_id}'.", param="response_id")
    fields = dict(zip(_RETRIEVE_COLUMNS, record, strict=False))
    for name, text in zip(_RETRIEVE_JSON_COLUMNS, record[len(_RETRIEVE_COLUMNS) :], strict=False):
        fields[name] = wirejson.loads(text) if text is not None else None
    output = wirejson.loads(record[-1])
    return response_object_from_row(SimpleNamespace(**fields), output)  # type: ignore[arg-type]


@dataclass(slots=True)
class ListPage:
    """One page of an OpenAI-style list: data, first_id, last_id, has_more."""

    data: list[dict[str, Any]]
    has_more: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.data[0]["id"] if self.data else None,
            "last_id": self.data[-1]["id"] if self.data else None,
            "has_more": self.has_more,
        }


def input_items_page(*, tenant_id: int | None, response_id: str, after: str | None, limit: int, order: str) -> ListPage:
    """A page of the response's input items; `after` is an item id from an earlier page."""
    row = response_get_row(tenant_id=tenant_id, response_id=response_id)
    qs = ResponseItem.objects.filter(response_id=row.id, role=ResponseItem.Role.INPUT)
    return items_page(
        qs,
        tenant_id=row.tenant_id,
        after=after,
        limit=limit,
        order=order,
        unknown_after=f"No input item with id '{after}' in this response.",
    )


def items_page(
    links: Any, *, tenant_id: int, after: str | None, limit: int, order: str, unknown_after: str
) -> ListPage:
    """A page of items through their links (`position` + `item`): ResponseItem or ConversationItem
    rows of `tenant_id`; `after` is an item id from an earlier page."""
    descending = order == "desc"
    if after is not None:
        # The tenant too: items are indexed by (tenant, public id).
        anchor = (
            links.filter(item__tenant_id=tenant_id, item__public_id=after).values_list("position", flat=True).first()
        )
        if anchor is None:
            raise InvalidRequest(unknown_after, param="after")
        links = links.filter(position__lt=anchor) if descending else links.filter(position__gt=anchor)
    rows = list(
        links.order_by("-position" if descending else "position").values_list("item__data", flat=True)[: limit + 1]
    )
    return ListPage([_loads(r) for r in rows[:limit]], len(rows) > limit)


# -- worker-run responses ---------------------------------------------------------------


def response_status(*, response_id: str) -> str:
    return Response.objects.filter(id=response_id).values_list("status", flat=True).get()


def stale_cutoff() -> datetime:
    """A worker process silent since this is presumed dead (4 missed beats)."""
    return timezone.now() - timedelta(seconds=4 * settings.GATEWAY_HEARTBEAT_SECONDS)


def _held_runs(cutoff: datetime) -> set[str]:
    """The runs the live worker processes held at their last beat (WorkerProcess.runs)."""
    held: set[str] = set()
    for runs in WorkerProcess.objects.filter(beat_at__gte=cutoff).values_list("runs", flat=True):
        held.update(runs)
    return held


def response_job_is_stale(*, response_id: str) -> bool:
    return bool(_stale_jobs([response_id]))


def response_jobs_stale() -> list[str]:
    """At most 500 per sweep."""
    return _stale_jobs()[:500]


def _stale_jobs(among: list[str] | None = None) -> list[str]:
    """Worker runs whose worker stopped beating for them: presumed dead after 4 missed beats.

    A worker beats once for all its runs (WorkerProcess, listing the runs it holds): a run it
    claimed (served_by) 4 beats ago or more is stale when no process that beat within 4 beats
    holds it (its process died, or its end could not be stored), or when the latest it could
    end (heartbeat_at, set by the claim) is 4 beats past. A run claimed by a worker of the
    release before (served_by empty) kept heartbeat_at as its own last beat, as before."""
    cutoff = stale_cutoff()
    rows = Response.objects.filter(status=Response.Status.IN_PROGRESS, on_worker=True).filter(
        Q(heartbeat_at__lt=cutoff) | Q(claimed_at__lt=cutoff)
    )
    if among is not None:
        rows = rows.filter(id__in=among)
    candidates = list(rows.values_list("id", "served_by", "heartbeat_at"))
    if not candidates:
        return []
    held = _held_runs(cutoff)
    return [
        response_id
        for response_id, served_by, deadline in candidates
        if not served_by or (deadline is not None and deadline < cutoff) or response_id not in held
    ]


def response_jobs_stuck_queued(*, queued_seconds: Mapping[str, float] | None = None) -> list[str]:
    """Background responses no worker took within GATEWAY_QUEUED_MAX_SECONDS, or the time their
    completion window allows (`queued_seconds`: window -> seconds; orchestration/windows.py):
    their task was lost (a broker restarted without persistence) or never sent."""
    now = timezone.now()
    default = timedelta(seconds=settings.GATEWAY_QUEUED_MAX_SECONDS)
    waited = Q(created_at__lt=now - default)
    if queued_seconds:
        waited = Q()
        for window, seconds in queued_seconds.items():
            waited |= Q(completion_window=window, created_at__lt=now - timedelta(seconds=seconds))
        waited |= ~Q(completion_window__in=list(queued_seconds)) & Q(created_at__lt=now - default)
    rows = Response.objects.filter(waited, status=Response.Status.QUEUED, on_worker=True, heartbeat_at__isnull=True)
    return list(rows.values_list("id", flat=True)[:500])


def background_queue() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Worker-run responses now (four aggregate queries, read at /metrics scrape time): queued
    ones by completion window (`n`, `oldest` created_at; only the windows that have any) and
    running ones (`n`, `beat`: the freshest heartbeat)."""
    queued = {
        row["completion_window"]: {"n": row["n"], "oldest": row["oldest"]}
        for row in Response.objects.filter(status=Response.Status.QUEUED, on_worker=True)
        .values("completion_window")
        .annotate(n=Count("id"), oldest=Min("created_at"))
        .order_by()
    }
    runs = Response.objects.filter(status=Response.Status.IN_PROGRESS, on_worker=True)
    running = runs.aggregate(n=Count("id"))
    # The freshest sign of life: the beat of a process that runs any, or the own heartbeat of
    # a run a worker of the release before claimed (served_by empty: models.Response).
    beats = [
        WorkerProcess.objects.filter(id__in=runs.values("served_by")).aggregate(beat=Max("beat_at"))["beat"],
        runs.filter(served_by="").aggregate(beat=Max("heartbeat_at"))["beat"],
    ]
    running["beat"] = max((beat for beat in beats if beat is not None), default=None)
    return queued, running


def prompt_template(*, tenant_id: int, prompt_id: str, version: int | None) -> PromptTemplate:
    """A reusable prompt's version as a create applies it: the tenant's own or a shared one
    (another tenant's is the same 404 as an unknown id); `version` None: the prompt's default
    version (or, without one it has, the newest)."""
    prompt = (
        Prompt.objects.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True), id=prompt_id)
        .only("id", "default_version")
        .first()
    )
    if prompt is None:
        raise NotFound(f"Prompt with id '{prompt_id}' not found.", param="prompt.id")
    versions = PromptVersion.objects.filter(prompt_id=prompt_id)
    row: PromptVersion | None
    if version is not None:
        row = versions.filter(version=version).first()
        if row is None:
            raise NotFound(f"Prompt '{prompt_id}' has no version '{version}'.", param="prompt.version")
    else:
        row = None
        if prompt.default_version is not None:
            row = versions.filter(version=prompt.default_version).first()
        if row is None:
            row = versions.order_by("-version").first()
        if row is None:
            raise NotFound(f"Prompt '{prompt_id}' has no versions.", param="prompt.version")
    return row.template()
