"""Writes: create and finish a response (and append it to its conversation), delete, purge and
expire responses, create and revoke API keys, the job lifecycle of worker runs and the web
processes' beat.

Plain sync ORM functions, plus, for PostgreSQL, the hot writes as single statements
(`finish_statement`, `insert_statement`) that the web process awaits on its event loop
(`db.fetch_one`) and `response_finish` runs synchronously."""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models import Exists, F, Func, JSONField, OuterRef, Q
from django.utils import timezone

from ..models import (
    ApiKey,
    Conversation,
    ConversationItem,
    Item,
    MaintenanceRun,
    Response,
    ResponseItem,
    Tenant,
    UsageRecord,
    WebProcess,
    WorkerProcess,
)
from ..protocol import wirejson
from ..protocol.errors import NotFound
from . import selectors
from .eventlog import forget_now, hide_view_now
from .files import expired_files_delete, files_retention_delete

KEY_PREFIX = "sk-gw-"


def response_row(
    *,
    response_id: str,
    tenant_id: int,
    api_key_id: int | None,
    previous_response_id: str | None,
    model: str,
    params: dict[str, Any],
    created_at: datetime,
    job: dict[str, Any] | None = None,
    served_by: str = "",
    completion_window: str = "soonest",
    continuation_id: str | None = None,
) -> dict[str, Any]:
    """The request-time fields of a stored response row (`served_by`: the web process that
    streams it, liveness.py; `completion_window`, `continuation_id`: its `background_options`)."""
    return {
        "id": response_id,
        "tenant_id": tenant_id,
        "api_key_id": api_key_id,
        "previous_response_id": previous_response_id,
        "model": model,
        "instructions": params.get("instructions"),
        "params": params,
        "metadata": params.get("metadata") or {},
        "store": True,
        "conversation_id": (params.get("conversation") or {}).get("id"),
        "background": params.get("background", False),
        "created_at": created_at,
        "job": job,
        "on_worker": job is not None,
        "served_by": served_by,
        # The reusable prompt used: the history and /v1/usage group by it.
        "prompt_id": (params.get("prompt") or {}).get("id") or "",
        "prompt_version": (params.get("prompt") or {}).get("version") or "",
        "completion_window": completion_window,
        "continuation_id": continuation_id or "",
    }


def response_create(*, row: dict[str, Any], status: str, input_items: list[dict[str, Any]]) -> None:
    """Insert the open row of a response a worker will run, once what it continues is checked
    (`selectors.context_check`: the chain's head or the conversation, the item references).
    Its context is read when the run starts (assembly.run_for_job), not here."""
    selectors.context_check(
        tenant_id=row["tenant_id"],
        previous_response_id=row["previous_response_id"],
        conversation_id=row["conversation_id"],
        input_items=input_items,
    )
    Response.objects.create(**row, status=status)


def context_to_check(*, row: dict[str, Any], input_items: list[dict[str, Any]]) -> bool:
    """Whether `response_create` has anything to check before the insert (what the row
    continues, item references): without, the insert alone (`insert_statement`) is the same."""
    return (
        row["previous_response_id"] is not None
        or row["conversation_id"] is not None
        or any(i["type"] == "item_reference" for i in input_items)
    )


def response_insert(*, row: dict[str, Any], status: str) -> None:
    """Insert an open response row (the request-time fields of `response_row`)."""
    Response.objects.create(**row, status=status)


def _final_fields(
    response: dict[str, Any], upstream: str, latency_ms: int | None, cache_write_1h_tokens: int | None = None
) -> dict[str, Any]:
    """The end-time fields of a stored response row (`cache_write_1h_tokens`: the 1-hour part
    of the cache writes, which the public usage does not show)."""
    usage = response.get("usage") or {}
    completed_at = response.get("completed_at")
    return {
        "status": response["status"],
        "error": response.get("error"),
        "incomplete_details": response.get("incomplete_details"),
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens"),
        "cache_write_tokens": (usage.get("input_tokens_details") or {}).get("cache_write_tokens"),
        "cache_write_1h_tokens": cache_write_1h_tokens if usage else None,
        "reasoning_tokens": (usage.get("output_tokens_details") or {}).get("reasoning_tokens"),
        "completed_at": datetime.fromtimestamp(completed_at, UTC) if completed_at else None,
        "upstream": upstream,
        "latency_ms": latency_ms,
    }


