"""Throwaway PostgreSQL and Redis servers for one test run.

``start_postgres`` and ``start_redis`` start real servers on free loopback
ports, wait until they answer and return handles with ``.url``, ``.port`` and
``.stop()``. Durability is switched off (``fsync=off`` and friends, no Redis
persistence) because the data dies with the run anyway.

This module must not import Django (or anything that does): the pytest plugin
in ``pytest_servers`` calls it *before* pytest-django reads the settings, so
that the settings see ``DATABASE_URL`` and ``REDIS_URL``.

Robustness, because a leaked server outlives CI runs on the same machine:

* every server is a direct child process (no ``pg_ctl``/``--daemonize``
  double fork), so ``stop()`` can signal it and ``wait()`` for it: no zombies;
* all live servers are stopped by an ``atexit`` hook if the caller forgets or a
  test run crashes with an exception;
* where util-linux ``setpriv`` exists, the server gets a parent-death signal,
  so it also goes away when the test process is killed outright (SIGKILL, a
  CI timeout), which no ``atexit`` hook survives.

PostgreSQL refuses to run as root. When we are root, ``initdb`` and
``postgres`` run as an unprivileged system user (``gatewaytest``, created with
``useradd --system`` when missing, ``nobody`` as the last resort), and the
cluster lives in a directory that user can reach.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Self

from responses_api.ops.processes import stop_process

__all__ = [
    "INSTALL_HINT",
    "PostgresServer",
    "RedisServer",
    "ServerBinaryMissing",
    "ServerStartError",
    "find_postgres_bindir",
    "find_redis_server",
    "make_run_dir",
    "start_postgres",
    "start_redis",
]

INSTALL_HINT = "run scripts/test, which installs them"

# The system user that owns and runs throwaway clusters when we are root.
PG_SYSTEM_USER = os.environ.get("GATEWAY_TEST_PG_USER", "gatewaytest")
# The superuser role created by initdb (``-U``): fixed, whatever OS user runs
# the cluster, so URLs look the same for root and non-root runs.
PG_ROLE = "postgres"
# Out-of-tree cluster directories (see _cluster_root) start with this prefix,
# so that ones left behind by a killed run can be found and swept.
_TMP_PREFIX = "gateway-test-pg-"
# How many times to retry on a lost race for a "free" port (another process,
# e.g. a second xdist worker, may grab it between our probe and the bind).
_PORT_ATTEMPTS = 5
# sockaddr_un.sun_path is 108 bytes on Linux, including the trailing NUL.
_MAX_UNIX_SOCKET_PATH = 107


class ServerStartError(RuntimeError):
    """A test server could not be started; the message carries its log tail."""


class ServerBinaryMissing(ServerStartError):
    """The server's binaries are not installed on this machine."""


class _PortInUse(Exception):
    """The server lost the race for its port; retry with another one."""


# --------------------------------------------------------------------------
# Process bookkeeping shared by both servers.
# --------------------------------------------------------------------------

_live: list[_ManagedServer] = []
_atexit_registered = False


def _stop_all_at_exit() -> None:
    # Copy: stop() removes the server from the list.
    for server in list(_live):  # noqa: PERF101 - stop() mutates _live
        with contextlib.suppress(Exception):
            server.stop()


