"""`background_options` (issue 55): the completion window and continuation id of a create, over
HTTP and the WebSocket, stored with the response and never echoed in it; `2h` and `8h` runs wait
on their own Celery queues, which only a worker consuming them takes. Real Celery workers, Redis
and PostgreSQL (the in-process worker when embedded); the real `openai` SDK is the client."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest

from tests.support.harness import MODEL, CeleryWorker, Gateway, forget_redis_keys
from tests.support.stream_validator import validate_events, validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

from .test_background import poll, read_log

WINDOW = "background_options.completion_window"


def _row(response_id: str) -> Any:
    from responses_api.models import Response

    return Response.objects.get(id=response_id)


def _not_echoed(body: dict[str, Any]) -> None:
    assert not {"background_options", "completion_window", "continuation_id"} & set(body), sorted(body)


@pytest.mark.embedded
def test_window_and_continuation_id_stored_not_echoed(gateway: Gateway, scripted: ScriptedUpstream, worker) -> None:
    scripted.enqueue(MODEL, Reply(text="Done within the window."))
    raw = gateway.openai().responses.with_raw_response.create(
        model=MODEL,
        input="batch work",
        background=True,
        background_options={"completion_window": "2h", "continuation_id": "batch-7"},
    )
    assert "background_options" not in raw.headers.get("x-gateway-ignored-fields", "")
    created = raw.parse()
    assert created.status in ("queued", "in_progress")
    body = json.loads(raw.text)
    _not_echoed(body)
    validate_response_object(body)
    final = poll(gateway, created.id)
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "Done within the window."
    _not_echoed(final)
    validate_response_object(final)
    validate_sse(read_log(gateway, created.id), background=True, final_response=final)
    row = _row(created.id)
    assert (row.completion_window, row.continuation_id) == ("2h", "batch-7")
    # A create without them: today's background run, stored as `soonest`.
    scripted.enqueue(MODEL, Reply(text="plain"))
    plain = gateway.openai().responses.create(model=MODEL, input="x", background=True)
    poll(gateway, plain.id)
    assert (_row(plain.id).completion_window, _row(plain.id).continuation_id) == ("soonest", "")


@pytest.mark.embedded
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"background": True, "stream": True, "background_options": {"completion_window": "2h"}}, "stream"),
        ({"background_options": {"completion_window": "8h"}}, "background"),
        ({"background": True, "background_options": {"completion_window": "1h"}}, "expected"),
    ],
)
def test_windows_refused_naming_the_window(gateway: Gateway, scripted: ScriptedUpstream, kwargs, fragment) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.openai().responses.create(model=MODEL, input="x", **kwargs)
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == WINDOW and fragment in error["message"], error
    with pytest.raises(openai.BadRequestError) as wrong_type:
        gateway.openai().responses.create(
            model=MODEL, input="x", background=True, extra_body={"background_options": {"continuation_id": 5}}
        )
    assert isinstance(wrong_type.value.body, dict)
    assert wrong_type.value.body["param"] == "background_options.continuation_id"
    assert scripted.model_calls == []


@pytest.mark.embedded
def test_websocket_create_stores_background_options(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """On the socket every response streams and none is a background one: `soonest` (with a
    continuation id) is taken and stored; `2h` is the 400 OpenAI answers, naming the window."""
    scripted.enqueue(MODEL, Reply(text="over the socket"))

    def turn(connection: Any, **body: Any) -> list[dict[str, Any]]:
        connection.response.create(model=MODEL, **body)
        events = []
        while True:
            event = json.loads(connection.recv_bytes())
            events.append(event)
            if event["type"] in ("response.completed", "response.failed", "response.incomplete", "error"):
                return events

    with gateway.openai().responses.connect() as connection:
        events = turn(
            connection, input="hi", background_options={"completion_window": "soonest", "continuation_id": "ws-1"}
        )
        final = validate_events(events)
        (error,) = turn(connection, input="hi", background_options={"completion_window": "2h"})
    assert final["status"] == "completed"
    _not_echoed(final)
    row = _row(final["id"])
    assert (row.completion_window, row.continuation_id) == ("soonest", "ws-1")
    assert error["type"] == "error" and error["status"] == 400 and error["error"]["param"] == WINDOW


def _queue_length(name: str) -> int:
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return int(client.llen(name))
    finally:
        client.close()


def test_a_window_waits_on_its_queue_until_a_worker_takes_it(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """A worker that consumes only the default queue never takes a 2h run (nor its continuation,
    which keeps the queue); one that consumes the windows' queues runs them all."""
    from django.conf import settings

    if settings.EMBEDDED_WORKER:
        pytest.skip("queues are Celery's: the embedded worker runs every window at once")
    forget_redis_keys("responses.2h*")
    client = gateway.openai()
    default_only = CeleryWorker(queues=["celery"])
    try:
        default_only.wait_ready()
        options = {"completion_window": "2h", "continuation_id": "agent-1"}
        first = client.responses.create(model=MODEL, input="later", background=True, background_options=options)
        assert _queue_length("responses.2h") == 1
        # A soonest run created after it is taken and finishes: the worker is consuming.
        scripted.enqueue(MODEL, Reply(text="soonest first"))
        soon = client.responses.create(model=MODEL, input="now", background=True)
        assert poll(gateway, soon.id)["status"] == "completed"
        # Its follow-up (same continuation id, same window) waits on the same queue.
        follow = client.responses.create(model=MODEL, input="and then", background=True, background_options=options)
        assert _queue_length("responses.2h") == 2
        time.sleep(1.0)  # room for a wrongly routed task to be taken; none may be
        assert [client.responses.retrieve(r.id).status for r in (first, follow)] == ["queued", "queued"]
        assert _row(follow.id).continuation_id == "agent-1"
    finally:
        default_only.stop()
    scripted.enqueue(MODEL, Reply(text="first in the window"), Reply(text="second in the window"))
    windows = CeleryWorker()  # the harness's default: every queue of settings.CELERY_TASK_QUEUES
    try:
        windows.wait_ready()
        finals = [poll(gateway, r.id, timeout=30) for r in (first, follow)]
    finally:
        windows.stop()
    assert [f["status"] for f in finals] == ["completed", "completed"]
    assert {f["output"][0]["content"][0]["text"] for f in finals} == {"first in the window", "second in the window"}
    for final in finals:
        _not_echoed(final)
        validate_response_object(final)
    assert _queue_length("responses.2h") == 0


