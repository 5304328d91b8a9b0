"""docker-compose.yml run as a stack, without a container engine: each gateway service's
command, started as a process with the environment the compose file gives it (its
`environment`, interpolated the way compose does, over its `env_file`), against a real
PostgreSQL and Redis standing in for the `postgres` and `redis` services.

Read from the file, not copied: the postgres healthcheck that gates `migrate`, the
`env_file` entries, the volumes (a named volume is a directory here, shared by the services
that mount it), and the commands of migrate, web and worker. What it proves: migrate starts
only once the database accepts TCP connections (not during the image's socket-only init
server); web answers over plain HTTP with the trial setting and an admin login succeeds;
the worker's counters appear in web's /metrics, and a previous deployment's stay there
(nothing empties the metrics volume); a variable set only in `.env` reaches the
services.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.reliability.test_metrics import value
from tests.support.servers import _free_port, find_postgres_bindir, find_redis_server, start_postgres, start_redis
from tests.support.upstream import Reply, ScriptedUpstream
from tests.test_deploy import interpolate, settings_env_names

try:
    PG_BINDIR = find_postgres_bindir()
    find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, as compose reads an env file (comments and blank lines skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, raw = line.partition("=")
            out[key.strip()] = raw.strip().strip("'\"")
    return out


class Stack:
    """The compose project in `project` (its .env and ./deploy/gateway.yaml), run from ROOT (the image's /app)."""

    def __init__(self, project: Path, postgres: Any, redis: Any) -> None:
        self.project, self.postgres, self.redis = project, postgres, redis
        self.logs: dict[str, Path] = {}
        self.procs: list[subprocess.Popen[bytes]] = []

    def volume(self, source: str) -> Path:
        if source.startswith((".", "/")):
            return (self.project / source).resolve()
        path = self.project / "volumes" / source  # a named volume
        path.mkdir(parents=True, exist_ok=True)
        return path

    def env(self, service: str) -> dict[str, str]:
        spec = SERVICES[service]
        dotenv_path = self.project / ".env"
        # Interpolation: the shell's variables (none set here) over the project's .env.
        interpolation = read_dotenv(dotenv_path) if dotenv_path.exists() else {}
        from_files: dict[str, str] = {}
        for entry in spec.get("env_file") or []:
            path = self.project / (entry["path"] if isinstance(entry, dict) else entry)
            if path.exists():
                from_files |= read_dotenv(path)
            else:
                assert isinstance(entry, dict) and entry.get("required") is False, f"{service}: {path} is required"
        declared = {k: interpolate(str(v), interpolation) for k, v in (spec.get("environment") or {}).items()}
        env = from_files | declared  # `environment` wins over env_file, as in compose
        # Container paths of mounted volumes -> their directories here.
        for mount in spec.get("volumes") or []:
            source, target = mount.split(":")[:2]
            host = str(self.volume(source))
            env = {
                k: host + v[len(target) :] if v == target or v.startswith(target + "/") else v for k, v in env.items()
            }
        # The service names on compose's network -> the servers here.
        for k, v in env.items():
            v = v.replace("@postgres:5432/", f"@127.0.0.1:{self.postgres.port}/")
            env[k] = v.replace("redis://redis:6379", f"redis://127.0.0.1:{self.redis.port}")
        base = {k: v for k, v in os.environ.items() if k not in settings_env_names() and not k.startswith("GATEWAY_")}
        base.pop("PROMETHEUS_MULTIPROC_DIR", None)
        base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
        return base | env

    def command(self, service: str) -> list[str]:
        command = SERVICES[service]["command"]
        interpolation = read_dotenv(self.project / ".env")
        if isinstance(command, list):
            return [interpolate(word, interpolation) for word in command]
        return shlex.split(interpolate(command, interpolation))

    def run(self, service: str, extra: list[str] | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            extra or self.command(service),
            cwd=ROOT,
            env=self.env(service) | env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def start(self, service: str, words: list[str]) -> subprocess.Popen[bytes]:
        log = self.project / f"{service}.log"
        self.logs[service] = log
        proc = subprocess.Popen(
            words,
            cwd=ROOT,
            env=self.env(service),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def log(self, service: str) -> str:
        return self.logs[service].read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        import signal

        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def healthcheck(service: str, env: dict[str, str]) -> int:
    test = SERVICES[service]["healthcheck"]["test"]
    words = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:]
    return subprocess.run(words, env=env, capture_output=True, timeout=30, check=False).returncode


def test_the_compose_stack_starts_and_serves(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "deploy").mkdir(parents=True)
    token = "scrape-" + secrets.token_hex(8)
    # What the README's "Production deployment" puts in .env, for a plain-HTTP trial.
    only_in_dotenv = "GATEWAY_MAX_REQUEST_BYTES"
    assert only_in_dotenv not in SERVICES["web"]["environment"]
    (project / ".env").write_text(
        f"SECRET_KEY={secrets.token_urlsafe(50)}\n"
        f"POSTGRES_PASSWORD={secrets.token_hex(16)}\n"
        "ALLOWED_HOSTS=127.0.0.1\n"
        "GATEWAY_PLAIN_HTTP=true\n"
        f"GATEWAY_METRICS_TOKEN={token}\n"
        "GATEWAY_WORKER_CONCURRENCY=8\n"
        f"{only_in_dotenv}=20000\n"
    )
    postgres = start_postgres(tmp_path / "pg", database="gateway")
    redis = start_redis(tmp_path)
    stack = Stack(project, postgres, redis)
    try:
        with ScriptedUpstream() as upstream:
            (project / "deploy" / "gateway.yaml").write_text(
                yaml.safe_dump(
                    {
                        "providers": [{"name": "scripted", "base_url": upstream.base_url}],
                        "models": [{"name": "m", "targets": [{"provider": "scripted", "model": "m"}]}],
                    }
                )
            )
            _postgres_gates_migrate(stack)
            _migrate(stack)
            _web_worker_and_metrics(stack, upstream, token)
    finally:
        stack.stop()
        postgres.stop()
        redis.stop()


def _postgres_gates_migrate(stack: Stack) -> None:
    """The postgres healthcheck (what `migrate`'s depends_on waits for) fails while the
    server listens on its Unix socket only, as the image's init-time server does."""
    assert SERVICES["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    pg = stack.postgres
    socket_dir = Path(tempfile.mkdtemp(prefix="pgs", dir="/tmp"))
    owner = pg.data_dir.stat()
    os.chown(socket_dir, owner.st_uid, owner.st_gid)
    command, popen_kwargs = pg._respawn
    socket_only = ["listen_addresses=" if c.startswith("listen_addresses=") else c for c in command]
    socket_only = [
        f"unix_socket_directories={socket_dir}" if c.startswith("unix_socket_directories=") else c for c in socket_only
    ]
    # In the container the socket is in libpq's default place: PGHOST stands for it here.
    probe_env = {
        "PATH": f"{PG_BINDIR}{os.pathsep}{os.environ['PATH']}",
        "PGHOST": str(socket_dir),
        "PGPORT": str(pg.port),
    }
    pg.halt()
    pg._respawn = (socket_only, popen_kwargs)
    pg.resume()
    try:
        # The trap (docker-library/postgres#880): a socket check says ready...
        assert (
            subprocess.run(["pg_isready", "-U", "gateway", "-d", "gateway"], env=probe_env, check=False).returncode == 0
        )
        # ...compose's check does not, and migrate would not start yet.
        assert healthcheck("postgres", probe_env) != 0
        assert stack.run("migrate", extra=["python", "manage.py", "migrate", "--check"]).returncode != 0
    finally:
        pg.halt()
        pg._respawn = (command, popen_kwargs)
        pg.resume()
    assert healthcheck("postgres", probe_env) == 0


def _migrate(stack: Stack) -> None:
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    metrics_dir = stack.volume("metrics")
    previous = MmapedDict(str(metrics_dir / "counter_gone-1.db"))  # a previous deployment's count
    previous.write_value(mmap_key("gateway_rate_limited", "gateway_rate_limited_total", ["limit"], ["gone"], "h"), 3, 0)
    previous.close()
    import psycopg

    with psycopg.connect(
        f"host=127.0.0.1 port={stack.postgres.port} user=postgres dbname=gateway", autocommit=True
    ) as c:
        password = read_dotenv(stack.project / ".env")["POSTGRES_PASSWORD"]
        c.execute(f"CREATE ROLE gateway LOGIN PASSWORD '{password}'")
        c.execute("ALTER DATABASE gateway OWNER TO gateway")
        c.execute("GRANT ALL ON SCHEMA public TO gateway")
    done = stack.run("migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Synced 1 providers, 1 models" in done.stdout
    # Kept: migrate (run again at every `up`) no longer empties the volume; a process starting
    # archives the files of ended processes, counts included.
    assert _rate_limited(metrics_dir, "gone") == 3


def _rate_limited(metrics_dir: Path, limit: str) -> float:
    from prometheus_client.multiprocess import MultiProcessCollector

    families = {f.name: f for f in MultiProcessCollector(None, path=str(metrics_dir)).collect()}
    samples = families["gateway_rate_limited"].samples if "gateway_rate_limited" in families else []
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels.get("limit") == limit)


def _web_worker_and_metrics(stack: Stack, upstream: ScriptedUpstream, token: str) -> None:
    # The image collects static files at build time (the Dockerfile's RUN line): so here.
    assert "manage.py collectstatic --noinput" in (ROOT / "Dockerfile").read_text()
    collected = stack.run("web", extra=["python", "manage.py", "collectstatic", "--noinput", "--verbosity", "0"])
    assert collected.returncode == 0, collected.stderr
    port = _free_port()
    words = stack.command("web")
    words[words.index("--host") + 1] = "127.0.0.1"
    words[words.index("--port") + 1] = str(port)
    assert "--forwarded-allow-ips=*" not in " ".join(words)
    web = stack.start("web", words)
    worker = stack.start("worker", stack.command("worker"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert web.poll() is None and time.monotonic() < deadline, stack.log("web")
        time.sleep(0.3)

    # Plain HTTP, the trial setting: no redirect, and the admin login works.
    created = stack.run(
        "web",
        extra=[
            "python",
            "manage.py",
            "createsuperuser",
            "--noinput",
            "--username",
            "ops",
            "--email",
            "ops@example.com",
        ],
        DJANGO_SUPERUSER_PASSWORD="a-long-trial-password-42",
    )
    assert created.returncode == 0, created.stderr
    with httpx.Client(base_url=url, timeout=10) as browser:
        form = browser.get("/admin/login/?next=/admin/")
        assert form.status_code == 200
        assert "secure" not in form.headers.get("set-cookie", "").lower()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert csrf is not None
        login = browser.post(
            "/admin/login/?next=/admin/",
            data={
                "csrfmiddlewaretoken": csrf.group(1),
                "username": "ops",
                "password": "a-long-trial-password-42",
                "next": "/admin/",
            },
        )
        assert login.status_code == 302 and login.headers["location"] == "/admin/", login.text[:1500]
        assert "Site administration" in browser.get("/admin/").text

    key = stack.run("web", extra=["python", "manage.py", "create_api_key", "stack", "--tenant", "acme"])
    assert key.returncode == 0, key.stderr
    api = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {key.stdout.strip().splitlines()[-1]}"}, timeout=30
    )
    # .env's GATEWAY_MAX_REQUEST_BYTES (named nowhere in the compose file) reached web.
    too_big = api.post("/v1/responses", json={"model": "m", "input": "x" * 30000})
    assert too_big.status_code == 413, too_big.text

    # A background response: the worker calls the upstream, which fails; web's /metrics counts it.
    upstream.enqueue("m", Reply(status=500))
    queued = api.post("/v1/responses", json={"model": "m", "input": "hi", "background": True})
    assert queued.status_code == 200, queued.text
    deadline = time.monotonic() + 60
    while (status := api.get(f"/v1/responses/{queued.json()['id']}").json()["status"]) in ("queued", "in_progress"):
        assert worker.poll() is None and time.monotonic() < deadline, stack.log("worker")
        time.sleep(0.3)
    assert status == "failed"
    scrape = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    # Counted by the worker only (web never called the upstream): its retry included.
    assert value(scrape, "gateway_upstream_errors_total", target="scripted:m") >= 1, scrape
    # The previous deployment's count, archived by a process's start, is still in the sums.
    assert value(scrape, "gateway_rate_limited_total", limit="gone") == 3, scrape
    api.close()
