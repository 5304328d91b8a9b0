"""Shared helpers for the benchmark scripts in bench/.

Everything runs on 127.0.0.1. Every server is a child process of the
benchmark script (its own session, a parent-death signal, and an atexit hook
that stops it), so nothing outlives a run, even a killed one.

What is here:

* process helpers: ``Proc`` (a child we started and stop by its own pid),
  ``start_postgres``, ``Upstream`` (bench/upstream_server.py in a process),
  ``Gateway`` (migrate, create a key, write a GATEWAY_CONFIG, run uvicorn),
  ``LiteLLM`` (its proxy from a separate virtualenv, created on demand);
* ``RawHttp``: a small, fast HTTP/1.1 keep-alive client (asyncio protocol +
  httptools) used as the load generator: it records the time of the first SSE
  ``data:`` event and of every event, so one client serves latency,
  throughput and streaming measurements without being the bottleneck;
* statistics (``pct``, ``summary``), CPU/RSS sampling, JSON results in
  bench/results/ and optional matplotlib plots (skipped with a message when
  matplotlib is not installed).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
PYTHON = sys.executable

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from responses_api.ops.processes import die_with_parent, stop_process  # noqa: E402 - after REPO is on the path

# Upper bound on any server start, in seconds.
START_TIMEOUT = 60.0

# 50+ characters: production settings (DEBUG off) refuse a weaker key.
BENCH_SECRET_KEY = "bench-only-secret-key-not-for-production-0123456789abcdefghij"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

_live: list[Proc] = []


def _stop_all() -> None:
    for proc in list(reversed(_live)):
        with contextlib.suppress(Exception):  # best effort at exit
            proc.stop()


atexit.register(_stop_all)


def _on_signal(signum: int, frame: Any) -> None:
    _stop_all()
    sys.exit(128 + signum)


for _sig in (signal.SIGTERM, signal.SIGHUP):
    with contextlib.suppress(ValueError, OSError):  # not the main thread
        signal.signal(_sig, _on_signal)


def raise_nofile(target: int = 65536) -> int:
    """Raise this process's open-file limit as far as allowed; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(target, hard) if hard != resource.RLIM_INFINITY else target
    if want > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _child_setup() -> None:
    """preexec_fn: many fds, and die with the parent."""
    raise_nofile()
    die_with_parent()


class Proc:
    """A child process we started; stopped by its own pid (its session, which we created)."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.cmd = cmd
        log_dir = log_dir or Path(tempfile.mkdtemp(prefix="bench-logs-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            cmd,
            env=env,
            cwd=str(cwd or REPO),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_child_setup,  # noqa: PLW1509 - only setrlimit + prctl, async-signal-safe enough
        )
        _live.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self in _live:
            _live.remove(self)
        stop_process(self.popen, timeout=timeout, group=True)  # the session we created for it
        self._log.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, proc: Proc | None = None, timeout: float = START_TIMEOUT) -> None:
    """Poll `url` until it answers (any status), at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.1)
    tail = proc.log_tail() if proc else ""
    raise RuntimeError(f"{url} did not answer within {timeout}s ({last!r})\n{tail}")


def run_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------


def start_postgres(base: Path):  # type: ignore[no-untyped-def]
    """A throwaway PostgreSQL (tests/support/servers.py): fsync off, trust auth, loopback."""
    from tests.support.servers import start_postgres as _start

    pg = _start(base / "pg")
    log(f"postgres at {pg.url} (pid {pg.pid})")
    return pg


