"""Codex CLI (`codex exec`, default features) against the gateway: a turn with a tool call.

Codex runs with a throwaway CODEX_HOME whose config.toml is the README's provider
block; the scripted upstream plays the model: it asks for `exec_command`, Codex
runs the command in the work directory and sends its output back, and the model
answers. What Codex sends (namespace tools, `web_search`, `store: false`, sealed
reasoning, `client_metadata`, ...) must be accepted as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.compat.conftest import node_tool
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

CONFIG = """\
model = "{model}"
model_provider = "gateway"
# Nothing else may leave the machine in a test: no update checks, no analytics, no feedback.
check_for_update_on_startup = false
[analytics]
enabled = false
[feedback]
enabled = false

[model_providers.gateway]
name = "Gateway"
base_url = "{base_url}/v1"
env_key = "GATEWAY_API_KEY"
wire_api = "responses"
"""


def run_codex(gateway: Gateway, workdir: Path, home: Path, prompt: str, *extra: str) -> subprocess.CompletedProcess:
    codex = node_tool("codex")
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(CONFIG.format(model=MODEL, base_url=gateway.url))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), GATEWAY_API_KEY=gateway.key, NO_COLOR="1", RUST_LOG="error")
    return subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "--json", *extra, prompt],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )


def events_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_codex_exec_completes_a_turn_with_a_tool_call(
    gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the answer is 42\n")
    scripted.enqueue(
        MODEL,
        Reply(
            reasoning="I should read the file.",
            tool_calls=[{"id": "call_read", "name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}],
        ),
        Reply(text="The notes say the answer is 42."),
    )
    done = run_codex(gateway, work, tmp_path / "home", "What do my notes say?")
    assert done.returncode == 0, f"codex failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    events = events_of(done.stdout)
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands and "cat notes.txt" in commands[0]["command"]
    assert "the answer is 42" in commands[0]["aggregated_output"]
    messages = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert messages[-1] == "The notes say the answer is 42."

    first, second = (r.body for r in scripted.requests[-2:])
    offered = {t["function"]["name"] for t in first["tools"]}
    assert "exec_command" in offered
    assert any("__" in name for name in offered), "Codex's namespace tools reach the model as functions"
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_read" and "the answer is 42" in tool_message["content"]


@pytest.mark.parametrize("feature", ["multi_agent"])
def test_codex_with_a_feature_switched_off_still_works(
    gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path, feature: str
) -> None:
    scripted.enqueue(MODEL, Reply(text="hello"))
    done = run_codex(gateway, tmp_path, tmp_path / "home", "Say hello", "--disable", feature)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [
        i["text"]
        for e in events_of(done.stdout)
        if e.get("type") == "item.completed"
        for i in [e["item"]]
        if i.get("type") == "agent_message"
    ] == ["hello"]