@pytest.mark.embedded
def test_the_admin_shows_the_background_options(
    gateway: Gateway, scripted: ScriptedUpstream, worker, admin_client
) -> None:
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    scripted.enqueue(MODEL, Reply(text="x"))
    created = gateway.openai().responses.create(
        model=MODEL,
        input="x",
        background=True,
        background_options={"completion_window": "8h", "continuation_id": "nightly-batch-42"},
    )
    poll(gateway, created.id)
    page = admin_client.get(reverse("admin:responses_api_response_change", args=[quote(created.id)]))
    text = page.content.decode()
    assert page.status_code == 200 and "Background options" in text
    assert "8h" in text and "nightly-batch-42" in text
    listing = admin_client.get(reverse("admin:responses_api_response_changelist"), {"q": "nightly-batch-42"})
    assert created.id[:12] in listing.content.decode()
    filtered = admin_client.get(reverse("admin:responses_api_response_changelist"), {"completion_window": "8h"})
    assert filtered.status_code == 200 and created.id[:12] in filtered.content.decode()


def test_a_window_run_is_stopped_at_its_window(gateway: Gateway, scripted: ScriptedUpstream, settings) -> None:
    """A 2h run may run up to GATEWAY_BACKGROUND_WINDOW_2H_SECONDS (here 3 s), not the default
    limit (GATEWAY_BACKGROUND_MAX_SECONDS); then the worker stops it: `failed`,
    `time_limit_exceeded`, its output so far kept."""
    settings.GATEWAY_BACKGROUND_WINDOW_2H_SECONDS = 3  # the embedded runner reads it here
    settings.GATEWAY_HEARTBEAT_SECONDS = 0.5
    scripted.enqueue(MODEL, Reply(text="word " * 600, chunk_chars=5, interval=0.05))  # about 30 s
    worker = None
    if not settings.EMBEDDED_WORKER:  # a worker process reads its own environment
        worker = CeleryWorker(beat=True, extra_env={"GATEWAY_BACKGROUND_WINDOW_2H_SECONDS": "3"})
    try:
        if worker is not None:
            worker.wait_ready()
        created = gateway.openai().responses.create(
            model=MODEL, input="long", background=True, background_options={"completion_window": "2h"}
        )
        final = poll(gateway, created.id, timeout=25)
    finally:
        if worker is not None:
            worker.stop()
    # Long before its 30 s answer was through (README.md, "Background completion windows").
    assert final["status"] == "failed" and final["error"]["code"] == "time_limit_exceeded", final
    assert "word" in json.dumps(final["output"])


def _queued(tenant_id: int, name: str, window: str, minutes: int) -> str:
    """A queued background response of `window`, created `minutes` ago (no worker takes it)."""
    from datetime import UTC, datetime, timedelta

    from responses_api.models import Response
    from responses_api.store import services

    row = services.response_row(
        response_id=f"resp_{name}",
        tenant_id=tenant_id,
        api_key_id=None,
        previous_response_id=None,
        model=MODEL,
        params={"background": True},
        created_at=datetime.now(UTC) - timedelta(minutes=minutes),
        job={"body": {}},
        completion_window=window,
    )
    Response.objects.create(**row, status=Response.Status.QUEUED)
    return row["id"]


