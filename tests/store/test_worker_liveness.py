"""A worker process beats once for all its runs (WorkerProcess: its row lists the runs it holds),
and the reaper's rule reads it (selectors.response_jobs_stale): a run lives while the process
that claimed it beats and holds it; a run it no longer holds, of a process silent for 4 beats,
or past the latest it could end, is stale; a run claimed by a worker of the release before
keeps its own heartbeat_at, and a reaper of that release leaves the new claims alone. The beat
writes no run's row. On the test database of each kind (the ORM paths), and on PostgreSQL the
beat's one statement."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from tests.support.harness import Gateway, queued_background_response

pytestmark = pytest.mark.embedded


@pytest.fixture(autouse=True)
def _no_reaper_in_this_process(settings) -> None:
    """The session's in-process gateway reaps every GATEWAY_REAPER_INTERVAL_SECONDS (its
    liveness beat reads the setting at each beat): these tests make stale runs on purpose and
    read the rule themselves, so it waits out the test (and a sweep in flight ends first)."""
    settings.GATEWAY_REAPER_INTERVAL_SECONDS = 10**9
    time.sleep(0.3)


def _claimed(gateway: Gateway, worker: str, *, claimed_ago: float | None) -> str:
    from responses_api.models import Response
    from responses_api.store import services

    rid = queued_background_response(gateway, "run")
    assert services.response_job_claim(response_id=rid, worker=worker) is not None
    if claimed_ago is not None:
        Response.objects.filter(id=rid).update(claimed_at=timezone.now() - timedelta(seconds=claimed_ago))
    return rid


def _stale(rid: str) -> bool:
    from responses_api.store import selectors

    one = selectors.response_job_is_stale(response_id=rid)
    assert one == (rid in selectors.response_jobs_stale())
    return one


def test_a_run_lives_while_the_process_that_claimed_it_beats_and_holds_it(gateway: Gateway, settings) -> None:
    from responses_api.models import Response, WorkerProcess
    from responses_api.store import selectors, services

    beat = settings.GATEWAY_HEARTBEAT_SECONDS
    rid = _claimed(gateway, "host:1:aa", claimed_ago=10 * beat)
    other = _claimed(gateway, "host:2:bb", claimed_ago=10 * beat)
    claimed = Response.objects.get(id=rid)
    assert _stale(rid) and _stale(other)  # neither process ever beat

    services.worker_process_beat(worker="host:1:aa", runs=[rid])
    assert not _stale(rid) and _stale(other)  # one process's beat is not another's
    services.worker_process_beat(worker="host:1:aa", runs=[rid])
    row = Response.objects.get(id=rid)
    assert (row.heartbeat_at, row.claimed_at) == (claimed.heartbeat_at, claimed.claimed_at)  # no run's row is written
    assert WorkerProcess.objects.get(id="host:1:aa").runs == [rid]
    # /metrics' freshest sign of life of the running runs is the process's beat, not a claim's deadline
    assert selectors.background_queue()[1]["beat"] == WorkerProcess.objects.get(id="host:1:aa").beat_at

    services.worker_process_beat(worker="host:1:aa", runs=[])  # its end could not be stored
    assert _stale(rid)

    services.worker_process_beat(worker="host:1:aa", runs=[rid])
    WorkerProcess.objects.filter(id="host:1:aa").update(beat_at=timezone.now() - timedelta(seconds=4 * beat + 1))
    assert _stale(rid)  # silent for 4 beats: presumed dead

    services.worker_process_beat(worker="host:1:aa", runs=[rid])
    assert not _stale(rid)
    Response.objects.filter(id=rid).update(heartbeat_at=timezone.now() - timedelta(seconds=4 * beat + 1))
    assert _stale(rid)  # past the latest it could end, held or not


def test_a_claim_is_left_alone_by_a_reaper_of_the_release_before(gateway: Gateway, settings) -> None:
    from responses_api.models import Response

    rid = _claimed(gateway, "host:8:hh", claimed_ago=None)
    row = Response.objects.get(id=rid)
    assert row.served_by == "host:8:hh"
    # That release's rule: a run whose heartbeat_at is 4 beats old is dead. A claim's is the
    # latest the run may end, so during a rolling deploy no such reaper fails a new worker's run.
    assert row.heartbeat_at is not None and row.claimed_at is not None
    assert (row.heartbeat_at - row.claimed_at).total_seconds() == settings.CELERY_TASK_TIME_LIMIT
    assert row.heartbeat_at > timezone.now() + timedelta(seconds=4 * settings.GATEWAY_HEARTBEAT_SECONDS)


def test_a_run_just_claimed_waits_for_its_process_first_beat(gateway: Gateway, settings) -> None:
    rid = _claimed(gateway, "host:3:cc", claimed_ago=settings.GATEWAY_HEARTBEAT_SECONDS)
    assert not _stale(rid)


def test_a_run_claimed_by_a_release_before_keeps_its_own_heartbeat(gateway: Gateway, settings) -> None:
    from responses_api.models import Response

    rid = _claimed(gateway, "host:9:ii", claimed_ago=0)
    # As that release claimed and beat it: no served_by nor claimed_at, heartbeat_at its last beat.
    recent = timezone.now() - timedelta(seconds=settings.GATEWAY_HEARTBEAT_SECONDS)
    Response.objects.filter(id=rid).update(served_by="", claimed_at=None, heartbeat_at=recent)
    assert not _stale(rid)
    Response.objects.filter(id=rid).update(heartbeat_at=timezone.now() - timedelta(seconds=20 * 60))
    assert _stale(rid)


def test_the_reaper_forgets_silent_processes_once_their_runs_ended(gateway: Gateway, settings) -> None:
    from responses_api.models import Response, WorkerProcess
    from responses_api.store import services

    silent = timezone.now() - timedelta(seconds=4 * settings.GATEWAY_HEARTBEAT_SECONDS + 1)
    rid = _claimed(gateway, "host:4:dd", claimed_ago=0)
    for worker in ("host:4:dd", "host:5:ee", "host:6:ff"):
        services.worker_process_beat(worker=worker, runs=[rid] if worker == "host:4:dd" else [])
    WorkerProcess.objects.filter(id__in=["host:4:dd", "host:5:ee"]).update(beat_at=silent)

    assert services.worker_processes_forget() == 1  # host:5, silent with no run left
    assert set(WorkerProcess.objects.values_list("id", flat=True)) >= {"host:4:dd", "host:6:ff"}
    Response.objects.filter(id=rid).update(status="failed")  # the reaper ended its run
    assert services.worker_processes_forget() == 1
    assert not WorkerProcess.objects.filter(id="host:4:dd").exists()


def test_the_beat_is_one_statement_on_postgresql(gateway: Gateway) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("the one-statement beat is PostgreSQL's (SQLite beats through the ORM)")
    from responses_api.models import WorkerProcess
    from responses_api.store import db, services

    async def beat(runs: list[str]) -> None:
        try:
            await db.fetch_one(*services.worker_beat_statement(worker="host:7:gg", runs=runs))
        finally:
            await db.close_pool()  # this loop's async pool

    asyncio.run(beat(["resp_a", "resp_b"]))
    first = WorkerProcess.objects.get(id="host:7:gg")
    time.sleep(0.01)
    asyncio.run(beat(["resp_b"]))
    second = WorkerProcess.objects.get(id="host:7:gg")
    assert first.runs == ["resp_a", "resp_b"] and second.runs == ["resp_b"]
    assert second.beat_at > first.beat_at and second.started_at == first.started_at


def test_a_task_delivered_again_to_the_process_running_it_leaves_the_run_alone(gateway: Gateway) -> None:
    """The broker's redelivery of a running response's task to the very process running it: the
    claim fails and the call reaps nothing; the run stays registered (beaten for, cancellable)."""
    from responses_api.orchestration import worker
    from responses_api.process import process_id
    from responses_api.store import db, services

    rid = _claimed(gateway, process_id(), claimed_ago=None)

    async def deliver_again() -> tuple[str, bool, bool]:
        held = worker.running()
        held.claimed(rid)  # as the first delivery's run_claimed left it
        held.runs[rid] = object()  # type: ignore[assignment]  # its ResponseRun, as far as this goes
        try:
            outcome = await worker.run_claimed(rid)
            return outcome, rid in held.beating, rid in held.runs
        finally:
            held.remove(rid)
            await db.close_pool()

    assert asyncio.run(deliver_again()) == ("not-claimed", True, True)
    assert services.response_job_claim(response_id=rid, worker="host:10:jj") is None
