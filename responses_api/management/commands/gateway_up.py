"""`manage.py gateway_up`: the one-command development gateway that `scripts/run` starts.

Migrates the database, creates (or reuses) a development API key, syncs a config that
routes the models `local` and `smollm2` to the bundled SmolLM2 (responses_api.ops.local_model),
starts that model and uvicorn as child processes, waits for /readyz, prints the key with
ready-to-paste examples, and supervises both children until Ctrl-C or SIGTERM.

With ``--setup-only`` it stops after the database, key and config steps (tests, scripts).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, transaction

from responses_api.models import ApiKey
from responses_api.ops import local_model, processes
from responses_api.ops.config_sync import BUNDLED_SOURCE, ConfigError, load_config_file, source_of, sync_config
from responses_api.store.services import KEY_PREFIX, api_key_create, hash_key

LOCAL_PROVIDER = "local"
# Both names route to the same model: `local` is what the examples use, `smollm2` says what it is.
LOCAL_ROUTES = ("local", "smollm2")
DEV_TENANT = "default"
DEV_KEY_NAME = "development key (scripts/run)"
DEV_ADMIN = "admin"
DEFAULT_STATE_DIR = Path(settings.BASE_DIR) / ".gateway"
# The bundled model's timeouts, sized for the 2-core machine the README describes rather than
# the provider defaults (60 s to the first byte, 30 s between chunks), which suit a GPU server.
# Measured (issue 51): SmolLM2-135M on llama.cpp reads a prompt at ~90 tokens per CPU-second
# (Codex's 4,600-token first prompt: 50 CPU-seconds), so on an idle 2-core machine its first
# byte comes after ~30-50 s, and a slot's whole 8,192 tokens take ~90 s alone or ~180 s while
# the other slot is busy too. 300 s covers that with room for a machine doing other work; the
# answer is read from the first chunk on, so a non-streamed call gets the same. A streamed
# answer can pause while the other slot reads its prompt (llama.cpp decodes the paused
# slot's next token once per batch of up to 2,048 prompt tokens of the other: ~20-45 s).
BUNDLED_TIMEOUT = 300.0
BUNDLED_IDLE_TIMEOUT = 120.0


def local_config(port: int) -> dict[str, Any]:
    """The GATEWAY_CONFIG-shaped mapping that makes the bundled model a provider and routes."""
    return {
        "providers": [
            {
                "name": LOCAL_PROVIDER,
                "kind": "chat_completions",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "timeout": BUNDLED_TIMEOUT,
                "first_byte_timeout": BUNDLED_TIMEOUT,
                "idle_timeout": BUNDLED_IDLE_TIMEOUT,
            }
        ],
        "models": [
            {
                "name": name,
                "description": "SmolLM2-135M-Instruct on llama.cpp (bundled; no tool calling)",
                "targets": [{"provider": LOCAL_PROVIDER, "model": local_model.LOCAL_MODEL_NAME}],
            }
            for name in LOCAL_ROUTES
        ],
    }


def ensure_state_dir(path: Path) -> Path:
    """The run's private directory; it ignores itself so no secret is ever committed."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    ignore = path / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Written by manage.py gateway_up: local secrets and logs, never committed.\n*\n")
    return path


def key_is_valid(raw: str) -> bool:
    if not raw.startswith(KEY_PREFIX) or "_" not in raw[len(KEY_PREFIX) :]:
        return False
    prefix = raw[len(KEY_PREFIX) :].split("_", 1)[0]
    return ApiKey.objects.filter(prefix=prefix, secret_hash=hash_key(raw), revoked_at__isnull=True).exists()


