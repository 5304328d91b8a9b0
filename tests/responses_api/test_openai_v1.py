"""The strictest stream helper: openai 1.x's `responses.stream()` against the gateway, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.responses_api.test_streaming import CASES
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

OPENAI_V1 = Path(os.environ.get("GATEWAY_OPENAI_V1_PATH", Path(__file__).resolve().parents[2] / ".venv" / "openai1"))
CLIENT = Path(__file__).resolve().parents[1] / "support" / "openai_v1_client.py"


def run_v1(gateway: Gateway, case: str) -> dict:
    if not (OPENAI_V1 / "openai").is_dir():
        pytest.fail(f"openai 1.x is not installed at {OPENAI_V1}; scripts/test installs it")
    env = dict(os.environ, PYTHONPATH=str(OPENAI_V1))
    out = subprocess.run(
        [sys.executable, str(CLIENT), f"{gateway.url}/v1", gateway.key, MODEL, case],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["version"].startswith("1."), result
    return result


@pytest.mark.parametrize("case", ["text", "tool_call", "parallel_interleaved", "reasoning_and_text", "refusal"])
def test_openai_1x_stream_helper(gateway: Gateway, scripted: ScriptedUpstream, case: str) -> None:
    scripted.enqueue(MODEL, CASES[case])
    result = run_v1(gateway, case)
    assert "error" not in result, result
    assert result["status"] == "completed"
    assert result["events"][0] == "response.created" and result["events"][-1] == "response.completed"
    if case == "text":
        assert result["output_text"] == CASES["text"].text


def test_openai_1x_reports_mid_stream_failure(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="a long answer that will be cut", disconnect_after=3))
    result = run_v1(gateway, "failure")
    assert result.get("error") == "APIError", result
