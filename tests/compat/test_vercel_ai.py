"""The Vercel AI SDK (`generateText`, `streamText`) against the gateway, with a tool and reasoning."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.compat.conftest import COMPAT_DIR, need
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def run_node(mode: str, gateway: Gateway) -> dict:
    need("the Vercel AI SDK (npm, tests/compat)", (COMPAT_DIR / "node_modules" / "ai").exists())
    done = subprocess.run(
        ["node", str(COMPAT_DIR / "vercel_ai.mjs"), mode, f"{gateway.url}/v1", gateway.key, MODEL],
        cwd=COMPAT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["generate", "stream", "stateless"])
def test_vercel_ai_sdk_tool_loop_with_reasoning(gateway: Gateway, scripted: ScriptedUpstream, mode: str) -> None:
    from responses_api.models import Provider

    Provider.objects.update(options={"send_reasoning": True})  # shows what the client sent back
    scripted.enqueue(
        MODEL,
        Reply(
            reasoning="Look it up.",
            tool_calls=[{"id": "call_w", "name": "get_weather", "arguments": {"city": "Paris"}}],
        ),
        Reply(text="It is sunny in Paris."),
    )
    result = run_node(mode, gateway)
    assert result["text"] == "It is sunny in Paris."
    assert result["reasoning"] == "Look it up."  # shown, not empty: the reasoning arrives as text
    tool_message = next(m for m in scripted.requests[-1].body["messages"] if m["role"] == "tool")
    assert "Sunny in Paris, 21C" in tool_message["content"]
    assistant = next(m for m in scripted.requests[-1].body["messages"] if m["role"] == "assistant")
    if mode == "stateless":  # the reasoning item went back sealed, and the gateway opened it
        assert assistant["reasoning_content"] == "Look it up."
    if mode == "stream":
        assert {"reasoning-delta", "tool-call", "tool-result", "text-delta"} <= set(result["parts"])
