"""/metrics with two uvicorn workers: every scrape counts both processes' requests."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.reliability.deployment import Deployment
from tests.reliability.test_metrics import value
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)


def test_two_web_processes_are_scraped_as_one() -> None:
    base = Path(tempfile.mkdtemp(prefix="gateway-metrics-"))
    multiproc = base / "prometheus"
    multiproc.mkdir()
    with ScriptedUpstream() as upstream:
        upstream.set_default("m", Reply(echo=True))
        deployed = Deployment(
            base,
            upstream.base_url,
            env={"PROMETHEUS_MULTIPROC_DIR": str(multiproc), "GATEWAY_METRICS_TOKEN": "scrape-token-0987"},
        )
        try:
            deployed.start_web(workers=2)
            n = 30
            pids = set()
            for i in range(n):
                # A new connection each time, so both workers take requests.
                with deployed.client() as client:
                    resp = client.post("/v1/responses", json={"model": "m", "input": f"q{i}"})
                    assert resp.status_code == 200
            for _ in range(6):  # whichever process answers the scrape, the totals are the same
                text = httpx.get(f"{deployed.url}/metrics", headers={"Authorization": "Bearer scrape-token-0987"}).text
                assert value(text, "gateway_requests_total", route="v1/responses", model="m", status="200") == n
            files = {p.name for p in multiproc.iterdir()}
            pids = {name.rsplit("_", 1)[-1] for name in files if name.startswith("counter_")}
            assert len(pids) == 2, files  # both workers counted
        finally:
            deployed.stop()
            shutil.rmtree(base, ignore_errors=True)
