"""A gateway deployed as an operator runs it, for outage tests: its own PostgreSQL and Redis
(which a test stops and starts again), uvicorn web processes and a Celery worker with beat,
all real processes, against a scripted upstream on loopback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.servers import PostgresServer, RedisServer, _free_port, start_postgres, start_redis

ROOT = Path(__file__).resolve().parents[2]
SECRET_KEY = "outage-test-secret-key-not-for-production-0123456789abcdefghij"


class Deployment:
    def __init__(
        self,
        base_dir: Path,
        upstream_url: str,
        *,
        model: str = "m",
        env: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.model = model
        self.postgres: PostgresServer = start_postgres(base_dir / "pg")
        self.redis: RedisServer = start_redis(base_dir)
        gateway_config, config_file = config, base_dir / "gateway.json"
        config_file.write_text(
            json.dumps(
                gateway_config
                or {
                    "providers": [{"name": "scripted", "base_url": upstream_url}],
                    "models": [{"name": model, "targets": [{"provider": "scripted", "model": model}]}],
                }
            )
        )
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "CELERY_"))},
            "DATABASE_URL": self.postgres.url,
            "REDIS_URL": self.redis.url,
            "SECRET_KEY": SECRET_KEY,
            "DEBUG": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "GATEWAY_CONFIG": str(config_file),
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "GATEWAY_HEARTBEAT_SECONDS": "0.5",
            "GATEWAY_REAPER_INTERVAL_SECONDS": "1",
            **(env or {}),
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        self.manage("migrate", "--no-input")
        self.manage("sync_gateway_config")
        self.key = self.manage("create_api_key", "outage").strip().splitlines()[-1]
        self.port = _free_port()

    def manage(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.base_dir / log_name, "ab")  # noqa: SIM115 - the process's lifetime
        proc = subprocess.Popen(
            args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(proc)
        return proc

    def start_web(self, workers: int = 1, port: int | None = None) -> subprocess.Popen[bytes]:
        """uvicorn on `port` (default: the deployment's), once it answers /healthz."""
        port = port or self.port
        proc = self._spawn(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "project.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            "web.log",
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return proc
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"the web process did not start:\n{self.log('web.log')}")

    def start_worker(self, concurrency: int = 2) -> None:
        self._spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "worker",
                "--beat",
                "--loglevel=WARNING",
                f"--concurrency={concurrency}",
                "--without-gossip",
                "--without-mingle",
                "--prefetch-multiplier=1",
                "--schedule",
                str(self.base_dir / "beat-schedule"),
            ],
            "worker.log",
        )

    def stop_workers(self) -> None:
        """Stop the Celery worker(s) (warm shutdown)."""
        for proc in list(self.processes):
            # _spawn starts every process from a list of arguments.
            if isinstance(proc.args, list) and proc.args[2:4] == ["celery", "-A"] and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
                self.processes.remove(proc)

    def log(self, name: str) -> str:
        path = self.base_dir / name
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=timeout)

    def rows(self, sql: str, *params: Any) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.postgres.url.replace("postgres://", "postgresql://"), connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.postgres.stop()
        self.redis.stop()


@contextmanager
def temporary_deployment(upstream_url: str, *, prefix: str, env: dict[str, str]) -> Iterator[Deployment]:
    """A Deployment in a throwaway directory, stopped and removed afterwards (no web process
    started: each test starts what it needs)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    deployed = Deployment(base, upstream_url, env=env)
    try:
        yield deployed
    finally:
        deployed.stop()
        shutil.rmtree(base, ignore_errors=True)