class _JobWithoutCredentials(Func):
    """The row's `job` without its sealed MCP credentials: every write that ends a response
    drops them in the same statement, so no reader ever sees an ended run still holding them."""

    output_field = JSONField()

    def __init__(self) -> None:
        super().__init__(F("job"))

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="(%(expressions)s - 'mcp_credentials')", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="json_remove(%(expressions)s, '$.mcp_credentials')", **extra)


def _ended(fields: dict[str, Any]) -> dict[str, Any]:
    """An ORM update's fields ending a response: with the job's credentials dropped."""
    return {**fields, "job": _JobWithoutCredentials()}


def response_finish(
    *,
    tenant_id: int,
    response: dict[str, Any],
    input_items: list[dict[str, Any]],
    upstream: str = "",
    latency_ms: int | None = None,
    create_row: dict[str, Any] | None = None,
    cache_write_1h_tokens: int | None = None,
) -> bool:
    """Persist the terminal state, input and output items in one transaction.

    `create_row`: the row was not inserted at the start (non-streaming
    creates); these are its fields, and it is created here.

    Returns False when the row had already reached a terminal state (for
    example cancelled by another request): a terminal state is never left."""
    if connection.vendor == "postgresql":
        item_sequence_lookup()
        sql, params = finish_statement(
            tenant_id=tenant_id,
            response=response,
            input_items=input_items,
            upstream=upstream,
            latency_ms=latency_ms,
            create_row=create_row,
            cache_write_1h_tokens=cache_write_1h_tokens,
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return bool(cursor.fetchone()[0])
    final = _final_fields(response, upstream, latency_ms, cache_write_1h_tokens)
    with transaction.atomic():
        if create_row is not None:
            # A non-streaming create writes its row once, here, with its items.
            Response.objects.create(**create_row, **final)
        elif not Response.objects.filter(id=response["id"], status__in=Response.RUNNING).update(**_ended(final)):
            return False
        _attach_items(tenant_id, response["id"], input_items, response["output"])
    return True


# The terminal state, the new items and their links in one statement (one round trip,
# atomic without a transaction block): the hot path of every stored response
# (bench/README.md). Item ids come from the sequence in a materialized CTE, so each
# link knows its item; an `item_reference` input links to the newest stored item with
# that id (as `selectors.items_by_public_id`). The items are written only when the
# response row was inserted, or updated from an open state.
_FINISH_SQL = """
WITH resp AS ({head} RETURNING id),
src AS MATERIALIZED (
    SELECT COALESCE(ref, nextval(%(seq)s::regclass)) AS id, fresh, data, role, position
    FROM (
        SELECT found.id AS ref, e.value ? 'item' AS fresh, e.value -> 'item' AS data, 0 AS role,
               (e.ordinality - 1)::int AS position
        FROM jsonb_array_elements(%(inputs)s::jsonb) WITH ORDINALITY AS e(value, ordinality)
        LEFT JOIN LATERAL (
            SELECT id FROM {item}
            WHERE e.value ? 'ref' AND tenant_id = %(tenant_id)s AND public_id = e.value ->> 'ref'
            ORDER BY id DESC LIMIT 1
        ) found ON true
        UNION ALL
        SELECT NULL, true, e.value, 1, (e.ordinality - 1)::int
        FROM jsonb_array_elements(%(outputs)s::jsonb) WITH ORDINALITY AS e(value, ordinality)
    ) entries
    WHERE EXISTS (SELECT 1 FROM resp)
),
new_items AS (
    INSERT INTO {item} (id, tenant_id, public_id, type, data, created_at)
    SELECT id, %(tenant_id)s, data ->> 'id', data ->> 'type', data, %(now)s FROM src WHERE fresh
),
links AS (
    INSERT INTO {response_item} (response_id, item_id, role, position)
    SELECT %(response_id)s, id, role, position FROM src
)
SELECT count(*) FROM resp
"""
_item_sequence: dict[str, str] = {}


def finish_statement(
    *,
    tenant_id: int,
    response: dict[str, Any],
    input_items: list[dict[str, Any]],
    upstream: str = "",
    latency_ms: int | None = None,
    create_row: dict[str, Any] | None = None,
    cache_write_1h_tokens: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: `response_finish` as one statement and its parameters. Its one row is
    `(1,)` when the response was stored, `(0,)` when it had already ended.

    Needs no database access (the item id sequence's name is looked up once per process,
    see `item_sequence_lookup`), so that the web process can run it on its event loop."""
    final = _final_fields(response, upstream, latency_ms, cache_write_1h_tokens)
    fields = {**create_row, **final} if create_row is not None else final
    values = _column_values(fields)
    inputs = [{"ref": i["id"]} if i["type"] == "item_reference" else {"item": i} for i in input_items]
    return _finish_sql(create_row is not None, tuple(fields)), {
        **values,
        "seq": _item_sequence[Item._meta.db_table],
        "inputs": wirejson.dumps(inputs),
        "outputs": wirejson.dumps(response["output"]),
        "tenant_id": tenant_id,
        "now": timezone.now(),
        "response_id": response["id"],
    }


def _json_adapter(field: str) -> Any:
    model_field: Any = Response._meta.get_field(field)
    if connection.vendor == "postgresql" and getattr(model_field, "encoder", None) is None:
        # What Django's adapter gives (psycopg's Jsonb), encoded by orjson.
        from psycopg.types.json import Jsonb

        return lambda value: Jsonb(value, dumps=wirejson.dumps)
    return lambda value: model_field.get_db_prep_save(value, connection)


# Response's JSON columns go through the field's own adapter (psycopg's Jsonb); the rest as is.
_JSON_FIELDS = {
    f.attname: _json_adapter(f.attname) for f in Response._meta.concrete_fields if f.get_internal_type() == "JSONField"
}


def _column_values(fields: dict[str, Any]) -> dict[str, Any]:
    """Statement parameters `f_<column>` for Response columns."""
    return {
        f"f_{name}": _JSON_FIELDS[name](value) if name in _JSON_FIELDS and value is not None else value
        for name, value in fields.items()
    }


@functools.lru_cache(maxsize=16)
def _finish_sql(insert: bool, fields: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    if insert:
        head = _insert_sql(fields)
    else:
        # The job's sealed MCP credentials go in the same write (see _JobWithoutCredentials); a
        # job without them is assigned unchanged, so its stored (TOASTed) value is not rewritten.
        job = quote(str(Response._meta.get_field("job").column))
        head = (
            "UPDATE {} SET {}, {job} = CASE WHEN {job} ? 'mcp_credentials' THEN {job} - 'mcp_credentials' "
            "ELSE {job} END WHERE id = %(response_id)s AND status IN ('queued', 'in_progress')"
        ).format(
            quote(Response._meta.db_table),
            ", ".join(f"{quote(n)} = %(f_{n})s" for n in fields),
            job=job,
        )
    return _FINISH_SQL.format(
        head=head, item=quote(Item._meta.db_table), response_item=quote(ResponseItem._meta.db_table)
    )


def insert_statement(*, row: dict[str, Any], status: str) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: `response_insert` as one statement and its parameters (no database access)."""
    defaults = {f.attname: f.get_default() for f in _DEFAULTED if f.attname not in row}  # as the ORM would
    fields = {**defaults, **row, "status": status}
    return _insert_sql(tuple(fields)), _column_values(fields)


# Columns that are NOT NULL but filled in by Django (model defaults, "" for text).
_DEFAULTED = [f for f in Response._meta.concrete_fields if not f.null and (f.has_default() or f.empty_strings_allowed)]


@functools.lru_cache(maxsize=16)
def _insert_sql(fields: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    return "INSERT INTO {} ({}) VALUES ({})".format(
        quote(Response._meta.db_table),
        ", ".join(quote(n) for n in fields),
        ", ".join(f"%(f_{n})s" for n in fields),
    )


def item_sequence_lookup() -> None:
    """Remember the name of the item id sequence (once per process; `finish_statement` needs it)."""
    table = Item._meta.db_table
    if table not in _item_sequence:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            _item_sequence[table] = cursor.fetchone()[0]


def item_sequence_known() -> bool:
    return Item._meta.db_table in _item_sequence


def _attach_items(
    tenant_id: int, response_id: str | None, input_items: list[dict[str, Any]], output: list[dict[str, Any]]
) -> list[Item]:
    """Store the new items and (with `response_id`) link them to the response; the items of
    the turn in order, input then output (referenced ones are the stored items they name)."""
    # Referenced items are already stored: point at them instead of copying.
    references = {i["id"] for i in input_items if i["type"] == "item_reference"}
    existing = selectors.items_by_public_id(tenant_id=tenant_id, public_ids=list(references)) if references else {}
    new_items = [
        Item(tenant_id=tenant_id, public_id=i["id"], type=i["type"], data=i)
        for i in [*input_items, *output]
        if i["type"] != "item_reference"
    ]
    Item.objects.bulk_create(new_items)
    fresh = iter(new_items)
    inputs = [existing[i["id"]] if i["type"] == "item_reference" else next(fresh) for i in input_items]
    outputs = list(fresh)
    if response_id is not None:
        ResponseItem.objects.bulk_create(
            [
                ResponseItem(response_id=response_id, item_id=stored.id, role=role, position=position)
                for role, stored_items in ((0, inputs), (1, outputs))
                for position, stored in enumerate(stored_items)
            ]
        )
    return inputs + outputs


def conversation_append_items(*, tenant_id: int, conversation_id: str, items: Iterable[Item]) -> None:
    """Link already stored items (a finished response's) at the end, inside the caller's transaction."""
    conversation_append(conversation_lock(tenant_id, conversation_id), list(items))


def conversation_lock(tenant_id: int, conversation_id: str) -> Conversation:
    conversation = Conversation.objects.select_for_update().filter(id=conversation_id, tenant_id=tenant_id).first()
    if conversation is None:
        raise NotFound(f"Conversation with id '{conversation_id}' not found.", param="conversation_id")
    return conversation


def conversation_append(conversation: Conversation, items: list[Item]) -> None:
    """Called with the conversation row locked (or just created in this transaction)."""
    if not items:
        return
    start = conversation.next_position
    ConversationItem.objects.bulk_create(
        [ConversationItem(conversation=conversation, item=item, position=start + n) for n, item in enumerate(items)]
    )
    conversation.next_position = start + len(items)
    conversation.save(update_fields=["next_position"])


def response_finish_in_conversation(
    *,
    tenant_id: int,
    response: dict[str, Any],
    input_items: list[dict[str, Any]],
    conversation_id: str,
    store: bool,
    upstream: str = "",
    latency_ms: int | None = None,
    create_row: dict[str, Any] | None = None,
    cache_write_1h_tokens: int | None = None,
) -> bool:
    """Finish a response that belongs to a conversation, in one transaction: the conversation
    row is locked first, so responses finishing at once append one after the other, each its
    input then its output. A response that did not complete (failed, cancelled) appends nothing."""
    with transaction.atomic():
        conversation_lock(tenant_id, conversation_id)
        appended = response["status"] in ("completed", "incomplete")
        if store:
            final = _final_fields(response, upstream, latency_ms, cache_write_1h_tokens)
            if create_row is not None:
                Response.objects.create(**create_row, **final)
            elif not Response.objects.filter(id=response["id"], status__in=Response.RUNNING).update(**_ended(final)):
                return False
            items = _attach_items(tenant_id, response["id"], input_items, response["output"])
        else:
            items = _attach_items(tenant_id, None, input_items, response["output"]) if appended else []
        if appended:
            conversation_append_items(tenant_id=tenant_id, conversation_id=conversation_id, items=items)
    return True


def response_delete(*, tenant_id: int, response_id: str) -> None:
    """Hide a response from every read and from new chains.

    Its items stay, because later responses that chained to it were built
    on that context and must keep it."""
    row = selectors.response_get_row(tenant_id=tenant_id, response_id=response_id)
    Response.objects.filter(id=row.id).update(deleted_at=timezone.now())
    if row.on_worker and row.status in Response.RUNNING:  # its worker may still write a running view
        hide_view_now(row.id)


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def api_key_create(*, tenant_name: str, name: str, is_admin: bool = False) -> tuple[ApiKey, str]:
    """Create a key; the secret is returned once and never stored."""
    tenant, _ = Tenant.objects.get_or_create(name=tenant_name)
    prefix = secrets.token_hex(6)
    raw = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(tenant=tenant, name=name, prefix=prefix, secret_hash=hash_key(raw), is_admin=is_admin)
    return key, raw


def api_key_regenerate(*, key: ApiKey) -> str:
    """A new secret (and prefix) for the same key: its id, name, limits, budget and usage
    history stay. The old secret is refused from now on, within GATEWAY_CACHE_SECONDS where a
    process still holds it in its key cache. Returns the new secret, shown once."""
    prefix = secrets.token_hex(6)
    raw = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    ApiKey.objects.filter(id=key.id).update(prefix=prefix, secret_hash=hash_key(raw))
    key.prefix, key.secret_hash = prefix, hash_key(raw)
    return raw


def api_key_mark_used(*, key_id: int) -> None:
    """The key's `last_used_at`: now (authentication calls it at most once a minute a key)."""
    ApiKey.objects.filter(id=key_id).update(last_used_at=timezone.now())


def api_key_revoke(*, key: ApiKey) -> None:
    ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=timezone.now())


def response_cancel_queued(*, response_id: str) -> bool:
    """queued -> cancelled (compare-and-swap); False if a worker took it or it ended."""
    return bool(
        Response.objects.filter(id=response_id, status=Response.Status.QUEUED).update(
            **_ended({"status": Response.Status.CANCELLED})
        )
    )


RETENTION_BATCH = 1000


def retention_expire(*, now: datetime | None = None) -> dict[str, int]:
    """Delete responses older than their tenant's retention, with their items; uploaded files
    older than it, and files past their own `expires_after`, rows and bytes.

        A chain is deleted from its newest end: a response goes only when nothing newer continues
        it (children first, level by level), so a live chain keeps its whole context until its tail
        expires too. Items no response and no conversation links any more go with them. Open
        responses are never touched."""
    now = now or timezone.now()
    default_days = django_settings.GATEWAY_RETENTION_DAYS
    counts = {"responses": 0, "items": 0, "files": 0}
    tenants = (
        Tenant.objects.filter(Q(retention_days__gt=0) | Q(retention_days__isnull=True))
        if default_days
        else Tenant.objects.filter(retention_days__gt=0)
    )
    for tenant_id, days in tenants.values_list("id", "retention_days"):
        cutoff = now - timedelta(days=days or default_days)
        expired = Response.objects.filter(tenant_id=tenant_id, created_at__lt=cutoff).exclude(
            status__in=Response.RUNNING
        )
        while True:
            leaves = list(
                expired.filter(~Exists(Response.objects.filter(previous_response_id=OuterRef("pk")))).values_list(
                    "id", flat=True
                )[:RETENTION_BATCH]
            )
            if not leaves:
                break
            with transaction.atomic():
                Response.objects.filter(id__in=leaves).delete()  # their ResponseItem links cascade
            counts["responses"] += len(leaves)
        orphans = (
            Item.objects.filter(tenant_id=tenant_id)
            .exclude(Exists(ResponseItem.objects.filter(item_id=OuterRef("pk"))))
            .exclude(Exists(ConversationItem.objects.filter(item_id=OuterRef("pk"))))
        )
        counts["items"] += orphans.delete()[0]
        counts["files"] += files_retention_delete(tenant_id=tenant_id, cutoff=cutoff)
    counts["files"] += expired_files_delete(now=now)  # each file's own expires_after
    return counts


RETENTION_JOB = "retention"


def retention_run(*, now: datetime | None = None) -> dict[str, int]:
    """Retention as the periodic job runs it (beat's task, the embedded process, the
    `expire_responses` command): expire, then record when it ran and what it deleted."""
    now = now or timezone.now()
    counts = retention_expire(now=now)
    MaintenanceRun.objects.update_or_create(name=RETENTION_JOB, defaults={"ran_at": now, "result": counts})
    return counts


def retention_due(*, interval_seconds: float, now: datetime | None = None) -> bool:
    """Whether retention last ran longer than `interval_seconds` ago (or never): a process that
    restarts often (scripts/run) neither skips it nor repeats it at every start."""
    now = now or timezone.now()
    return not MaintenanceRun.objects.filter(
        name=RETENTION_JOB, ran_at__gt=now - timedelta(seconds=interval_seconds)
    ).exists()


def response_end_open(*, response_id: str, error: dict[str, Any]) -> bool:
    """Fail a response row left open by a request that could not go on (if there is one)."""
    return bool(
        Response.objects.filter(id=response_id, status__in=Response.RUNNING).update(
            **_ended({"status": Response.Status.FAILED, "error": error, "completed_at": timezone.now()})
        )
    )


class PurgeRefused(Exception):
    pass


def response_descendants(response_ids: list[str]) -> set[str]:
    """Every response that continues one of these, directly or further down (level by level)."""
    wanted = set(response_ids)
    found: set[str] = set()
    frontier = list(wanted)
    while frontier:
        frontier = [
            i
            for i in Response.objects.filter(previous_response_id__in=frontier).values_list("id", flat=True)
            if i not in wanted and i not in found
        ]
        found.update(frontier)
    return found


def responses_purge(*, response_ids: list[str]) -> dict[str, int]:
    """Remove responses and their content everywhere (an operator's hard purge).

    Unlike DELETE /v1/responses/{id}, which hides a response: its row and every item it used
    or produced are deleted, wherever they appear (other responses that referenced the same
    items, conversations); every response that continues one of them, directly or further
    down, is marked so that continuing it fails with previous_response_not_found (its context
    is gone). Their tokens stay in the usage API and budgets as a usage record; background
    responses' event logs are dropped. Open (queued, in_progress) responses are refused:
    cancel them first."""
    wanted = set(response_ids)
    counts = {"responses": 0, "items": 0, "broken_chains": 0}
    if not wanted:
        return counts
    with transaction.atomic():
        rows = list(Response.objects.select_for_update().filter(id__in=wanted))
        running = sorted(r.id for r in rows if r.status in (Response.Status.QUEUED, Response.Status.IN_PROGRESS))
        if running:
            raise PurgeRefused(f"{', '.join(running)} still running; cancel or wait for it first.")
        ids = [r.id for r in rows]
        descendants = response_descendants(ids)
        counts["broken_chains"] = Response.objects.filter(id__in=descendants).update(chain_purged=True)
        UsageRecord.objects.bulk_create(
            UsageRecord(
                tenant_id=r.tenant_id,
                api_key_id=r.api_key_id,
                endpoint=UsageRecord.Endpoint.PURGED_RESPONSE,
                model=r.model,
                upstream=r.upstream,
                status=200 if r.status != Response.Status.FAILED else 500,
                input_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
                # Priced as the response was: cache reads and writes have their own prices.
                cached_tokens=r.cached_tokens,
                cache_write_tokens=r.cache_write_tokens,
                cache_write_1h_tokens=r.cache_write_1h_tokens,
                latency_ms=r.latency_ms,
                created_at=r.created_at,
            )
            for r in rows
        )
        item_ids = list(ResponseItem.objects.filter(response_id__in=ids).values_list("item_id", flat=True))
        # Other responses' links to these items and their places in conversations cascade.
        counts["items"] = Item.objects.filter(id__in=set(item_ids)).delete()[1].get("responses_api.Item", 0)
        Response.objects.filter(Q(id__in=ids) | Q(previous_response_id__in=ids)).update(previous_response=None)
        counts["responses"] = Response.objects.filter(id__in=ids).delete()[1].get("responses_api.Response", 0)

    forget_now(ids)  # a background response's log holds its content too
    return counts


# -- worker-run responses: the job lifecycle (orchestration/worker.py drives it) ------


def response_job_claim(*, response_id: str, worker: str) -> Response | None:
    """Take an unclaimed run (heartbeat_at still null) for the worker process `worker`
    (WorkerProcess.id, which beats for it from now on), compare-and-swap: exactly one worker wins.
    One statement (UPDATE ... RETURNING the row), so one transaction, not an update and a read.

    heartbeat_at becomes the latest the run may end (`_claim_deadline`): no beat writes the row
    again, and a reaper of the release before, which takes heartbeat_at for the run's last beat,
    leaves it alone during a rolling deploy."""
    table = Response._meta.db_table
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in Response._meta.concrete_fields)
    running = ", ".join(["%s"] * len(Response.RUNNING))
    now = timezone.now()
    won = list(
        Response.objects.raw(
            f"UPDATE {table} SET status = %s, heartbeat_at = %s, claimed_at = %s, served_by = %s "  # names from the model
            f"WHERE id = %s AND status IN ({running}) AND on_worker AND heartbeat_at IS NULL RETURNING {columns}",
            [Response.Status.IN_PROGRESS, _claim_deadline(now), now, worker, response_id, *Response.RUNNING],
        )
    )
    return won[0] if won else None


def _claim_deadline(now: datetime) -> datetime:
    """The latest a run claimed `now` may end: the longest a worker's task lasts (its window's
    run, the drain and the stop's grace: CELERY_TASK_TIME_LIMIT)."""
    return now + timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)


