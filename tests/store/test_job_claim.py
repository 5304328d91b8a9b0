"""A worker's claim of a stored run (PostgreSQL: one statement on the worker's event loop,
services.job_claim_statement): exactly one of several claims at once wins, and what it returns
is the row as the ORM reads it after the claim."""

from __future__ import annotations

import asyncio

import pytest
from django.db import connections

from tests.support.harness import Gateway, queued_background_response


def test_of_claims_at_once_one_wins_with_the_row_as_stored(gateway: Gateway, settings) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("the one-statement claim is PostgreSQL's (SQLite claims through the ORM)")
    from responses_api.models import Response
    from responses_api.store import db, services

    rid = queued_background_response(gateway, "claim me")
    Response.objects.filter(id=rid).update(metadata={"team": "core"}, params={"temperature": 0.5})

    async def claim() -> Response | None:
        return services.claimed_response(
            await db.fetch_one(*services.job_claim_statement(response_id=rid, worker="host:1:ab"))
        )

    async def race() -> list[Response | None]:
        try:
            return list(await asyncio.gather(*(claim() for _ in range(5))))
        finally:
            await db.close_pool()  # this loop's async pool

    won = [row for row in asyncio.run(race()) if row is not None]
    assert len(won) == 1
    stored = Response.objects.get(id=rid)
    assert stored.status == "in_progress" and stored.served_by == "host:1:ab"
    assert stored.claimed_at is not None and stored.heartbeat_at is not None
    # heartbeat_at: the latest the run may end, which a reaper of the release before reads as its last beat
    assert (stored.heartbeat_at - stored.claimed_at).total_seconds() == settings.CELERY_TASK_TIME_LIMIT
    for field in Response._meta.concrete_fields:
        assert getattr(won[0], field.attname) == getattr(stored, field.attname), field.attname
    assert won[0].job is not None and won[0].job["body"]["input"] == "claim me"
    assert won[0].metadata == {"team": "core"} and won[0].params == {"temperature": 0.5}
    assert asyncio.run(_claim_then_close(rid)) is None  # claimed: nobody claims it again


async def _claim_then_close(rid: str) -> object:
    from responses_api.store import db, services

    try:
        return services.claimed_response(
            await db.fetch_one(*services.job_claim_statement(response_id=rid, worker="host:1:ab"))
        )
    finally:
        await db.close_pool()