class _ManagedServer:
    """A server running as our direct child, stopped by signal + wait."""

    #: Signal that shuts the server down quickly without losing our sanity.
    stop_signal: int = signal.SIGTERM

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        log_file: IO[bytes],
        log_path: Path,
        cleanup_dir: Path | None,
    ) -> None:
        self._proc = proc
        self._log_file = log_file
        self.log_path = log_path
        self._cleanup_dir = cleanup_dir
        # After os.fork() the child inherits this object and the atexit hook;
        # only the process that started the server may stop it.
        self._owner_pid = os.getpid()
        self._stopped = False
        global _atexit_registered
        _live.append(self)
        if not _atexit_registered:
            atexit.register(_stop_all_at_exit)
            _atexit_registered = True

    @property
    def pid(self) -> int:
        return self._proc.pid

    def is_running(self) -> bool:
        return not self._stopped and self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and reap it. Idempotent."""
        if self._stopped or os.getpid() != self._owner_pid:
            return
        self._stopped = True
        if self in _live:
            _live.remove(self)
        stop_process(self._proc, sig=self.stop_signal, timeout=timeout)
        self._log_file.close()
        if self._cleanup_dir is not None:
            shutil.rmtree(self._cleanup_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- outages: stop the process, keep its data and port, start it again ---------
    def _respawn_as(self, command: list[str], **popen_kwargs: Any) -> None:
        self._respawn = (command, popen_kwargs)

    def halt(self) -> None:
        """Stop the server's process (as a crash or an operator would), keeping its data
        directory and port for `resume()`."""
        stop_process(self._proc, sig=self.stop_signal, timeout=10.0)

    def resume(self, timeout: float = 30.0) -> None:
        command, popen_kwargs = self._respawn
        self._log_file.close()
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
        self._proc = subprocess.Popen(command, **popen_kwargs, stdout=self._log_file, stderr=subprocess.STDOUT)
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        raise NotImplementedError


def _free_port() -> int:
    """A TCP port that was free a moment ago (callers retry on a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pdeathsig_prefix(signame: str) -> list[str]:
    """A command prefix that makes the server die with its parent.

    ``setpriv --pdeathsig`` sets PR_SET_PDEATHSIG and execs the server, which
    keeps our process as its parent. (A ``preexec_fn`` calling prctl would do
    the same but is unsafe when threads exist.) Caveat of the kernel feature:
    the signal fires when the *thread* that spawned the child exits, so
    servers must be started from a thread that lives as long as they should,
    i.e. the main thread in pytest.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or not _setpriv_has_pdeathsig(setpriv):
        return []
    return [setpriv, "--pdeathsig", signame, "--"]


_setpriv_checked: dict[str, bool] = {}


def _setpriv_has_pdeathsig(setpriv: str) -> bool:
    # --pdeathsig appeared in util-linux 2.33; older ones would fail the spawn.
    if setpriv not in _setpriv_checked:
        try:
            out = subprocess.run([setpriv, "--help"], check=False, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _setpriv_checked[setpriv] = "--pdeathsig" in out
    return _setpriv_checked[setpriv]


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


# --------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------


class PostgresServer(_ManagedServer):
    """A running throwaway PostgreSQL cluster; see ``start_postgres``."""

    # SIGQUIT is the postmaster's "immediate shutdown", exactly what
    # ``pg_ctl stop -m immediate`` sends; we hold the process, so we send it
    # ourselves and can wait() for it.
    stop_signal = signal.SIGQUIT

    def __init__(
        self,
        *,
        proc: subprocess.Popen[bytes],
        log_file: IO[bytes],
        log_path: Path,
        cleanup_dir: Path | None,
        host: str,
        port: int,
        user: str,
        database: str,
        data_dir: Path,
        bindir: Path,
    ) -> None:
        super().__init__(proc, log_file, log_path, cleanup_dir)
        self.host = host
        self.port = port
        self.user = user
        self.database = database
        self.data_dir = data_dir
        self.bindir = bindir

    @property
    def url(self) -> str:
        """``postgres://postgres@127.0.0.1:PORT/gateway`` (trust auth, no password)."""
        return f"postgres://{self.user}@{self.host}:{self.port}/{self.database}"

    def __repr__(self) -> str:
        return f"<PostgresServer {self.url} pid={self.pid}>"

    def _wait_ready(self, timeout: float) -> None:
        _wait_postgres_ready(self, self.data_dir, self.log_path, timeout)


def find_postgres_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``.

    Looks at, in order: ``$GATEWAY_TEST_PG_BINDIR``, ``pg_config --bindir``,
    ``/usr/lib/postgresql/<highest version>/bin`` (Debian keeps the server
    off PATH), then ``initdb`` on PATH (symlinks resolved, so the sibling
    ``createdb`` is found too).
    """
    candidates: list[Path] = []
    override = os.environ.get("GATEWAY_TEST_PG_BINDIR")
    if override:
        candidates.append(Path(override))
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], check=False, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            candidates.append(Path(out))

    def version_key(path: str) -> tuple[int, ...]:
        version = Path(path).parent.name
        return tuple(int(part) for part in re.findall(r"\d+", version)) or (0,)

    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key, reverse=True)]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in ("initdb", "postgres")):
            return bindir
    raise ServerBinaryMissing(
        "PostgreSQL server binaries (initdb, postgres) not found "
        f"(looked in: {', '.join(map(str, candidates)) or 'PATH'}); {INSTALL_HINT} "
        "(Debian package postgresql), or set GATEWAY_TEST_DB=sqlite to run without."
    )


def _ensure_system_user() -> tuple[int, int]:
    """(uid, gid) of an unprivileged user to run PostgreSQL as, for root."""
    name = PG_SYSTEM_USER
    try:
        entry = pwd.getpwnam(name)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    # Parallel xdist workers may race here: useradd locks /etc/passwd, the
    # loser fails, and the retry below then finds the winner's user.
    for _ in range(5):
        try:
            subprocess.run(
                [
                    useradd,
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    name,
                ],
                check=False,  # judged by getpwnam below
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            break
        try:
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            time.sleep(0.2)
    # No useradd (or it keeps failing): nobody exists everywhere and is
    # unprivileged, which is all PostgreSQL needs.
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _traversable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether uid/gid may search every directory from / down to ``path``."""
    path = path.resolve()
    for directory in [path, *path.parents]:
        try:
            st = directory.stat()
        except OSError:
            return False
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def make_run_dir(prefix: str, parent: Path | None = None) -> Path:
    """A fresh temp dir that records its owner, so a later run can sweep it.

    Dirs that ``stop()``/atexit would have removed survive only a SIGKILLed
    run; each can hold a ~40 MB cluster. So first remove earlier dirs with
    the same prefix whose owner process is gone, then make a new one.
    """
    parent = Path(parent or tempfile.gettempdir())
    for candidate in parent.glob(prefix + "*"):
        try:
            owner = int((candidate / "owner.pid").read_text().strip())
        except (OSError, ValueError):
            continue  # not ours, or being created right now
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(candidate, ignore_errors=True)
        except PermissionError:
            pass  # alive, owned by another user
    run_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (run_dir / "owner.pid").write_text(f"{os.getpid()}\n")
    return run_dir


def _cluster_root(base_dir: Path, ident: tuple[int, int] | None) -> tuple[Path, Path | None]:
    """Directory for the cluster, plus the directory to delete on stop (if any).

    Normally ``base_dir/postgres``. When we are root and the unprivileged
    user cannot reach ``base_dir`` (pytest's ``/tmp/pytest-of-root`` is
    0700), use a fresh directory in the system temp dir instead; changing
    the modes of the caller's directories would be worse.
    """
    if ident is None or _traversable_by(base_dir, *ident):
        root = base_dir / "postgres"
        root.mkdir(parents=True, exist_ok=True)
        if ident is not None:
            os.chown(root, *ident)
        return root, None
    tmp = Path(tempfile.gettempdir())
    if not _traversable_by(tmp, *ident):
        tmp = Path("/tmp")
    root = make_run_dir(_TMP_PREFIX, tmp)
    os.chown(root, *ident)
    # Leave a pointer where the caller would look for the cluster.
    with contextlib.suppress(OSError):
        (base_dir / "postgres-location.txt").write_text(f"{root}\n")
    return root, root


def _pg_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    # A LANG naming a locale that isn't installed makes initdb fail; C is
    # always there. TZ=UTC spares initdb its slow scan of the zoneinfo tree.
    env.update(LC_ALL="C", LANG="C", TZ="UTC")
    return env


def _identity_kwargs(ident: tuple[int, int] | None) -> dict[str, Any]:
    if ident is None:
        return {}
    uid, gid = ident
    # Popen switches identity in C between fork and exec (thread-safe, unlike
    # a preexec_fn); extra_groups=[] drops root's supplementary groups.
    return {"user": uid, "group": gid, "extra_groups": []}


def start_postgres(
    base_dir: Path,
    *,
    database: str = "gateway",
    timeout: float = 60.0,
    settings: dict[str, str] | None = None,
) -> PostgresServer:
    """Initialise and start a throwaway cluster under ``base_dir``.

    ``settings``: more server settings (``-c name=value``), e.g.
    ``shared_preload_libraries`` for bench/pg_statements.py.

    Trust authentication for role ``postgres``, listening on 127.0.0.1 at a
    free port, with a database ``database`` created. Raise
    ``ServerBinaryMissing`` if PostgreSQL isn't installed and
    ``ServerStartError`` (with the server log) if it doesn't come up.
    """
    base_dir = Path(base_dir)
    base_dir.mkdir(parents=True, exist_ok=True)
    bindir = find_postgres_bindir()
    # initdb and postgres exit with "cannot be run as root".
    ident = _ensure_system_user() if os.geteuid() == 0 else None
    root, cleanup_dir = _cluster_root(base_dir, ident)
    data_dir = root / "data"
    env = _pg_env()
    identity = _identity_kwargs(ident)

    try:
        initdb = subprocess.run(
            [
                str(bindir / "initdb"),
                "--pgdata",
                str(data_dir),
                "--username",
                PG_ROLE,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-locale",
                "--no-sync",  # the cluster is thrown away, skip the fsyncs
            ],
            check=False,  # judged below, with initdb's output in the error
            cwd=root,  # root's own cwd may be unreadable for the server user
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            **identity,
        )
    except BaseException:
        if cleanup_dir is not None:
            shutil.rmtree(cleanup_dir, ignore_errors=True)
        raise
    if initdb.returncode != 0:
        if cleanup_dir is not None:
            shutil.rmtree(cleanup_dir, ignore_errors=True)
        raise ServerStartError(f"initdb failed (exit {initdb.returncode}):\n{initdb.stdout.decode(errors='replace')}")

    sock_dir = root / "sock"
    sock_dir.mkdir(exist_ok=True)
    if ident is not None:
        os.chown(sock_dir, *ident)
    # The socket is only a convenience for psql debugging (tests use TCP), so
    # when the path is too long for sun_path, go without rather than fail.
    socket_setting = str(sock_dir) if len(str(sock_dir)) + 16 <= _MAX_UNIX_SOCKET_PATH else ""

    log_path = root / "postgres.log"
    for _attempt in range(_PORT_ATTEMPTS):
        port = _free_port()
        # "wb": a retry's log must not show the previous attempt's bind error.
        log_file = open(log_path, "wb")  # noqa: SIM115 - closed by stop()
        command = [
            *_pdeathsig_prefix("SIGQUIT"),
            str(bindir / "postgres"),
            "-D",
            str(data_dir),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={socket_setting}",
            # Durability buys nothing for a cluster that dies with the run.
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "logging_collector=off",
            *(arg for name, value in (settings or {}).items() for arg in ("-c", f"{name}={value}")),
        ]
        popen_kwargs = dict(
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            # Own session: a Ctrl-C in the terminal reaches pytest, which then
            # stops the server in order, instead of the server directly.
            start_new_session=True,
            **identity,
        )
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, **popen_kwargs)
        server = PostgresServer(
            proc=proc,
            log_file=log_file,
            log_path=log_path,
            cleanup_dir=None,  # set below, once the start has succeeded
            host="127.0.0.1",
            port=port,
            user=PG_ROLE,
            database=database,
            data_dir=data_dir,
            bindir=bindir,
        )
        try:
            _wait_postgres_ready(server, data_dir, log_path, timeout)
            _create_database(server, env, timeout)
        except _PortInUse:
            server.stop()
            continue
        except BaseException:
            server.stop()
            if cleanup_dir is not None:
                shutil.rmtree(cleanup_dir, ignore_errors=True)
            raise
        server._cleanup_dir = cleanup_dir
        server._respawn_as(command, **popen_kwargs)
        return server
    if cleanup_dir is not None:
        shutil.rmtree(cleanup_dir, ignore_errors=True)
    raise ServerStartError(f"PostgreSQL found no free port in {_PORT_ATTEMPTS} attempts")