class Upstream:
    """bench/upstream_server.py (ScriptedUpstream) in its own process.

    Model `echo` echoes the last user message after `latency` seconds; model
    `slow` streams `slow_tokens` chunks of `slow_chunk_chars` characters, one
    every `slow_interval` seconds."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        log_dir: Path,
        name: str = "upstream",
        slow_interval: float = 0.1,
        slow_tokens: int = 30,
        slow_chunk_chars: int = 4,
        echo_chunk_chars: int | None = None,
    ) -> None:
        self.port = free_port()
        cmd = [
            PYTHON,
            str(BENCH / "upstream_server.py"),
            "--port",
            str(self.port),
            "--latency",
            str(latency),
            "--slow-interval",
            str(slow_interval),
            "--slow-tokens",
            str(slow_tokens),
            "--slow-chunk-chars",
            str(slow_chunk_chars),
        ]
        if echo_chunk_chars is not None:
            cmd += ["--echo-chunk-chars", str(echo_chunk_chars)]
        self.proc = Proc(name, cmd, log_dir=log_dir)
        wait_http(f"http://127.0.0.1:{self.port}/v1/models", self.proc)
        log(f"{name} at {self.base_url} (pid {self.proc.pid}, latency {latency * 1000:.0f} ms)")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.proc.stop()


def _gateway_env(db_url: str, config: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(
        {
            "DATABASE_URL": db_url,
            "SECRET_KEY": BENCH_SECRET_KEY,
            "DEBUG": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "GATEWAY_CONFIG": str(config),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def write_gateway_config(
    path: Path, providers: dict[str, str], models: dict[str, tuple[str, str]], raw: dict | None = None
) -> Path:
    """providers: name -> base_url; models: public name -> (provider, upstream model); or `raw` as is."""
    import yaml

    data = raw or {
        "providers": [{"name": n, "kind": "chat_completions", "base_url": u} for n, u in providers.items()],
        "models": [
            {"name": m, "targets": [{"provider": p, "model": um, "weight": 1}]} for m, (p, um) in models.items()
        ],
    }
    path.write_text(yaml.safe_dump(data))
    return path


def manage(args: list[str], env: dict[str, str], timeout: float = 300, cwd: Path | None = None) -> str:
    res = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if res.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}")
    return res.stdout


class Gateway:
    """The gateway as production runs it: uvicorn (uvloop, httptools), DEBUG off, Postgres with the pool."""

    def __init__(
        self,
        *,
        db_url: str,
        providers: dict[str, str],
        models: dict[str, tuple[str, str]],
        log_dir: Path,
        extra_env: dict[str, str] | None = None,
        name: str = "gateway",
        migrate: bool = True,
        key: str | None = None,
        config: dict | None = None,
        uvicorn_args: list[str] | None = None,
        tree: Path | None = None,
        server: str = "uvicorn",
    ) -> None:
        """`tree`: run the gateway from another source tree (e.g. an earlier commit, see
        `source_tree`) with this interpreter; it needs a database of its own."""
        self.config = write_gateway_config(log_dir / f"{name}-config.yaml", providers, models, config)
        self.env = _gateway_env(db_url, self.config, extra_env)
        if migrate:
            manage(["migrate", "--noinput", "-v", "0"], self.env, cwd=tree)
        # As compose's migrate service does: the web processes do not sync GATEWAY_CONFIG.
        manage(["sync_gateway_config"], self.env, cwd=tree)
        self.key = (
            key or manage(["create_api_key", "bench", "--tenant", "bench"], self.env, cwd=tree).strip().splitlines()[-1]
        )
        self.port = free_port()
        cmd = (
            _granian_command(self.port)
            if server == "granian"
            else [
                PYTHON,
                "-m",
                "uvicorn",
                "project.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
                "--loop",
                "auto",
                "--http",
                "auto",
                "--backlog",
                "4096",
                "--timeout-keep-alive",
                "60",
                *(uvicorn_args or []),
            ]
        )
        self.proc = Proc(name, cmd, env=self.env, log_dir=log_dir, cwd=tree)
        wait_http(f"{self.url}/healthz", self.proc)
        log(f"{name} at {self.url} (pid {self.proc.pid})")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def stop(self) -> None:
        self.proc.stop()


def _granian_command(port: int) -> list[str]:
    """The gateway under granian (Rust HTTP, ASGI interface): a server to weigh against uvicorn."""
    return [
        PYTHON,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--loop",
        "uvloop",
        "--http",
        "1",
        "--backlog",
        "4096",
        "--no-access-log",
        "--log-level",
        "warning",
        "project.asgi:application",
    ]


def source_tree(rev: str, dest: Path) -> Path:
    """The files of commit `rev` (git archive) in `dest`: a gateway to compare against in one run."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def create_database(server_url: str, name: str) -> str:
    """A second database on the throwaway server (another tree's migrations); its URL."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + "/" + name


def litellm_venv() -> Path:
    return Path(os.environ.get("LITELLM_VENV") or BENCH / ".litellm-venv")


# The LiteLLM release every comparison runs against: a ratio to an unpinned LiteLLM would move
# with its releases. 1.108.7 is the newest whose `[proxy]` extra installs from the package
# registry on 2026-11-27 (1.108.8 to 1.110.2 pin litellm-enterprise, litellm-proxy-extras or
# litellm-proxy releases the registry does not have). Change it on purpose, and say so in
# bench/README.md.
LITELLM_VERSION = "1.108.7"


def ensure_litellm(timeout: float = 900) -> Path | None:
    """The `litellm` executable of a separate virtualenv holding LITELLM_VERSION (installed or
    replaced when missing or another version), or None."""
    venv = litellm_venv()
    exe = venv / "bin" / "litellm"
    stamp = venv / ".bench-litellm-version"
    if exe.exists() and stamp.exists() and stamp.read_text().strip() == LITELLM_VERSION:
        return exe
    log(f"installing litellm[proxy]=={LITELLM_VERSION} into {venv} (separate virtualenv)")
    try:
        if not (venv / "bin" / "pip").exists():
            python = shutil.which("python3") or sys.executable
            subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
            check=True,
            timeout=timeout,
        )
        stamp.write_text(LITELLM_VERSION)
    except (subprocess.SubprocessError, OSError) as exc:
        log(f"LiteLLM: install failed ({exc}); skipping LiteLLM")
        return None
    return exe if exe.exists() else None


class LiteLLM:
    """LiteLLM's proxy (one uvicorn worker, no database) bridging /v1/responses to Chat Completions."""

    MASTER_KEY = "sk-bench-0123456789abcdef0123456789abcdef"

    def __init__(
        self,
        exe: Path,
        *,
        upstream_base: str,
        log_dir: Path,
        model: str = "bench-model",
        upstream_model: str = "echo",
        extra_models: dict[str, str] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        """`extra_models`: more model names -> LiteLLM model strings on the same upstream;
        `settings`: more `litellm_settings` (bench/messages.py: its /v1/messages to Chat Completions)."""
        import yaml

        self.port = free_port()
        cfg = {
            "model_list": [
                {
                    "model_name": model,
                    "litellm_params": {
                        # `openai/chat_completions/<m>`: the Responses -> Chat Completions bridge
                        # (plain `openai/<m>` would forward to the upstream's own /v1/responses).
                        "model": f"openai/chat_completions/{upstream_model}",
                        "api_base": upstream_base,
                        "api_key": "x",
                    },
                }
            ]
            + [
                {"model_name": name, "litellm_params": {"model": target, "api_base": upstream_base, "api_key": "x"}}
                for name, target in (extra_models or {}).items()
            ],
            "litellm_settings": {"telemetry": False, "set_verbose": False, "json_logs": False, **(settings or {})},
            # A master key (checked on every request, like our gateway's API key; no database,
            # so no virtual keys, spend logs or stored responses).
            "general_settings": {"master_key": self.MASTER_KEY},
        }
        self.config = log_dir / "litellm-config.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "OPENAI"))}
        env.update(
            {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch from the internet
                "LITELLM_LOG": "ERROR",
                "LITELLM_TELEMETRY": "False",
                "NO_PROXY": "*",
                "DISABLE_SCHEMA_UPDATE": "True",
            }
        )
        cmd = [
            str(exe),
            "--config",
            str(self.config),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--num_workers",
            "1",
        ]
        self.proc = Proc("litellm", cmd, env=env, log_dir=log_dir)
        wait_http(f"{self.url}/health/liveliness", self.proc, timeout=120)
        log(f"litellm at {self.url} (pid {self.proc.pid})")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.MASTER_KEY}"}

    def stop(self) -> None:
        self.proc.stop()


