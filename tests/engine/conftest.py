"""Every engine test runs with the target health kept in memory: no Redis, no database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from responses_api.store import router_health


@pytest.fixture(autouse=True)
def _health_in_memory(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(router_health.health_store, "instance", router_health.MemoryHealthStore())
    yield
