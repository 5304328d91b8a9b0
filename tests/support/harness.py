"""The test harness's helpers: the gateway under test (uvicorn in a thread) and its client
handle, keys and routes in the test database, a real Celery worker process, the MCP test
server process, and small builders. The fixtures that use them are in tests/conftest.py."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from responses_api.ops.processes import stop_process, wait_until

MODEL = "test-model"

T = TypeVar("T")


class ThreadedUvicorn:
    def __init__(self) -> None:
        import uvicorn

        from project.asgi import application

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="gateway-under-test", daemon=True)

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run `coroutine` on the gateway's own event loop (where its tasks and pools live)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway under test did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def forget_redis_keys(pattern: str) -> None:
    """Delete the test Redis's keys matching `pattern` (nothing in the embedded mode)."""
    from django.conf import settings

    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = list(client.scan_iter(pattern))
        if keys:
            client.delete(*keys)
        client.close()


@dataclass
class Gateway:
    url: str
    key: str
    tenant_id: int

    def http(self, key: str | None = None, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key or self.key}"}, timeout=timeout)

    def openai(self, key: str | None = None, **kwargs):
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key or self.key, max_retries=0, timeout=30.0, **kwargs)


def make_key(tenant: str = "acme", name: str = "test", **kwargs) -> tuple[str, int]:
    from responses_api.store.services import api_key_create

    key, raw = api_key_create(tenant_name=tenant, name=name, **kwargs)
    return raw, key.tenant_id


def queued_background_response(gateway: Gateway, text: str = "x") -> str:
    """A background response stored `queued`, as a create leaves it, whose task no worker has
    (a test then runs or cancels it itself); its id."""
    from datetime import UTC, datetime

    from responses_api.protocol.ids import new_id
    from responses_api.protocol.request import parse_create_request
    from responses_api.protocol.response import request_params
    from responses_api.store import services

    body = {"model": MODEL, "input": text, "background": True}
    req = parse_create_request(body)
    response_id = new_id("resp")
    services.response_create(
        row=services.response_row(
            response_id=response_id,
            tenant_id=gateway.tenant_id,
            api_key_id=None,
            previous_response_id=None,
            model=MODEL,
            params=request_params(req),
            created_at=datetime.now(UTC),
            job={"body": body, "input_items": req.input_items, "opening": "in_progress"},
        ),
        status="queued",
        input_items=req.input_items,
    )
    return response_id


def run_claimed_here(response_id: str) -> str:
    """`worker.run_claimed` on an event loop of the test's own, as a worker would run it: its
    outcome. The loop's async database pool (the claim and the stored end use it) is closed
    before the loop: left open, its sessions outlive the test and its tasks may never end under
    asyncio.run's cancellation (a full run hung there)."""
    from responses_api.orchestration import worker as background
    from responses_api.store import db

    async def run_then_close() -> str:
        try:
            return await background.run_claimed(response_id)
        finally:
            await db.close_pool()

    return asyncio.run(run_then_close())


def make_route(base_url: str, name: str = MODEL, upstream_model: str | None = None, **provider_kwargs) -> None:
    from responses_api.models import ModelRoute, Provider, RouteTarget

    provider, _ = Provider.objects.get_or_create(
        name=provider_kwargs.pop("provider_name", "scripted"),
        defaults={"base_url": base_url, **provider_kwargs},
    )
    route, _ = ModelRoute.objects.get_or_create(name=name)
    RouteTarget.objects.create(route=route, provider=provider, upstream_model=upstream_model or name)


class CeleryWorker:
    """A real `celery worker` process (optionally with embedded beat) on the test database."""

    def __init__(
        self,
        *,
        beat: bool = False,
        concurrency: int = 2,
        extra_env: dict[str, str] | None = None,
        queues: list[str] | None = None,
    ) -> None:
        """`queues`: the Celery queues it takes (-Q); by default every one in
        settings.CELERY_TASK_QUEUES (the default queue, then the completion windows')."""
        import os
        import subprocess
        import sys

        from django.db import connection

        db = connection.settings_dict
        env = dict(os.environ)
        env.update(
            {
                "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
                "GATEWAY_HEARTBEAT_SECONDS": "0.5",
                "GATEWAY_REAPER_INTERVAL_SECONDS": "1",
                "GATEWAY_EGRESS_ALLOW": "127.0.0.1",
                "GATEWAY_MCP_ADHOC_EGRESS_ALLOW": "127.0.0.1",  # the tests' own loopback MCP servers
                "GATEWAY_PYTHON_TOOL_MODULES": "tests.tool_registry.pytools",
                "GATEWAY_CACHE_SECONDS": "0",
                "LOG_LEVEL": "WARNING",
                **(extra_env or {}),
            }
        )
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            "--loglevel=WARNING",
            f"--concurrency={concurrency}",
            "--without-gossip",
            "--without-mingle",
            "--prefetch-multiplier=1",
        ]
        if queues is not None:
            cmd += ["-Q", ",".join(queues)]
        if beat:
            cmd += ["--beat", "--schedule", f"/tmp/celerybeat-{os.getpid()}-{id(self)}"]
        self.process = subprocess.Popen(cmd, env=env, start_new_session=True)

    def wait_ready(self, timeout: float = 30.0) -> None:
        from project.celery import app

        wait_until(self.process, lambda: bool(app.control.ping(timeout=0.5)), timeout=timeout, what="the celery worker")

    def kill(self) -> None:
        """As a crash would: SIGKILL to the main process and the pool it forked."""
        stop_process(self.process, sig=signal.SIGKILL, group=True)

    def stop(self) -> None:
        # Warm shutdown: SIGTERM to the main process, which stops its children; the pool too
        # is killed if that takes longer than 10 s.
        stop_process(self.process, timeout=10, kill_group=True)


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def call(name: str, args: dict, call_id: str) -> dict:
    """A scripted upstream tool call."""
    import json

    return {"id": call_id, "name": name, "arguments": json.dumps(args)}


class McpServerProcess:
    """tests/support/mcp_server.py in a subprocess: a real streamable-HTTP MCP server (with
    `sse`, one that speaks only the older HTTP+SSE transport, at /sse)."""

    def __init__(self, token: str = "", *, sse: bool = False) -> None:
        import socket
        import subprocess
        import sys

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.token = token
        self.url = f"http://127.0.0.1:{self.port}/{'sse' if sse else 'mcp'}"
        args = [sys.executable, "-m", "tests.support.mcp_server", str(self.port)] + ([token] if token else [])
        args += ["--sse"] if sse else []
        self.process = subprocess.Popen(args, cwd=str(Path(__file__).resolve().parents[2]))

        def answers() -> bool:
            return httpx.get(f"http://127.0.0.1:{self.port}/counts", timeout=1).status_code == 200

        try:
            wait_until(self.process, answers, timeout=20, what="the MCP test server", retry_on=(httpx.TransportError,))
        except BaseException:
            self.stop()
            raise

    def counts(self) -> dict[str, int]:
        return httpx.get(f"http://127.0.0.1:{self.port}/counts", timeout=5).json()

    def reset(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/counts/reset", timeout=5).raise_for_status()

    def stop(self) -> None:
        stop_process(self.process, timeout=10)