def _wait_postgres_ready(server: PostgresServer, data_dir: Path, log_path: Path, timeout: float) -> None:
    # postmaster.pid's 8th line is the postmaster status, "ready" once it
    # accepts connections (what pg_ctl -w polls, without the pg_ctl process).
    pid_file = data_dir / "postmaster.pid"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = server._proc.poll()
        if code is not None:
            log = _log_tail(log_path)
            if "could not bind" in log or "Address already in use" in log:
                raise _PortInUse()
            raise ServerStartError(f"postgres exited with {code} during start-up:\n{log}")
        try:
            lines = pid_file.read_text().splitlines()
        except OSError:
            lines = []
        if len(lines) >= 8 and lines[7].strip() == "ready":
            return
        time.sleep(0.02)
    raise ServerStartError(f"postgres was not ready after {timeout:.0f}s:\n{_log_tail(log_path)}")


def _create_database(server: PostgresServer, env: dict[str, str], timeout: float) -> None:
    createdb = server.bindir / "createdb"
    command = [
        str(createdb),
        "--host",
        server.host,
        "--port",
        str(server.port),
        "--username",
        server.user,
        "--no-password",
        server.database,
    ]
    if os.access(createdb, os.X_OK):
        result = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise ServerStartError(f"createdb failed: {result.stderr.strip()}")
        return
    # No client binaries next to the server (unusual packaging): use the
    # driver, which the test dependencies install anyway.
    import psycopg

    admin_url = f"postgres://{server.user}@{server.host}:{server.port}/postgres"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=int(timeout)) as conn:
        conn.execute(f'CREATE DATABASE "{server.database}"')


