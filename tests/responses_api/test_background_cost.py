"""What a background response costs (issue 55, item 2): polls of a running response read its
running view in Redis, not PostgreSQL; the stored row is what a poll returns once it ended.
Real PostgreSQL, Redis and a Celery worker process (not embedded)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_response_object
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.skipif("os.environ.get('GATEWAY_TEST_DB') == 'sqlite'", reason="needs Redis and Celery")


class _Statements:
    """Every SQL statement this process sends (any thread, Django's cursors and the native
    async pool), with its parameters: a poll's queries name its response id."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def naming(self, response_id: str) -> list[str]:
        with self.lock:
            return [sql for sql, params in self.seen if response_id in repr(params) or response_id in sql]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Statements]:
    from django.db.backends import utils

    from responses_api.store import db

    seen = _Statements()
    plain = utils.CursorWrapper._execute  # type: ignore[attr-defined]  # Django's private execute, every cursor's path
    native = db.fetch_one

    def execute(self, sql, params, *ignored):
        with seen.lock:
            seen.seen.append((sql, params))
        return plain(self, sql, params, *ignored)

    async def fetch_one(sql: str, params: dict[str, Any]):
        with seen.lock:
            seen.seen.append((sql, params))
        return await native(sql, params)

    monkeypatch.setattr(utils.CursorWrapper, "_execute", execute)
    monkeypatch.setattr(db, "fetch_one", fetch_one)
    yield seen


def _get(gateway: Gateway, response_id: str) -> dict[str, Any]:
    with gateway.http() as http:
        r = http.get(f"/v1/responses/{response_id}")
    assert r.status_code == 200, r.text
    return r.json()


def test_a_poll_of_a_running_response_reads_no_database(
    gateway: Gateway, scripted: ScriptedUpstream, worker, statements: _Statements
) -> None:
    text = "tick " * 40  # 40 chunks, one every 0.1 s: a 4-second answer
    scripted.enqueue(MODEL, Reply(text=text, chunk_chars=5, interval=0.1))
    created = gateway.openai().responses.create(model=MODEL, input="slow", background=True)
    deadline = time.monotonic() + 20
    while True:
        body = _get(gateway, created.id)
        if body["status"] == "in_progress" and body["output"] and body["output"][0]["content"]:
            break
        assert body["status"] in ("queued", "in_progress") and time.monotonic() < deadline, body["status"]
        time.sleep(0.05)
    before = len(statements.naming(created.id))
    polls = [_get(gateway, created.id) for _ in range(5)]
    running = [p for p in polls if p["status"] == "in_progress"]
    assert running, "the run ended before the polls"
    assert statements.naming(created.id)[before:] == [], "a poll of a running response queried the database"
    for body in running:  # the Response object, in progress, with its output so far
        validate_response_object(body)
        assert body["id"] == created.id and body["background"] is True and body["completed_at"] is None
        so_far = body["output"][0]["content"][0]["text"]
        assert so_far and text.startswith(so_far)
    # Another tenant's key sees nothing (the database answers it: a 404).
    from tests.support.harness import make_key

    other_key, _ = make_key(tenant="other-tenant")
    with gateway.http(key=other_key) as http:
        assert http.get(f"/v1/responses/{created.id}").status_code == 404

    deadline = time.monotonic() + 30
    while (final := _get(gateway, created.id))["status"] == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # Ended: the stored row is what a poll returns (the running view is gone).
    import asyncio

    from responses_api.store import selectors
    from responses_api.store.eventlog import event_log

    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == text
    assert final == selectors.response_retrieve(tenant_id=gateway.tenant_id, response_id=created.id)
    assert asyncio.run(event_log().running_view(created.id)) is None
    assert statements.naming(created.id)[before:], "an ended response is read from the database"