@pytest.mark.embedded
def test_the_reaper_lets_a_window_run_wait_for_its_window(db, settings) -> None:
    """A 2h run waits behind soonest ones by design: the reaper's queue_timeout applies to it
    only after its window, to a soonest one after GATEWAY_QUEUED_MAX_SECONDS."""

    from responses_api.orchestration.windows import queued_limits
    from responses_api.store import selectors
    from tests.support.harness import make_key

    settings.GATEWAY_QUEUED_MAX_SECONDS = 600
    settings.GATEWAY_BACKGROUND_WINDOW_2H_SECONDS = 7200
    _, tenant_id = make_key()

    waited_long = _queued(tenant_id, "soonest_old", "soonest", 20)
    _queued(tenant_id, "soonest_new", "soonest", 1)
    _queued(tenant_id, "window_20min", "2h", 20)  # past GATEWAY_QUEUED_MAX_SECONDS, within its window
    window_old = _queued(tenant_id, "window_3h", "2h", 180)
    stuck = selectors.response_jobs_stuck_queued(queued_seconds=queued_limits())
    assert sorted(stuck) == sorted([waited_long, window_old])


@pytest.mark.embedded
def test_queue_metrics_are_by_window(db) -> None:
    """/metrics' queue gauges are by completion window: a 2h run queued for an hour (waiting by
    design) does not show as the soonest queue's age, which is what an operator alerts on."""

    from responses_api.api.health import BackgroundQueue
    from tests.support.harness import make_key

    _, tenant_id = make_key()
    for name, window, minutes in (("metrics_s1", "soonest", 2), ("metrics_s2", "soonest", 1), ("metrics_w", "2h", 60)):
        _queued(tenant_id, name, window, minutes)
    samples = {
        (family.name, sample.labels.get("window")): sample.value
        for family in BackgroundQueue().collect()
        for sample in family.samples
    }
    assert samples[("gateway_background_queued", "soonest")] == 2
    assert samples[("gateway_background_queued", "2h")] == 1
    assert samples[("gateway_background_queued", "8h")] == 0
    assert 115 < samples[("gateway_background_oldest_queued_seconds", "soonest")] < 300
    assert 3595 < samples[("gateway_background_oldest_queued_seconds", "2h")] < 3800
    assert samples[("gateway_background_oldest_queued_seconds", "8h")] == 0


def test_a_worker_takes_soonest_runs_before_window_runs(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """Queues, not broker priorities: with both waiting, a worker of one slot takes the soonest
    runs first though the 2h one was queued earlier (`queue_order_strategy: priority`)."""
    from django.conf import settings

    if settings.EMBEDDED_WORKER:
        pytest.skip("queues are Celery's: the embedded worker runs every window at once")
    forget_redis_keys("responses.2h*")
    client = gateway.openai()
    later = client.responses.create(
        model=MODEL, input="x", background=True, background_options={"completion_window": "2h"}
    )
    # Two: round robin would take the 2h run second, after the first soonest one.
    sooner = [client.responses.create(model=MODEL, input="x", background=True) for _ in range(2)]
    scripted.enqueue(MODEL, Reply(text="one"), Reply(text="two"), Reply(text="three"))
    proc = CeleryWorker(concurrency=1)
    try:
        proc.wait_ready()
        finals = {r.id: poll(gateway, r.id, timeout=30) for r in (later, *sooner)}
    finally:
        proc.stop()
    assert {finals[r.id]["output"][0]["content"][0]["text"] for r in sooner} == {"one", "two"}
    assert finals[later.id]["output"][0]["content"][0]["text"] == "three"


@pytest.mark.embedded
def test_a_background_runs_slot_outlasts_its_longest_wait_and_run(settings) -> None:
    """A background run holds its tenant's concurrency slot by a lease (no web process renews
    it): the lease must cover the longest its window lets it wait for a worker plus the longest
    it may run, or the tenant's limit stops counting it while it still runs. It was the
    `soonest` wait (1 h) plus the longest task for every window: 9.2 h, against up to 16 h for an
    `8h` run that waited its whole window."""
    from responses_api.orchestration.windows import (
        background_lease_seconds,
        window_queued_seconds,
        window_run_seconds,
    )

    for window in ("soonest", "2h", "8h"):
        longest = window_queued_seconds(window) + window_run_seconds(window)
        assert background_lease_seconds(window) >= longest, window
