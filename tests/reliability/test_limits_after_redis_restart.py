"""Rate limits right after Redis comes back (a real redis-server restarted under a uvicorn
process): every pooled connection that predates the restart fails its first command, and that
must not count as "Redis is down": no request over the limit is let through (fail-open) and
none is refused with a 503 (fail-closed) once Redis answers PONG."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.deployment import Deployment
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)

RPM = 3
BURST = 12


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    base = Path(tempfile.mkdtemp(prefix="gateway-limits-restart-"))
    with ScriptedUpstream() as upstream:
        upstream.set_default("m", Reply(text="ok"))
        deployed = Deployment(base, upstream.base_url)
        try:
            deployed.rows("UPDATE responses_api_apikey SET requests_per_minute = %s RETURNING id", RPM)
            yield deployed
        finally:
            deployed.stop()
            shutil.rmtree(base, ignore_errors=True)


def _burst(deployment: Deployment) -> list[int]:
    """BURST creates at once, a connection each (their admissions overlap, so the process's
    Redis pool holds several connections)."""
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        with deployment.client() as client:
            status = client.post("/v1/responses", json={"model": "m", "input": "hi"}).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def _web(deployment: Deployment, **env: str) -> subprocess.Popen[bytes]:
    deployment.env.update(env)
    (deployment.base_dir / "web.log").unlink(missing_ok=True)
    return deployment.start_web(workers=1)


def _stop(deployment: Deployment, proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    deployment.processes.remove(proc)


def _restart_redis(deployment: Deployment) -> None:
    deployment.redis.halt()
    deployment.redis.resume()  # returns once redis-server answers PONG


def test_no_admission_over_the_limit_after_redis_answers_again(deployment: Deployment) -> None:
    web = _web(deployment, GATEWAY_RATE_LIMIT_FAIL_OPEN="1")
    try:
        assert 200 in _burst(deployment)  # the pool fills with connections to this Redis
        _restart_redis(deployment)
        # The restarted Redis kept nothing (no persistence): the bucket starts full again.
        started = time.monotonic()
        statuses = _burst(deployment)
        elapsed = time.monotonic() - started
        assert set(statuses) <= {200, 429}, statuses
        refill = int(elapsed * RPM / 60)
        assert statuses.count(200) <= RPM + refill, (statuses, deployment.log("web.log"))
        assert "rate limits not enforced" not in deployment.log("web.log")
    finally:
        _stop(deployment, web)


def test_no_503_after_redis_answers_again_when_limits_fail_closed(deployment: Deployment) -> None:
    web = _web(deployment, GATEWAY_RATE_LIMIT_FAIL_OPEN="0")
    try:
        _burst(deployment)
        assert httpx.get(f"{deployment.url}/readyz", timeout=10).status_code == 200
        _restart_redis(deployment)
        statuses = _burst(deployment)
        assert 503 not in statuses, (statuses, deployment.log("web.log"))
        assert set(statuses) <= {200, 429}, statuses
        # /readyz's own (sync) Redis connection predates the restart too.
        assert httpx.get(f"{deployment.url}/readyz", timeout=10).status_code == 200
    finally:
        _stop(deployment, web)
