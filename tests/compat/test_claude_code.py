"""Claude Code (`claude -p`, the pinned `@anthropic-ai/claude-code` of tests/compat/package.json)
against the gateway's Anthropic Messages front door (`/v1/messages`, issue 57): a tool loop that
writes a file, over a Chat Completions route and an Anthropic route.

Claude Code runs with a throwaway home, ANTHROPIC_BASE_URL at the gateway and the gateway's key
in ANTHROPIC_API_KEY; its model names (the main one and its small fast one) are the gateway's
route names (README, "Claude Code"). It refuses `--dangerously-skip-permissions` as root, so the
tool it may use is allowed by name (`--allowedTools Write`). The scripted upstream plays the
model: asked with Claude Code's tools, it calls `Write`; given the tool's result, it answers.
The `anthropic-beta` values Claude Code sends are recorded and each must be one the surface
table classifies (protocol/surface.py ANTHROPIC_BETAS).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from responses_api.protocol.surface import ANTHROPIC_BETAS
from tests.compat.conftest import node_tool
from tests.support.access_log import Lines
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream


def run_claude(gateway: Gateway, workdir: Path, home: Path, prompt: str, model: str) -> subprocess.CompletedProcess:
    # GATEWAY_CLAUDE_BIN: a Claude Code installed elsewhere (tried before tests/compat's npm ci has it).
    claude = Path(os.environ["GATEWAY_CLAUDE_BIN"]) if os.environ.get("GATEWAY_CLAUDE_BIN") else node_tool("claude")
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_"))}
    env.update(
        HOME=str(home),
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        ANTHROPIC_BASE_URL=gateway.url,
        ANTHROPIC_API_KEY=gateway.key,
        ANTHROPIC_MODEL=model,
        # Its small fast model (titles, summaries): a route too.
        ANTHROPIC_SMALL_FAST_MODEL=model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
        # Nothing else may leave the machine in a test: no telemetry, updates or error reports.
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        NO_COLOR="1",
    )
    return subprocess.run(
        [str(claude), "-p", prompt, "--allowedTools", "Write", "--output-format", "json", "--model", model],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _has_write_tool(body: dict[str, Any]) -> bool:
    names = [t.get("name") or (t.get("function") or {}).get("name") for t in body.get("tools") or []]
    return "Write" in names


@pytest.mark.parametrize("kind", ["chat", "anthropic"])
def test_claude_code_writes_a_file_through_the_gateway(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    tmp_path: Path,
    kind: str,
    request: pytest.FixtureRequest,
    access_log: Lines,
) -> None:
    if kind == "chat":
        model, upstream_model = MODEL, MODEL
    else:
        from tests.responses_api.test_anthropic import CLAUDE

        request.getfixturevalue("anthropic")
        model, upstream_model = CLAUDE, "claude-up"
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    wrote: list[bool] = []

    def respond(body: dict[str, Any]) -> Reply:
        if not _has_write_tool(body):
            return Reply(text="Hello file")  # the small fast model's chores (a title, a summary)
        if not wrote:
            wrote.append(True)
            return Reply(
                tool_calls=[
                    {"id": "toolu_write1", "name": "Write", "arguments": {"file_path": str(target), "content": "hi\n"}}
                ]
            )
        return Reply(text="I wrote hello.txt.")

    scripted.set_responder(upstream_model, respond)
    done = run_claude(gateway, work, tmp_path / "home", "Write hi into hello.txt", model)
    assert done.returncode == 0, f"claude failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert target.read_text() == "hi\n"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.get("is_error") is False and "hello.txt" in result.get("result", "")
    # Stored linear in the new messages: the turn after the tool call continues the stored turn
    # that made it (its input only the tool's result), not a copy of the conversation.
    from responses_api.models import Response, ResponseItem

    chained = [r for r in Response.objects.filter(tenant_id=gateway.tenant_id) if r.previous_response_id]
    assert chained, "Claude Code's second request continues its first stored turn"
    inputs = ResponseItem.objects.filter(response_id=chained[0].id, role=0).select_related("item")
    assert [link.item.type for link in inputs] == ["function_call_output"]
    lines = [vars(r) for r in access_log.records if getattr(r, "path", None) == "/v1/messages"]
    print([(line["status"], line.get("error_param"), line.get("model")) for line in lines])
    assert lines and all(line["status"] == 200 for line in lines)
    betas = {beta.strip() for line in lines for beta in line.get("anthropic_beta", "").split(",") if beta.strip()}
    print("anthropic-beta values sent:", sorted(betas))
    if kind == "anthropic":  # passed on as sent
        sent = {
            b.strip()
            for r in scripted.requests
            if r.path == "/v1/messages"
            for b in r.headers.get("anthropic-beta", "").split(",")
        }
        assert betas <= sent
    unknown = betas - ANTHROPIC_BETAS.keys()
    assert not unknown, f"betas Claude Code sends that the surface table does not classify: {sorted(unknown)}"
