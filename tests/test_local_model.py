"""The bundled local model (responses_api.ops.local_model) as a real upstream process.

Starts ``python -m responses_api.ops.local_model`` on a free loopback port, talks to its
OpenAI-compatible chat completions endpoint with httpx, and stops it. Skipped when the
optional packages are not installed (see ``local_model.INSTALL_HINT``); the checks of the
"not installed" path run everywhere.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from responses_api.ops import local_model
from responses_api.ops.local_model import (
    LOCAL_MODEL_NAME,
    LocalModelStartError,
    LocalModelUnavailable,
    free_port,
    local_model_available,
    start_local_model_process,
    stop_process,
)

needs_model = pytest.mark.skipif(
    not local_model_available(),
    reason=f"local model not installed ({local_model.INSTALL_HINT})",
)

Server = tuple[str, subprocess.Popen[bytes]]  # (base URL, process)

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Say hello in five words"},
]


@pytest.fixture(scope="module")
def local_server() -> Iterator[Server]:
    if not local_model_available():
        pytest.skip(f"local model not installed ({local_model.INSTALL_HINT})")
    port = free_port()
    proc = start_local_model_process(port, wait=60)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stop_process(proc)


@needs_model
def test_models_endpoint_lists_local_model(local_server: Server) -> None:
    base, _ = local_server
    resp = httpx.get(f"{base}/v1/models", timeout=10)
    assert resp.status_code == 200
    assert [m["id"] for m in resp.json()["data"]] == [LOCAL_MODEL_NAME]


@needs_model
def test_non_streaming_chat_completion(local_server: Server) -> None:
    base, _ = local_server
    resp = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": LOCAL_MODEL_NAME, "messages": MESSAGES, "max_tokens": 32},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == LOCAL_MODEL_NAME
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str) and message["content"].strip()
    assert body["choices"][0]["finish_reason"] in {"stop", "length"}
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 32
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@needs_model
def test_streaming_chat_completion_with_usage(local_server: Server) -> None:
    base, _ = local_server
    chunks: list[dict[str, Any]] = []
    done = False
    with httpx.stream(
        "POST",
        f"{base}/v1/chat/completions",
        json={
            "model": LOCAL_MODEL_NAME,
            "messages": MESSAGES,
            "max_tokens": 32,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        # The server may drop a keep-alive connection after a stream; don't reuse it.
        headers={"Connection": "close"},
        timeout=60,
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                done = True
                break
            chunks.append(json.loads(data))

    assert done, "stream did not end with [DONE]"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip()
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] in {"stop", "length"}
    # include_usage: one final chunk with empty choices carrying the totals.
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 32


@needs_model
def test_busy_port_gives_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LocalModelStartError, match="exited with code 1") as excinfo:
            start_local_model_process(port, wait=30)
    # The child's own log explains why.
    assert "bind" in str(excinfo.value)


@needs_model
def test_sigterm_ends_server_cleanly(local_server: Server) -> None:
    # A second server, so the module fixture's stays up for the other tests.
    proc = start_local_model_process(free_port(), wait=60)
    stop_process(proc, timeout=10)
    assert proc.returncode == 0  # exited on SIGTERM by itself, was not killed


def test_stop_process_is_idempotent() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    stop_process(proc)
    stop_process(proc)
    assert proc.returncode == -15  # SIGTERM sufficed


def test_missing_model_file_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(local_model.MODEL_PATH_ENV, str(tmp_path / "absent.gguf"))
    assert local_model.find_model_file() is None
    assert local_model_available() is False
    with pytest.raises(LocalModelUnavailable, match="pip install"):
        start_local_model_process(free_port(), wait=5)