def job_claim_statement(*, response_id: str, worker: str) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: `response_job_claim` as one statement for the worker's event loop
    (db.fetch_one: no thread hop, no ORM row building, JSON read with orjson); its row goes to
    `claimed_response`. The same compare-and-swap: exactly one worker wins."""
    now = timezone.now()
    params = {
        "status": Response.Status.IN_PROGRESS.value,
        "deadline": _claim_deadline(now),
        "now": now,
        "id": response_id,
        "worker": worker,
    }
    return _claim_sql(), params | {"running": [str(status) for status in Response.RUNNING]}


@functools.lru_cache(maxsize=1)
def _claim_sql() -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(
        f"{quote(str(f.column))}::text" if isinstance(f, JSONField) else quote(str(f.column))
        for f in Response._meta.concrete_fields
    )
    return (
        f"UPDATE {quote(Response._meta.db_table)} SET status = %(status)s, heartbeat_at = %(deadline)s, "
        "claimed_at = %(now)s, served_by = %(worker)s "
        "WHERE id = %(id)s AND status = ANY(%(running)s) AND on_worker AND heartbeat_at IS NULL "
        f"RETURNING {columns}"
    )


def claimed_response(record: tuple[Any, ...] | None) -> Response | None:
    """The Response a `job_claim_statement` returned (None: another worker had it, or it ended)."""
    if record is None:
        return None
    fields = Response._meta.concrete_fields
    values = [
        wirejson.loads(value) if isinstance(field, JSONField) and value is not None else value
        for field, value in zip(fields, record, strict=True)
    ]
    return Response.from_db("default", [f.attname for f in fields], values)


def worker_process_beat(*, worker: str, runs: list[str]) -> None:
    """The worker process `worker` is alive, holding `runs` (selectors.response_jobs_stale):
    one row, whatever its number of runs."""
    WorkerProcess.objects.update_or_create(id=worker, defaults={"beat_at": timezone.now(), "runs": list(runs)})


def worker_beat_statement(*, worker: str, runs: list[str]) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: `worker_process_beat` as one statement (awaited on the worker's loop, so that
    a beat never queues behind the database work of hundreds of runs in the executor)."""
    table = WorkerProcess._meta.db_table
    sql = (
        f"INSERT INTO {table} (id, started_at, beat_at, runs) VALUES (%(id)s, %(now)s, %(now)s, %(runs)s::jsonb) "
        "ON CONFLICT (id) DO UPDATE SET beat_at = EXCLUDED.beat_at, runs = EXCLUDED.runs"
    )
    return sql, {"id": worker, "now": timezone.now(), "runs": wirejson.dumps(list(runs))}


