"""Shared fixtures: the real ASGI gateway on loopback, the scripted upstream, keys and routes.

The gateway runs under uvicorn in a background thread, against the test
database (Postgres by default, SQLite in the embedded run), and clients talk
to it over real HTTP: the `openai` SDK and httpx.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support import fast_flush
from tests.support.access_log import Lines
from tests.support.harness import (
    WEATHER_SCHEMA,
    CeleryWorker,
    Gateway,
    McpServerProcess,
    ThreadedUvicorn,
    forget_redis_keys,
    make_key,
    make_route,
)
from tests.support.upstream import ScriptedUpstream

if TYPE_CHECKING:
    from tests.support.webhook import WebhookServer

# Between transactional tests the PostgreSQL tables are emptied with DELETE, not TRUNCATE
# (tests/support/fast_flush.py: ~0.2 s less per test).
fast_flush.install()


@pytest.fixture(scope="session")
def upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def scripted(upstream: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    upstream.reset()
    yield upstream
    upstream.reset()


@pytest.fixture(scope="session")
def gateway_server(django_db_setup, django_db_blocker) -> Iterator[ThreadedUvicorn]:
    server = ThreadedUvicorn()
    server.start()
    yield server
    server.stop()


def _forget_target_health() -> None:
    """Each test starts with every upstream target healthy (the router's cooldowns are shared)."""
    from responses_api.engine import failover as router
    from responses_api.store import message_chains

    router.reset()
    forget_redis_keys("gw:rt:*")
    # The Messages front door's remembered turns (store/message_chains.py) name responses of
    # tests whose rows are gone.
    forget_redis_keys("gw:mt:*")
    message_chains.chain_store.reset()


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Every in-process cache empty (ttlcache.py: one registry) and every target healthy."""
    from responses_api import ttlcache

    for clear in (ttlcache.clear_all, _forget_target_health):
        clear()
    yield
    for clear in (ttlcache.clear_all, _forget_target_health):
        clear()


@pytest.fixture
def gateway(transactional_db, gateway_server: ThreadedUvicorn, scripted: ScriptedUpstream) -> Iterator[Gateway]:
    raw, tenant_id = make_key()
    make_route(scripted.base_url)
    yield Gateway(url=gateway_server.url, key=raw, tenant_id=tenant_id)
    # The usage records of this test's last calls (written in batches) go to this test's
    # database, not into the next test's.
    from responses_api.store.usage import usage_writer

    gateway_server.call(usage_writer.flush())


@pytest.fixture
def worker(gateway: Gateway, settings) -> Iterator[CeleryWorker | None]:
    """Real Celery worker with Redis; None in embedded mode, where the web process runs the work."""
    settings.GATEWAY_HEARTBEAT_SECONDS = 0.5
    if settings.EMBEDDED_WORKER:
        yield None
        return
    proc = CeleryWorker()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    from tests.support.webhook import WebhookServer

    server = WebhookServer().start()
    yield server
    server.stop()


@pytest.fixture
def tools_env(gateway: Gateway, webhook: WebhookServer, settings, monkeypatch):
    from tool_registry.models import Tool

    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1"]
    settings.GATEWAY_PYTHON_TOOL_MODULES = frozenset({"tests.tool_registry.pytools"})
    monkeypatch.setenv("WEATHER_SIGNING_SECRET", "s3cret")
    monkeypatch.setenv("WEATHER_TOKEN", "Bearer tool-token")

    def http_tool(name: str, path: str, timeout: float = 5.0, **kw) -> Tool:
        tool = Tool(
            name=name,
            description=f"{name} tool",
            parameters=kw.pop("parameters", WEATHER_SCHEMA),
            executor="http",
            url=f"{webhook.url}{path}",
            timeout=timeout,
            **kw,
        )
        tool.full_clean()
        tool.save()
        return tool

    http_tool(
        "get_weather",
        "/weather",
        signing_secret_env="WEATHER_SIGNING_SECRET",
        headers_env={"Authorization": "WEATHER_TOKEN"},
    )
    from tests.support.webhook import Route

    webhook.routes["/weather"] = Route(handler=lambda call: {"city": call.json["city"], "forecast": "sunny"})
    return http_tool


@pytest.fixture(scope="session")
def mcp_process() -> Iterator[McpServerProcess]:
    server = McpServerProcess(token="mcp-secret")
    yield server
    server.stop()


@pytest.fixture
def mcp_server(mcp_process: McpServerProcess, settings) -> McpServerProcess:
    """The MCP server with fresh counters, reachable under the egress policies: the operator's
    (loopback, for registered servers) and the ad-hoc one (only this server's port)."""
    from tool_registry import runner

    settings.GATEWAY_EGRESS_ALLOW = ["127.0.0.1"]
    settings.GATEWAY_MCP_ADHOC_EGRESS_ALLOW = [f"127.0.0.1:{mcp_process.port}"]
    mcp_process.reset()
    runner._adhoc_listings.clear()
    return mcp_process


@pytest.fixture
def access_log() -> Iterator[Lines]:
    """The gateway's access-log lines during the test (gateway.access at INFO)."""
    handler = Lines()
    logger = logging.getLogger("gateway.access")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture(scope="session")
def local_model_url() -> Iterator[str]:
    """The bundled SmolLM2 on llama.cpp, one process for the session (tests/test_real_model.py,
    tests/test_readme_examples.py). scripts/test installs it and sets GATEWAY_REQUIRE_LOCAL_MODEL=1,
    so there a missing model fails the run; elsewhere its tests are skipped with the install hint."""
    from responses_api.ops import local_model

    if not local_model.local_model_available():
        message = f"local model not installed ({local_model.INSTALL_HINT})"
        if os.environ.get("GATEWAY_REQUIRE_LOCAL_MODEL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    port = local_model.free_port()
    # One thread: the CPU is shared with the gateway and the test client (see local_model).
    proc: subprocess.Popen[bytes] = local_model.start_local_model_process(port, wait=120, threads=1)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        local_model.stop_process(proc)


@pytest.fixture
def fresh_limits() -> Iterator[None]:
    """Rate-limit counters of this process and Redis emptied before and after the test (a
    limit's counts must not leak from one test into another)."""
    from responses_api.store import limit_counters

    def clear() -> None:
        limit_counters.reset_store()
        forget_redis_keys("gw:rl:*")

    clear()
    yield
    clear()