# --------------------------------------------------------------------------
# The load generator's HTTP client
# --------------------------------------------------------------------------


@dataclass
class Result:
    ok: bool
    status: int = 0
    t_start: float = 0.0
    t_first_event: float | None = None  # first SSE `data:` event (streaming)
    t_end: float = 0.0
    events: int = 0
    event_times: list[float] | None = None
    body: bytes | None = None
    error: str | None = None
    sent_bytes: int = 0

    @property
    def total(self) -> float:
        return self.t_end - self.t_start

    @property
    def ttfe(self) -> float | None:
        return None if self.t_first_event is None else self.t_first_event - self.t_start


class _Proto(asyncio.Protocol):
    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.cur: _Pending | None = None

    # asyncio
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception as exc:  # noqa: BLE001 - reported on the request
            if self.cur is not None and not self.cur.done.done():
                self.cur.done.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if self.cur is not None and not self.cur.done.done():
            self.cur.done.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        if self.cur is not None:
            self.cur.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        cur = self.cur
        if cur is None:
            return
        if cur.keep_body:
            cur.chunks.append(body)
        if cur.sse:
            now = time.perf_counter()
            buf = cur.sse_buf + body
            # Count complete SSE events carrying `data:`; keep the incomplete tail.
            parts = buf.split(b"\n\n")
            cur.sse_buf = parts.pop()
            match = cur.match
            for part in parts:
                if b"data:" in part:
                    if cur.t_first is None:
                        cur.t_first = now
                    cur.events += 1
                    if cur.times is not None and (match is None or match in part):
                        cur.times.append(now)

    def on_message_complete(self) -> None:
        if self.cur is not None and not self.cur.done.done():
            self.cur.done.set_result(None)