def worker_processes_forget() -> int:
    """The rows of worker processes silent past the reaper's cutoff whose runs have all ended
    (the reaper ended them first: selectors.response_jobs_stale)."""
    running = Response.objects.filter(status=Response.Status.IN_PROGRESS, on_worker=True).values("served_by")
    deleted, _ = WorkerProcess.objects.filter(beat_at__lt=selectors.stale_cutoff()).exclude(id__in=running).delete()
    return deleted


def web_process_beat(*, process_id: str, stale_after: float) -> tuple[int, list[str]]:
    """This web process is alive; the open foreground responses of processes that stopped
    beating are failed (they will never finish), and those processes forgotten. Returns how many
    responses were failed, and the processes forgotten."""
    now = timezone.now()
    WebProcess.objects.update_or_create(id=process_id, defaults={"beat_at": now})
    cutoff = now - timedelta(seconds=stale_after)
    dead = list(WebProcess.objects.filter(beat_at__lt=cutoff).values_list("id", flat=True))
    if not dead:
        return 0, []
    failed = Response.objects.filter(status=Response.Status.IN_PROGRESS, on_worker=False, served_by__in=dead).update(
        **_ended(
            {
                "status": Response.Status.FAILED,
                "error": {"code": "interrupted", "message": "The gateway process serving this response stopped."},
                "completed_at": now,
            }
        )
    )
    WebProcess.objects.filter(id__in=dead, beat_at__lt=cutoff).delete()
    return failed, dead


def response_fail_abandoned_foreground() -> int:
    """Fail foreground responses whose web process died mid-stream: nothing will ever finish them."""
    cutoff = timezone.now() - timedelta(seconds=settings.GATEWAY_FOREGROUND_MAX_SECONDS)
    return Response.objects.filter(status=Response.Status.IN_PROGRESS, on_worker=False, created_at__lt=cutoff).update(
        **_ended(
            {
                "status": Response.Status.FAILED,
                "error": {"code": "interrupted", "message": "The gateway process serving this response stopped."},
                "completed_at": timezone.now(),
            }
        )
    )