def dev_key(key_file: Path) -> tuple[str, bool]:
    """The key stored in ``key_file`` if the database still knows it, else a new one (saved 0600).

    Returns (key, created). The database keeps only the key's hash; the file is the one copy.
    """
    try:
        raw = key_file.read_text().strip()
    except FileNotFoundError:
        raw = ""
    if raw and key_is_valid(raw):
        os.chmod(key_file, 0o600)
        return raw, False
    _, raw = api_key_create(tenant_name=DEV_TENANT, name=DEV_KEY_NAME)
    # Created 0600 from the start (not chmod-ed after), replacing any stale key.
    tmp = key_file.with_name(key_file.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(raw + "\n")
    os.replace(tmp, key_file)
    return raw, True


def dev_admin(login_file: Path) -> str:
    """A development superuser, as the development key is offered: `admin` with a random
    password kept in ``login_file`` (0600). Reused while it still logs in; never created when
    another superuser already exists (the operator has chosen their own)."""
    User = get_user_model()
    try:
        saved = login_file.read_text().strip()
    except FileNotFoundError:
        saved = ""
    if saved:
        username, _, password = saved.partition(" / ")
        user = User.objects.filter(username=username, is_superuser=True).first()
        if user is not None and user.check_password(password):
            return saved
    if User.objects.filter(is_superuser=True).exclude(username=DEV_ADMIN).exists():
        return "(an administrator exists already: use your own login)"
    password = secrets.token_urlsafe(12)
    user = User.objects.filter(username=DEV_ADMIN).first() or User(username=DEV_ADMIN)
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    login = f"{DEV_ADMIN} / {password}"
    fd = os.open(login_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(login + "\n")
    return login


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def http_get_json(url: str, timeout: float = 2.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


class Command(BaseCommand):
    help = (
        "Start the development gateway: migrate, dev API key, local model config, the bundled "
        "model and uvicorn; prints the key and examples; Ctrl-C stops everything."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--local-model-port", type=int, default=int(os.environ.get("LOCAL_MODEL_PORT", "8091")))
        parser.add_argument(
            "--local-model-threads",
            type=int,
            default=int(os.environ.get("LOCAL_MODEL_THREADS", str(local_model.DEFAULT_THREADS))),
        )
        parser.add_argument(
            "--no-local-model",
            action="store_true",
            default=os.environ.get("LOCAL_MODEL", "1").strip().lower() in {"0", "false", "no", "off"},
            help="Do not start the bundled model (also: LOCAL_MODEL=0).",
        )
        parser.add_argument(
            "--state-dir",
            type=Path,
            default=Path(os.environ.get("GATEWAY_STATE_DIR", DEFAULT_STATE_DIR)),
            help="Where the dev key, the generated config and the model log live (default: .gateway/).",
        )
        parser.add_argument(
            "--setup-only",
            action="store_true",
            help="Migrate, key and config only; print the key as the last line and exit.",
        )

    # --- the steps ------------------------------------------------------------------
    def handle(self, *args: Any, **options: Any) -> None:
        self.opts = options
        # Everything that can fail cheaply fails before the shared database is touched: a run
        # that stops (busy port, bad config file) must leave a running gateway's keys, providers
        # and routes as they were.
        if not options["setup_only"] and not port_is_free(options["host"], options["port"]):
            raise CommandError(
                f"port {options['port']} on {options['host']} is in use (is another gateway running?); "
                "stop it or choose another one: PORT=8001 bash scripts/run"
            )
        own: dict[str, Any] | None = None
        if settings.GATEWAY_CONFIG:
            try:
                own = load_config_file(settings.GATEWAY_CONFIG)
            except (ConfigError, OSError) as exc:
                raise CommandError(f"config: {exc}") from exc
        state_dir = ensure_state_dir(options["state_dir"].resolve())
        self.key_file = state_dir / "dev-key"
        self.model_log = state_dir / "local-model.log"

        db = settings.DATABASES["default"]
        self.say(f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db.get('NAME', '')}".rstrip())
        call_command("migrate", interactive=False, verbosity=0)

        config_path = state_dir / "local-model.yaml"
        config = local_config(options["local_model_port"])
        try:
            self.sync(config, own)
        except (ConfigError, OSError) as exc:
            raise CommandError(f"config: {exc}") from exc
        config_path.write_text(
            "# Generated by manage.py gateway_up (scripts/run) on every start; edit your own file\n"
            "# and pass it as GATEWAY_CONFIG instead (see deploy/gateway.yaml). The fields set here\n"
            "# are read-only in the admin; the others (price, context_window, ...) are edited there.\n"
            + yaml.safe_dump(config, sort_keys=False)
        )
        if own is not None:
            self.say(
                f"GATEWAY_CONFIG {settings.GATEWAY_CONFIG}: {len(own.get('providers') or [])} providers, "
                f"{len(own.get('models') or [])} models"
            )
        self.say(f"models: {', '.join(LOCAL_ROUTES)} -> {local_model.LOCAL_MODEL_NAME} ({config_path})")

        key, created = dev_key(self.key_file)
        self.say(f"API key: {'created' if created else 'reused'} ({self.key_file}, mode 0600)")
        self.admin_file = state_dir / "dev-admin"
        self.admin_login = dev_admin(self.admin_file)

        if options["setup_only"]:
            self.stdout.write(key)
            return
        # The supervisor itself needs no database connection from here on.
        connections.close_all()
        self.supervise(key)

    @staticmethod
    @transaction.atomic
    def sync(config: dict[str, Any], own: dict[str, Any] | None) -> None:
        """The operator's file under its own name, then the bundled model's entries under theirs
        (ops/config_sync.py: each source un-marks only its own entries). An entry of the same
        name in the operator's file wins: the bundled config leaves it out."""
        if own is not None:
            sync_config(own, source=source_of(settings.GATEWAY_CONFIG))
            config = {
                section: [
                    entry
                    for entry in entries
                    if entry["name"] not in {e.get("name") for e in own.get(section) or [] if isinstance(e, dict)}
                ]
                for section, entries in config.items()
            }
        sync_config(config, source=BUNDLED_SOURCE)

    def supervise(self, key: str) -> None:
        opts = self.opts
        host, port = opts["host"], opts["port"]

        stop = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        model_proc: subprocess.Popen[bytes] | None = None
        web_proc: subprocess.Popen[bytes] | None = None
        try:
            model_proc, model_note = self.start_model()
            if stop.is_set():
                return
            web_proc = self.start_web(host, port)
            base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
            if not self.wait_ready(web_proc, base, stop):
                return
            self.print_banner(base, key, model_note)
            model_warned = False
            while not stop.wait(0.5):
                if web_proc.poll() is not None:
                    raise CommandError(f"the gateway (uvicorn) exited with code {web_proc.returncode}")
                if model_proc is not None and model_proc.poll() is not None and not model_warned:
                    model_warned = True
                    self.say(
                        f"warning: the local model exited (code {model_proc.returncode}); see {self.model_log}",
                        err=True,
                    )
        finally:
            self.say("stopping ...")
            if web_proc is not None:
                processes.stop_process(web_proc, timeout=10)  # uvicorn: graceful shutdown on SIGTERM
            if model_proc is not None:
                local_model.stop_process(model_proc)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.say("stopped.")

    def start_model(self) -> tuple[subprocess.Popen[bytes] | None, str]:
        """Start the bundled model; returns (process or None, a line for the banner)."""
        opts = self.opts
        port = opts["local_model_port"]
        if opts["no_local_model"]:
            return None, "local model: not started (LOCAL_MODEL=0)"
        if not port_is_free("127.0.0.1", port):
            # Reuse only the bundled model itself (e.g. started by hand), nothing else that
            # happens to speak the OpenAI API on that port.
            status, body = http_get_json(f"http://127.0.0.1:{port}/v1/models")
            ids = [m.get("id") for m in body.get("data", [])] if status == 200 and isinstance(body, dict) else []
            if ids == [local_model.LOCAL_MODEL_NAME]:
                self.say(f"local model: already running on port {port}; using it (it is not ours to stop)")
                return None, f"local model: {local_model.LOCAL_MODEL_NAME} already running on 127.0.0.1:{port}"
            return None, (
                f"local model: NOT started, port {port} is in use by something else "
                "(set LOCAL_MODEL_PORT to a free port)"
            )
        if not local_model.local_model_available():
            override = os.environ.get(local_model.MODEL_PATH_ENV)
            if override and importlib.util.find_spec("xllamacpp") is not None:
                return None, f"local model: NOT started, ${local_model.MODEL_PATH_ENV} is not a file: {override}"
            return None, f"local model: NOT installed ({local_model.INSTALL_HINT})"
        self.say(f"local model: starting {local_model.LOCAL_MODEL_NAME} on 127.0.0.1:{port} (log: {self.model_log})")
        try:
            proc = local_model.start_local_model_process(
                port, wait=120, threads=opts["local_model_threads"], log_file=self.model_log
            )
        except (local_model.LocalModelUnavailable, local_model.LocalModelStartError) as exc:
            self.say(f"warning: {exc}", err=True)
            return None, f"local model: FAILED to start (see {self.model_log})"
        return proc, f"local model: {local_model.LOCAL_MODEL_NAME} (llama.cpp) on 127.0.0.1:{port}"

    def start_web(self, host: str, port: int) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "project.asgi:application",
            "--host",
            host,
            "--port",
            str(port),
            # One process: the embedded worker and event log live in it. The gateway's own
            # JSON access log (gateway.access) replaces uvicorn's.
            "--workers",
            "1",
            "--no-access-log",
            "--log-level",
            "warning",
            "--timeout-graceful-shutdown",
            "5",
        ]
        self.say(f"gateway: starting uvicorn on {host}:{port}")
        return subprocess.Popen(
            cmd,
            cwd=settings.BASE_DIR,
            stdin=subprocess.DEVNULL,
            # Own session: Ctrl-C reaches this supervisor only, which then stops the children in order.
            start_new_session=True,
            # Safe here: the supervisor runs no threads of its own (the usual preexec_fn risk).
            preexec_fn=processes.die_with_parent,  # noqa: PLW1509 - set before any thread starts: the child dies with this command
        )

    def wait_ready(self, web_proc: subprocess.Popen[bytes], base: str, stop: threading.Event) -> bool:
        def ready() -> bool:
            return http_get_json(f"{base}/readyz")[0] == 200

        try:
            return processes.wait_until(
                web_proc, ready, timeout=90, interval=0.2, what="the gateway (uvicorn)", stop=stop.is_set
            )
        except processes.ProcessExited as exc:
            raise CommandError(f"the gateway (uvicorn) exited with code {exc.returncode} while starting") from None
        except TimeoutError:
            status, body = http_get_json(f"{base}/readyz")
            raise CommandError(f"the gateway did not become ready at {base}/readyz: {status} {body}") from None

    # --- output -------------------------------------------------------------------------
    def say(self, text: str, err: bool = False) -> None:
        (self.stderr if err else self.stdout).write(f"==> {text}")
        (self.stderr if err else self.stdout).flush()

    def print_banner(self, base: str, key: str, model_note: str) -> None:
        model = LOCAL_ROUTES[0]
        python = sys.executable
        body = json.dumps({"model": model, "input": "Write one sentence about the sea.", "max_output_tokens": 64})
        lines = [
            "",
            "=" * 78,
            f"Open Responses gateway ready: {base}   (admin: {base}/admin/, health: {base}/readyz)",
            model_note,
            "",
            f"API key (saved in {self.key_file}):",
            f"  {key}",
            "",
            f"Admin login {base}/admin/ (saved in {self.admin_file}):",
            f"  {self.admin_login}",
            "",
            "Try it (non-streaming):",
            "",
            f"curl -s {base}/v1/responses \\",
            f"  -H 'Authorization: Bearer {key}' \\",
            "  -H 'Content-Type: application/json' \\",
            f"  -d '{body}'",
            "",
            "Streaming with the openai Python SDK (installed in .venv):",
            "",
            f"{python} - <<'PY'",
            "from openai import OpenAI",
            f'client = OpenAI(base_url="{base}/v1", api_key="{key}")',
            "stream = client.responses.create(",
            f'    model="{model}", input="Write a haiku about the sea.", max_output_tokens=64, stream=True',
            ")",
            "for event in stream:",
            '    if event.type == "response.output_text.delta":',
            '        print(event.delta, end="", flush=True)',
            '    elif event.type in ("response.completed", "response.incomplete", "response.failed"):',
            '        print(f"\\n[{event.response.status}]")',
            "PY",
            "",
        ]
        if "NOT" in model_note or "FAILED" in model_note:
            lines += [
                f"The model '{model}' will fail until its upstream answers. To use another upstream",
                "(OpenAI, vLLM, Ollama, ...), write a config file (see deploy/gateway.yaml) and run",
                "  GATEWAY_CONFIG=/path/to/gateway.yaml bash scripts/run",
                "or add a Provider and a Model route in the admin",
                "(.venv/bin/python manage.py createsuperuser, then /admin/).",
                "",
            ]
        lines += ["Ctrl-C stops everything this command started.", "=" * 78, ""]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