@dataclass
class _Pending:
    done: asyncio.Future
    keep_body: bool
    sse: bool
    times: list[float] | None
    match: bytes | None = None
    status: int = 0
    chunks: list[bytes] = field(default_factory=list)
    sse_buf: bytes = b""
    t_first: float | None = None
    events: int = 0


class RawHttp:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1:port; reconnects when the server closes it."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head_tail = (f"Host: {self.host}:{self.port}\r\n{extra}").encode()
        self._proto: _Proto | None = None

    async def _connect(self) -> _Proto:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(_Proto, self.host, self.port)
        return proto

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        sse: bool = False,
        keep_body: bool = False,
        event_times: bool = False,
        match: bytes | None = None,
        timeout: float = 120.0,
        times: list[float] | None = None,
    ) -> Result:
        """One request. sse: count `data:` events and time the first; event_times: keep the arrival
        time of every event (only of events containing `match`, when given), into `times` if given
        (readable while the request runs, and after it is cancelled)."""
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode() + self._head_tail
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
        if sse:
            head += b"Accept: text/event-stream\r\n"
        data = head + b"\r\n" + (body or b"")
        t0 = time.perf_counter()
        try:
            if self._proto is None or self._proto.closed.done():
                self._proto = await self._connect()
            proto = self._proto
            pending = _Pending(
                asyncio.get_running_loop().create_future(),
                keep_body,
                sse,
                times if times is not None else ([] if event_times else None),
                match,
            )
            proto.cur = pending
            t0 = time.perf_counter()
            assert proto.transport is not None
            proto.transport.write(data)
            await asyncio.wait_for(pending.done, timeout)
            t1 = time.perf_counter()
            proto.cur = None
        except Exception as exc:  # noqa: BLE001 - a failed request is a result
            self.close()
            return Result(ok=False, t_start=t0, t_end=time.perf_counter(), error=repr(exc), sent_bytes=len(data))
        return Result(
            ok=200 <= pending.status < 300,
            status=pending.status,
            t_start=t0,
            t_first_event=pending.t_first,
            t_end=t1,
            events=pending.events,
            event_times=pending.times,
            body=b"".join(pending.chunks) if keep_body else None,
            sent_bytes=len(data),
        )

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