def test_a_deleted_running_response_is_not_polled_from_its_view(
    gateway: Gateway, scripted: ScriptedUpstream, worker
) -> None:
    scripted.enqueue(MODEL, Reply(text="slow " * 40, chunk_chars=5, interval=0.1))
    created = gateway.openai().responses.create(model=MODEL, input="slow", background=True)
    deadline = time.monotonic() + 20
    while not _get(gateway, created.id)["output"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with gateway.http() as http:
        assert http.delete(f"/v1/responses/{created.id}").status_code == 200
        time.sleep(0.3)  # the worker writes its view again meanwhile
        assert http.get(f"/v1/responses/{created.id}").status_code == 404


def test_a_worker_killed_mid_run_keeps_everything_a_reader_saw(
    gateway: Gateway, scripted: ScriptedUpstream, settings
) -> None:
    """Batched writes and a kill -9: every event a live reader got is in the log, numbered as it
    got it; the reaper's end follows them, and the stored output holds the text the reader saw."""
    import json

    from tests.support.harness import CeleryWorker

    scripted.enqueue(MODEL, Reply(text="abcde " * 100, chunk_chars=3, interval=0.05))
    doomed = CeleryWorker()
    doomed.wait_ready()
    survivor = None
    try:
        created = gateway.openai().responses.create(model=MODEL, input="go", background=True)
        seen: list[dict[str, Any]] = []
        with (
            gateway.http(timeout=60) as http,
            http.stream("GET", f"/v1/responses/{created.id}", params={"stream": "true"}) as r,
        ):
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                seen.append(json.loads(line[6:]))
                if sum(e["type"] == "response.output_text.delta" for e in seen) == 20 and survivor is None:
                    doomed.kill()  # SIGKILL mid-run; this reader follows the log on
                    survivor = CeleryWorker(beat=True)
                if seen[-1]["type"] in ("response.completed", "response.failed", "response.incomplete"):
                    break
        assert survivor is not None, "the run ended before the kill"
        assert seen[-1]["type"] == "response.failed"
        assert seen[-1]["response"]["error"]["code"] == "worker_lost"
        assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
        from tests.responses_api.test_background import read_log
        from tests.support.stream_validator import parse_sse

        assert parse_sse(read_log(gateway, created.id)) == seen  # nothing it saw was lost, nothing changed
        text = "".join(e["delta"] for e in seen if e["type"] == "response.output_text.delta")
        stored = _get(gateway, created.id)
        assert stored["status"] == "failed" and stored["output"][0]["content"][0]["text"] == text
    finally:
        if survivor is not None:
            survivor.stop()
        doomed.kill()


def test_the_retrieve_of_an_ended_background_response_is_one_statement(
    gateway: Gateway, scripted: ScriptedUpstream, worker, statements: _Statements
) -> None:
    """The final retrieve of a background response (what bench/background.py counts beside the
    run): its row and its output items in one SQL statement, the same Response object the ORM
    reads build; a key of another tenant still gets a 404."""
    from responses_api.store import selectors
    from tests.support.harness import make_key

    scripted.enqueue(MODEL, Reply(text="one two three four", chunk_chars=4))
    created = gateway.openai().responses.create(model=MODEL, input="go", background=True)
    deadline = time.monotonic() + 30
    while _get(gateway, created.id)["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    before = len(statements.naming(created.id))
    final = _get(gateway, created.id)
    assert len(statements.naming(created.id)[before:]) == 1, statements.naming(created.id)[before:]
    validate_response_object(final)
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "one two three four"
    assert final["usage"]["total_tokens"] > 0 and final["completed_at"] is not None
    assert final == selectors.response_retrieve(tenant_id=gateway.tenant_id, response_id=created.id)
    other_key, _ = make_key(tenant="other-tenant-retrieve")
    with gateway.http(key=other_key) as http:
        r = http.get(f"/v1/responses/{created.id}")
    assert r.status_code == 404 and r.json()["error"]["param"] == "response_id"


def _exists_calls(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_exists", {}).get("calls", 0))


def test_a_running_worker_run_does_not_probe_for_cancels(
    gateway: Gateway, scripted: ScriptedUpstream, worker, settings
) -> None:
    """Cancels reach a worker's runs on one subscription per process (pub/sub), not by probing
    each run's cancel key with every batch and tick (an EXISTS per event was a quarter of a
    run's Redis commands); the keys are swept once per beat, for all runs at once. A cancel
    still stops the run itself (the upstream request is closed), not only its row."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    scripted.enqueue(MODEL, Reply(text="tick " * 200, chunk_chars=5, interval=0.05))  # 10 s
    created = gateway.openai().responses.create(model=MODEL, input="slow", background=True)
    deadline = time.monotonic() + 20
    while not ((body := _get(gateway, created.id))["output"] and body["output"][0]["content"]):
        assert body["status"] in ("queued", "in_progress") and time.monotonic() < deadline, body["status"]
        time.sleep(0.05)
    before, started = _exists_calls(client), time.monotonic()
    time.sleep(2.0)  # about 40 batches of events
    probes, window = _exists_calls(client) - before, time.monotonic() - started
    beats = window / settings.GATEWAY_HEARTBEAT_SECONDS
    assert _get(gateway, created.id)["status"] == "in_progress", "the run ended during the window"
    assert probes <= beats + 2, f"{probes} EXISTS in {window:.1f} s ({beats:.0f} beats)"
    with gateway.http() as http:
        cancelled = http.post(f"/v1/responses/{created.id}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert scripted.wait_aborted(1, timeout=5), "the worker's run must stop (its upstream request closed)"
