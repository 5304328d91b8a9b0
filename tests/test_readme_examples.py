"""Every example README.md marks `<!-- example: embedded -->` runs as written against the embedded
default: the bundled SmolLM2 on llama.cpp behind the routes `scripts/run` configures
(gateway_up.local_config), with only the README's URL and key replaced by the test gateway's.

A marked Python block runs with this venv's interpreter, a JavaScript block with node against the
compatibility suite's node_modules, and a plain or bash block's `curl` commands with bash (curl's
answer must be a completed or incomplete response). An example fails on a non-zero exit.
Issue 51: the Agents SDK example failed on the bundled model (`tools=[...]`, and an answer that
ran to the length cap is `incomplete`, which the SDK raises on).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.harness import Gateway

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARK = "<!-- example: embedded -->"
NODE_MODULES = ROOT / "tests" / "compat" / "node_modules"
# What the README writes for the gateway and its key.
README_URL = "http://127.0.0.1:8000"
README_KEY = re.compile(r"sk-gw-[0-9a-f]*_?\.\.\.")
# A run of the bundled model on a shared 2-core machine: a few short answers, well under this.
EXAMPLE_TIMEOUT = 300


@dataclass(frozen=True)
class Example:
    line: int
    language: str
    code: str

    @property
    def id(self) -> str:
        return f"README.md:{self.line}:{self.language or 'text'}"


def marked_examples(text: str) -> list[Example]:
    """The fenced blocks right after a MARK line."""
    lines = text.splitlines()
    examples = []
    for index, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        fence = lines[index + 1]
        assert fence.startswith("```"), f"README.md:{index + 1}: {MARK} must be followed by a fenced block"
        end = lines.index("```", index + 2)
        examples.append(Example(index + 2, fence[3:].strip(), "\n".join(lines[index + 2 : end]) + "\n"))
    return examples


def curl_commands(code: str) -> list[str]:
    """The `curl` commands of a shell block or a console transcript, with their continuation lines."""
    commands, current = [], None
    for line in code.splitlines():
        if current is None and line.lstrip().startswith("curl "):
            current = [line]
        elif current is not None:
            current.append(line)
        if current is not None and not line.rstrip().endswith("\\"):
            commands.append("\n".join(current))
            current = None
    return commands


EXAMPLES = marked_examples(README.read_text())


def test_the_readme_marks_its_embedded_examples() -> None:
    languages = sorted({e.language for e in EXAMPLES})
    assert languages == ["", "js", "python"], languages
    assert sum(len(curl_commands(e.code)) for e in EXAMPLES if e.language in ("", "bash")) >= 1
    assert any("agents" in e.code for e in EXAMPLES)  # the Agents SDK example is one of them


@pytest.fixture
def embedded(gateway: Gateway, local_model_url: str) -> Iterator[Gateway]:
    """The test gateway with scripts/run's routes (`local`, `smollm2`) to the bundled model."""
    from responses_api.management.commands.gateway_up import local_config
    from responses_api.ops.config_sync import sync_config
    from responses_api.orchestration.routing import clear_cache

    port = int(local_model_url.rsplit(":", 1)[1].split("/")[0])
    sync_config(local_config(port))
    clear_cache()
    yield gateway


def _concrete(code: str, gateway: Gateway) -> str:
    return README_KEY.sub(gateway.key, code.replace(README_URL, gateway.url))


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT, env=env, check=False)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_the_example_runs_against_the_bundled_model(example: Example, embedded: Gateway, tmp_path: Path) -> None:
    code = _concrete(example.code, embedded)
    # No OpenAI key or base URL of the developer's may leak in or redirect a client.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    if example.language == "python":
        done = _run([sys.executable, "-c", code], tmp_path, env)
    elif example.language == "js":
        node = shutil.which("node")
        if node is None or not (NODE_MODULES / "ai").exists():
            message = "node and tests/compat/node_modules are needed (scripts/test installs them)"
            if os.environ.get("GATEWAY_REQUIRE_COMPAT") == "1":
                pytest.fail(message)
            pytest.skip(message)
        (tmp_path / "node_modules").symlink_to(NODE_MODULES)
        (tmp_path / "example.mjs").write_text(code)
        done = _run([node, "example.mjs"], tmp_path, env)
    else:
        commands = curl_commands(code)
        assert commands, f"{example.id}: a marked shell block without a curl command"
        for command in commands:
            done = _run(["bash", "-c", command], tmp_path, env)
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            assert answer.get("status") in ("completed", "incomplete"), answer
        return
    assert done.returncode == 0, f"{example.id} failed:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{example.id} printed nothing"


def test_the_one_file_test_command_installs_what_it_needs() -> None:
    """Issue 51: the Development section's `pytest tests/test_deploy.py` failed in a checkout that
    only ran scripts/run (no pytest in its venv): the command goes through scripts/test, or says
    to install the test extra first."""
    text = README.read_text()
    section = text[text.index("## Development") :]
    paragraph = section[section.index("Run one file") :][:800]
    assert "bash scripts/test tests/test_deploy.py" in paragraph
    assert "pip install -e '.[test]'" in paragraph.split(".venv/bin/python -m pytest")[0]