class LeanUpstream:
    """bench/lean_upstream.py in its own process: `slow-N` Chat Completions streams, one token
    every `interval` seconds, at a fraction of the scripted upstream's CPU per chunk."""

    def __init__(self, *, log_dir: Path, name: str = "upstream", interval: float = 0.1) -> None:
        self.port = free_port()
        cmd = [PYTHON, str(BENCH / "lean_upstream.py"), "--port", str(self.port), "--interval", str(interval)]
        self.proc = Proc(name, cmd, log_dir=log_dir)
        wait_http(f"http://127.0.0.1:{self.port}/v1/models", self.proc)
        log(f"{name} (lean) at {self.base_url} (pid {self.proc.pid})")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.proc.stop()


def use_uvloop() -> str:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    except ImportError:
        return "asyncio"


# --------------------------------------------------------------------------
# Statistics and process metrics
# --------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    """Percentile with linear interpolation (p in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    """n, mean, min, median, p90, p99, max (values multiplied by `scale`, e.g. 1000 for ms)."""
    if not values:
        return {"n": 0}
    v = [x * scale for x in values]
    return {
        "n": len(v),
        "mean": round(sum(v) / len(v), digits),
        "min": round(min(v), digits),
        "median": round(pct(v, 50), digits),
        "p90": round(pct(v, 90), digits),
        "p99": round(pct(v, 99), digits),
        "max": round(max(v), digits),
    }


def cpu_seconds(pid: int) -> float:
    """user+system CPU seconds of a process (and its reaped children are not counted)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, IndexError, ValueError):
        return float("nan")


def tree_pids(pid: int) -> list[int]:
    """pid and its descendants (for servers that fork workers)."""
    try:
        import psutil

        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except ImportError:  # without psutil: the parent links in /proc (uvicorn --workers, forks)
        parents: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                parents.setdefault(ppid, []).append(int(entry))
        found, todo = [], [pid]
        while todo:
            current = todo.pop()
            found.append(current)
            todo += parents.get(current, [])
        return found
    except Exception:  # noqa: BLE001 - process gone
        return [pid]


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in tree_pids(pid))


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_bytes(pid: int) -> int:
    """VmRSS of a process in bytes (from /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, from /proc/stat; steal not counted)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        busy = f[0] + f[1] + f[2] + f[5] + f[6]  # user nice system irq softirq
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


class CpuMeter:
    """CPU used by a set of pids (and this process) between start() and stop(), in cores.

    Also the whole machine's busy cores and, from the difference, `others_cores`: CPU that
    processes outside this benchmark used meanwhile (other work on a shared machine)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.t0 = 0.0
        self.c0: dict[str, float] = {}
        self.m0 = 0.0

    def start(self) -> CpuMeter:
        self.t0 = time.perf_counter()
        self.c0 = {n: tree_cpu_seconds(p) for n, p in self.pids.items()}
        self.c0["generator"] = self_cpu_seconds()
        self.m0 = machine_busy_seconds()
        return self

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self.t0
        out = {n: tree_cpu_seconds(p) - self.c0[n] for n, p in self.pids.items()}
        out["generator"] = self_cpu_seconds() - self.c0["generator"]
        machine = machine_busy_seconds() - self.m0
        out["machine"] = machine
        out["others"] = max(0.0, machine - sum(v for k, v in out.items() if k != "machine"))
        # fraction of one core during the window; to a millionth: a per-request figure derived
        # from it (cores x wall / requests) must not be quantised to a thousandth of a core,
        # which at a few requests a second is most of a millisecond per request
        return {f"{n}_cores": round(v / wall, 6) for n, v in out.items()} | {"wall_s": round(wall, 3)}


# --------------------------------------------------------------------------
# Results and plots
# --------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_gb": round(mem / 2**30, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "git_head": commit,
    }


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "benchmark": name,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        **data,
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    log(f"wrote {path.relative_to(REPO)}")
    return path


def pyplot():  # type: ignore[no-untyped-def]
    """matplotlib.pyplot (Agg backend), or None with a message."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        log("matplotlib is not installed: skipping plots (pip install matplotlib to get PNGs)")
        return None


def save_plot(fig: Any, name: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"wrote {path.relative_to(REPO)}")