# --------------------------------------------------------------------------
# Redis
# --------------------------------------------------------------------------


class RedisServer(_ManagedServer):
    """A running throwaway Redis; see ``start_redis``."""

    # Redis saves nothing on SIGTERM here (--save ''), so this is quick.
    stop_signal = signal.SIGTERM

    def __init__(
        self,
        *,
        proc: subprocess.Popen[bytes],
        log_file: IO[bytes],
        log_path: Path,
        host: str,
        port: int,
        data_dir: Path,
    ) -> None:
        super().__init__(proc, log_file, log_path, cleanup_dir=None)
        self.host = host
        self.port = port
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def _wait_ready(self, timeout: float) -> None:
        _wait_redis_ready(self, timeout)

    def __repr__(self) -> str:
        return f"<RedisServer {self.url} pid={self.pid}>"


def find_redis_server() -> Path:
    """``redis-server`` from ``$GATEWAY_TEST_REDIS_SERVER``, PATH or /usr/bin."""
    for candidate in (
        os.environ.get("GATEWAY_TEST_REDIS_SERVER"),
        shutil.which("redis-server"),
        "/usr/bin/redis-server",
        "/usr/local/bin/redis-server",
    ):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise ServerBinaryMissing(
        f"redis-server not found; {INSTALL_HINT} (Debian package redis-server), "
        "or set GATEWAY_TEST_DB=sqlite to run without."
    )


