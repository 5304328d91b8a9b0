"""The hand-off of a response to a worker: its row stored with the job (the parsed request's
body, its input as opened, the admission's grant, sealed MCP credentials), its opening events
written to the event log, then the job enqueued (Celery, on the queue of its completion window,
or an in-process task when embedded; worker.py runs it)."""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime
from typing import Any

from celery import current_app
from celery.utils import uuid
from django.conf import settings

from ..domain import Principal
from ..mcp.credentials import seal_credentials
from ..models import Response
from ..protocol.events import EventBuilder
from ..protocol.ids import new_id
from ..protocol.request import CreateRequest
from ..protocol.response import request_params, response_object
from ..store import db, services
from ..store.eventlog import event_log
from ..store.outages import unavailable
from .limits import Grant
from .windows import window_queue
from .worker import run_claimed

# The Celery task that runs a job (tasks.run_response), sent by name: the tasks module is the
# worker's entry point, above this layer.
RUN_RESPONSE_TASK = "responses_api.run_response"


async def start_on_worker(
    principal: Principal,
    req: CreateRequest,
    body: dict[str, Any],
    grant: Grant | None = None,
) -> dict[str, Any]:
    """Store the run as a job, write its opening events to the log, enqueue it. Returns the
    response as handed over (queued, or in progress), which a create call not streamed answers."""
    response_id = new_id("resp")
    now = time.time()
    params = request_params(req)
    response = response_object(
        response_id=response_id,
        created_at=int(now),
        status="in_progress",
        model=req.model,
        previous_response_id=req.previous_response_id,
        params=params,
        output=[],
    )
    builder = EventBuilder(response)
    opening = builder.start(queued=req.background)
    job_body, credentials = seal_credentials({k: v for k, v in body.items() if k != "stream"}, principal.tenant_id)
    job: dict[str, Any] = {
        "body": job_body,
        "input_items": req.input_items,
        # background: the worker announces in_progress; a relayed foreground stream already did.
        "opening": "in_progress" if req.background else "none",
        # The worker's first event's number: the run is enqueued only once these are in the
        # log, and nothing else writes it before the run starts (assembly.run_for_job).
        "next_sequence_number": len(opening),
    }
    if grant is not None:  # the worker settles and releases it when the run ends
        job["limits"] = grant.as_job()
    if credentials is not None:  # MCP tokens never sit in the database in plain text; dropped when the run ends
        job["mcp_credentials"] = credentials
    row = services.response_row(
        response_id=response_id,
        tenant_id=principal.tenant_id,
        api_key_id=principal.key_id,
        previous_response_id=req.previous_response_id,
        model=req.model,
        params=params,
        created_at=datetime.fromtimestamp(now, UTC),
        job=job,
        completion_window=req.completion_window,
        continuation_id=req.continuation_id,
    )
    status = Response.Status.QUEUED if req.background else Response.Status.IN_PROGRESS
    if db.native_async() and not services.context_to_check(row=row, input_items=req.input_items):
        # Nothing it continues to check first: one INSERT on the event loop (autocommit:
        # committed when it returns), no thread hop, no ORM statement building.
        await db.fetch_one(*services.insert_statement(row=row, status=status))
    else:
        await db.run(services.response_create, row=row, status=status, input_items=req.input_items)
    try:
        await event_log().append_many(response_id, opening)  # one round trip
        await enqueue(response_id, req.completion_window)
    except Exception as exc:
        outage = unavailable(exc)
        if outage is None:
            raise
        # The row is committed but no worker will ever hear of it: end it now, with the
        # reason, instead of leaving it queued forever; the client gets a 503 to retry.
        builder.response.update(status="failed", error=outage.as_response_error())
        await db.run(
            services.response_finish,
            tenant_id=principal.tenant_id,
            response=builder.response,
            input_items=req.input_items,
        )
        raise outage from exc
    return copy.deepcopy(builder.response)


_embedded_tasks: set[asyncio.Task[str]] = set()  # run_claimed: the final status


async def enqueue(response_id: str, window: str = "soonest") -> None:
    """Hand a stored (committed) response to a worker: Celery (on its completion window's queue:
    windows.py; the worker enforces the window's time limit), or an in-process task when embedded, which
    starts every window's run at once (one process, no queue to wait on)."""
    if settings.EMBEDDED_WORKER:
        task = asyncio.get_running_loop().create_task(run_claimed(response_id))
        _embedded_tasks.add(task)  # keep a reference: the loop holds tasks only weakly
        task.add_done_callback(_embedded_tasks.discard)
        return
    await asyncio.to_thread(_publish, response_id, window_queue(window))


def _publish(response_id: str, queue: str | None) -> None:
    """`send_task` from the parts Celery builds it of: the task message
    (`amqp.create_task_message`), then `amqp.send_task_message` (routing, the publish retry
    policy, the publish signals) on a producer of the app's pool. The same message (headers,
    routing, retry policy; checked with `before_task_publish`) but for its reply-to queue, which
    no result backend reads, for a quarter less CPU than `send_task`, whose remaining work (a
    result object, the parent task's ids, option and configuration look-ups) a hand-off does
    not need (bench/README.md)."""
    app = current_app
    message = app.amqp.create_task_message(
        uuid(), RUN_RESPONSE_TASK, (response_id,), {}, create_sent_event=app.conf.task_send_sent_event
    )
    with app.producer_pool.acquire(block=True) as producer:
        app.amqp.send_task_message(producer, RUN_RESPONSE_TASK, message, queue=queue)
