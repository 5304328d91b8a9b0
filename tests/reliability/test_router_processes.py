"""The router across two uvicorn worker processes sharing Redis: a target that fails is cooled
down for both (after the one-second health cache), and both take it back once it recovers."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.reliability.deployment import Deployment
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)


def hits(upstream: ScriptedUpstream, model: str) -> int:
    return sum(1 for r in upstream.requests if r.path == "/v1/chat/completions" and r.body.get("model") == model)


COOLDOWN_SECONDS = 30


def test_a_failing_target_is_cooled_for_every_process_and_recovers() -> None:
    base = Path(tempfile.mkdtemp(prefix="gateway-router-"))
    with ScriptedUpstream() as upstream:
        config = {
            "providers": [{"name": "pa", "base_url": upstream.base_url}, {"name": "pb", "base_url": upstream.base_url}],
            "models": [
                {
                    "name": "m",
                    "targets": [
                        {"provider": "pa", "model": "a", "weight": 1},
                        {"provider": "pb", "model": "b", "weight": 1},
                    ],
                }
            ],
        }
        deployment = Deployment(
            base,
            upstream.base_url,
            config=config,
            env={
                "GATEWAY_ROUTER_COOLDOWN_FAILURES": "3",
                # Long enough that the second burst below ends inside it on a loaded machine
                # (at load 10 on two cores, 40 requests on new connections took over 4 s).
                "GATEWAY_ROUTER_COOLDOWN_SECONDS": str(COOLDOWN_SECONDS),
                "GATEWAY_ROUTER_MAX_RETRIES": "0",
            },
        )
        try:
            deployment.start_web(workers=2)
            upstream.set_default("a", Reply(status=503))
            upstream.set_default("b", Reply(text="from b"))

            def burst(n: int) -> list[int]:
                statuses = []
                for i in range(n):
                    with deployment.client() as client:  # new connections: both processes serve
                        statuses.append(client.post("/v1/responses", json={"model": "m", "input": f"q{i}"}).status_code)
                return statuses

            assert burst(20) == [200] * 20  # 'a' failed, 'b' answered every time
            cooled_by = time.monotonic()  # the threshold was crossed during that burst
            failed_on_a = hits(upstream, "a")
            # At most the threshold, plus one per process that had not yet seen the cooldown in
            # its one-second health cache.
            assert 3 <= failed_on_a <= 3 + 2, failed_on_a
            time.sleep(1.1)
            assert burst(20) == [200] * 20
            assert time.monotonic() - cooled_by < COOLDOWN_SECONDS, "the burst outlasted the cooldown"
            assert hits(upstream, "a") == failed_on_a  # cooled for both processes: not asked again

            upstream.set_default("a", Reply(text="from a"))  # 'a' recovers
            time.sleep(max(0.0, cooled_by + COOLDOWN_SECONDS + 0.2 - time.monotonic()))
            before = hits(upstream, "a")
            assert burst(30) == [200] * 30
            assert hits(upstream, "a") - before >= 5  # weighted 1:1 again, in both processes
        finally:
            deployment.stop()
            shutil.rmtree(base, ignore_errors=True)