def start_redis(base_dir: Path, *, timeout: float = 30.0) -> RedisServer:
    """Start a throwaway Redis (no persistence) on a free loopback port.

    Raise ``ServerBinaryMissing`` if redis-server isn't installed and
    ``ServerStartError`` (with its log) if it doesn't answer PING.
    """
    binary = find_redis_server()
    data_dir = Path(base_dir) / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "redis.log"
    for _attempt in range(_PORT_ATTEMPTS):
        port = _free_port()
        # "wb": a retry's log must not show the previous attempt's bind error.
        log_file = open(log_path, "wb")  # noqa: SIM115 - closed by stop()
        command = [
            *_pdeathsig_prefix("SIGKILL"),
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data_dir),
            "--daemonize",
            "no",
            "--logfile",
            "",  # log to stdout, i.e. our log file
        ]
        popen_kwargs: dict[str, Any] = dict(
            cwd=data_dir, stdin=subprocess.DEVNULL, start_new_session=True
        )  # see start_postgres
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, **popen_kwargs)
        server = RedisServer(
            proc=proc,
            log_file=log_file,
            log_path=log_path,
            host="127.0.0.1",
            port=port,
            data_dir=data_dir,
        )
        try:
            _wait_redis_ready(server, timeout)
        except _PortInUse:
            server.stop()
            continue
        except BaseException:
            server.stop()
            raise
        server._respawn_as(command, **popen_kwargs)
        return server
    raise ServerStartError(f"Redis found no free port in {_PORT_ATTEMPTS} attempts")


def _redis_ping(host: str, port: int) -> bool:
    # Raw RESP inline command: no dependency on redis-py for the launcher.
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _wait_redis_ready(server: RedisServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = server._proc.poll()
        if code is not None:
            log = _log_tail(server.log_path)
            if "Address already in use" in log:
                raise _PortInUse()
            raise ServerStartError(f"redis-server exited with {code} during start-up:\n{log}")
        if _redis_ping(server.host, server.port):
            return
        time.sleep(0.02)
    raise ServerStartError(f"redis-server did not answer PING after {timeout:.0f}s:\n{_log_tail(server.log_path)}")
