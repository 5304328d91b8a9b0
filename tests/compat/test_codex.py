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
from tests.support.access_log import Lines
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

# The recommended setup (README, "Clients"): Codex's built-in OpenAI provider pointed at the
# gateway, which turns on remote compaction (compaction v2), and WebSocket mode.
OPENAI_CONFIG = """\
model = "{model}"
model_provider = "openai"
openai_base_url = "{base_url}/v1"
check_for_update_on_startup = false
[analytics]
enabled = false
[feedback]
enabled = false
"""


def run_codex(
    gateway: Gateway,
    workdir: Path,
    home: Path,
    prompt: str,
    *extra: str,
    model: str = MODEL,
    websockets: bool = False,
    openai_provider: bool = False,
    settings: str = "",
) -> subprocess.CompletedProcess:
    codex = node_tool("codex")
    home.mkdir(exist_ok=True)
    if openai_provider:
        config = OPENAI_CONFIG.format(model=model, base_url=gateway.url)
    else:
        config = CONFIG.format(model=model, base_url=gateway.url)
        if websockets:
            config += "supports_websockets = true\n"
    # Top-level keys go before the first table.
    head, _, tables = config.partition("[")
    (home / "config.toml").write_text(head + settings + "[" + tables)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), GATEWAY_API_KEY=gateway.key, NO_COLOR="1", RUST_LOG="error")
    if openai_provider:  # the built-in provider takes a key stored by `codex login`
        subprocess.run(
            [str(codex), "login", "--with-api-key"],
            input=gateway.key,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
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


# -- WebSocket mode, remote compaction, resume: over Chat Completions and Anthropic upstreams ----


def is_tool_result(body: dict, marker: str) -> bool:
    """Whether the upstream request carries a tool result containing `marker` (either dialect)."""
    return marker in json.dumps(body.get("messages", []))


def test_codex_over_websockets_runs_a_shell_tool_loop(
    gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path, upstream_model: tuple[str, str], access_log: Lines
) -> None:
    model, upstream = upstream_model
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the answer is 42\n")
    scripted.enqueue(
        upstream,
        Reply(tool_calls=[{"id": "call_read", "name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]),
        Reply(text="The notes say the answer is 42."),
    )
    done = run_codex(gateway, work, tmp_path / "home", "What do my notes say?", model=model, websockets=True)
    assert done.returncode == 0, f"codex failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    items = [e["item"] for e in events_of(done.stdout) if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands and "the answer is 42" in commands[0]["aggregated_output"]
    assert [i["text"] for i in items if i.get("type") == "agent_message"][-1] == "The notes say the answer is 42."
    # Every turn went over the socket: no POST /v1/responses, and the tool output's turn
    # continued the first by previous_response_id (Codex sends only the new items).
    turns = access_log.websocket_turns()
    assert len([t for t in turns if t.get("response_status") == "completed"]) >= 2, turns
    assert not [
        r
        for r in access_log.records
        if getattr(r, "method", None) == "POST" and getattr(r, "path", None) == "/v1/responses"
    ]
    assert is_tool_result(scripted.requests[-1].body, "the answer is 42")


# Codex's base instructions, as its pinned version sends them (tests/fixtures/codex/README.md).
BASE_INSTRUCTIONS = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "codex" / "base_instructions_item.json").read_text()
)["content"][0]["text"]
# Codex's `model_auto_compact_token_limit` here: above what a request costs right after a
# compaction (its instructions, skills, environment and about 4,600 tokens of tool schemas:
# about 9,900 tokens as the upstream below counts them), or Codex would compact in a loop; and
# below that plus one `cat notes.txt` output (about 2,800 tokens), so that each read compacts.
AUTO_COMPACT_LIMIT = 12_000


def strings(value: object) -> list[str]:
    """Every string of a JSON value, whole."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for inner in value.values() for s in strings(inner)]
    if isinstance(value, list):
        return [s for inner in value for s in strings(inner)]
    return []


def test_codex_remote_compaction_completes_and_the_session_continues(
    gateway: Gateway, scripted: ScriptedUpstream, tmp_path: Path, upstream_model: tuple[str, str], access_log: Lines
) -> None:
    """The built-in OpenAI provider at the gateway (`openai_base_url`) compacts remotely: a
    create whose last input item is `compaction_trigger`, answered by one compaction item.
    After it Codex's base instructions still reach the model (issue 46), and the session
    compacts again at its limit, without looping."""
    model, upstream = upstream_model
    summary = "SUMMARY: the user asked about notes.txt; it says the answer is 42."
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the answer is 42\n" + "padding line\n" * 1000)
    reads = {"n": 0}

    def respond(body: dict) -> Reply:
        # What a real upstream counts: the whole request, instructions and tool schemas included.
        cost = len(json.dumps(scripted.requests[-1].body)) // 4
        usage = {"prompt_tokens": cost, "completion_tokens": 20, "total_tokens": cost + 20}
        if "Summarize the conversation above" in json.dumps(body):
            return Reply(text=summary, usage=usage)
        reads["n"] += 1
        if reads["n"] <= 3:  # three reads of the file, each pushing the context past the limit
            call = {"id": f"call_read{reads['n']}", "name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}
            return Reply(tool_calls=[call], usage=usage)
        return Reply(text="The notes say the answer is 42.", usage=usage)

    scripted.set_responder(upstream, respond)
    settings = f"model_auto_compact_token_limit = {AUTO_COMPACT_LIMIT}\n"
    first = run_codex(
        gateway, work, tmp_path / "home", "What do my notes say?", model=model, openai_provider=True, settings=settings
    )
    assert first.returncode == 0, f"codex failed:\n{first.stdout[-3000:]}\n{first.stderr[-3000:]}"
    bodies = [r.body for r in scripted.requests]
    is_summary = ["Summarize the conversation above" in json.dumps(b) for b in bodies]
    from responses_api.models import Response

    usage = list(Response.objects.values_list("input_tokens", "output_tokens"))
    assert sum(is_summary) >= 2, f"Codex did not compact twice (usage of its responses: {usage})"
    assert sum(is_summary) <= 6, f"Codex compacted in a loop: {sum(is_summary)} compactions"
    # Every model call after the first compaction still carries Codex's base instructions,
    # byte-identical, beside the summary.
    after = [b for n, b in enumerate(bodies) if not is_summary[n] and any(is_summary[:n])]
    assert after, "no model call after the compaction"
    for body in after:
        texts = strings(body)
        assert BASE_INSTRUCTIONS in texts or any(BASE_INSTRUCTIONS in t for t in texts), "instructions lost"
        assert any(summary in t for t in texts)
    # The built-in provider speaks WebSocket mode: the compactions were some of its turns.
    compacted = [t for t in access_log.websocket_turns() if t.get("response_status") == "completed"]
    assert len(compacted) >= 6, compacted  # three reads, two compactions, the answer
    # The session goes on after the compaction: `exec resume` continues it, and its upstream
    # context starts at the compaction's summary (after Codex's instructions), not at the whole history.
    resumed = run_codex(
        gateway,
        work,
        tmp_path / "home",
        "And again?",
        "resume",
        "--last",
        model=model,
        openai_provider=True,
        settings=settings,
    )
    assert resumed.returncode == 0, f"resume failed:\n{resumed.stdout[-3000:]}\n{resumed.stderr[-3000:]}"
    last = scripted.requests[-1].body
    assert summary in json.dumps(last)
    assert any(BASE_INSTRUCTIONS in t for t in strings(last))
    assert json.dumps(last).count("Original token count") <= 1, "reads before the last compaction came back"
