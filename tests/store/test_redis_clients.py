"""store/redis_clients.py: one async client per event loop and use, one sync client per URL."""

from __future__ import annotations

import asyncio

import pytest

from responses_api.store import redis_clients

pytestmark = pytest.mark.embedded

URL = "redis://127.0.0.1:9/0"  # nothing listens there: making a client connects to nothing


def test_an_event_loop_reuses_its_client_and_another_loop_gets_its_own() -> None:
    async def clients() -> tuple[object, object, object]:
        return (
            redis_clients.async_client(URL),
            redis_clients.async_client(URL),
            redis_clients.async_client(URL, redis_clients.STREAMS),
        )

    first, again, streams = asyncio.run(clients())
    other, _, _ = asyncio.run(clients())
    assert first is again and streams is not first  # one per use: their timeouts differ
    assert other is not first  # a client belongs to the loop it was made on


def test_threads_share_one_sync_client_per_url() -> None:
    assert redis_clients.sync_client(URL) is redis_clients.sync_client(URL)
    with pytest.raises(Exception, match="Connection refused|Error"):
        redis_clients.ping(URL)
