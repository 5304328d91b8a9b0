"""`input_transformations` (openai 3.4x, read by Codex 0.171): the reasoning items of the context
a model call was not given, with their ids and the SDK's reason; absent when none was withheld."""

from __future__ import annotations

import pytest

from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def test_reasoning_made_elsewhere_is_listed_as_withheld(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    scripted.enqueue(MODEL, Reply(reasoning="thinking it over", text="first"))
    scripted.set_default("claude-up", Reply(text="second"))
    client = anthropic.openai()
    first = client.responses.create(model=MODEL, input="hi")
    assert first.input_transformations is None  # nothing withheld: absent
    (reasoning,) = [item for item in first.output if item.type == "reasoning"]
    # Continued on Anthropic: the Chat Completions upstream's reasoning carries no Anthropic
    # signature, so it is not sent, and the response says so.
    second = client.responses.create(model=CLAUDE, input="go on", previous_response_id=first.id)
    assert second.input_transformations is not None
    assert [(t.id, t.type, t.action, t.reason) for t in second.input_transformations] == [
        (reasoning.id, "reasoning", "removed", "model_mismatch")
    ]
    assert "thinking it over" not in str(scripted.requests[-1].body)
    with anthropic.http() as http:  # streamed: on the terminal event too
        raw = http.post(
            "/v1/responses", json={"model": CLAUDE, "input": "more", "previous_response_id": first.id, "stream": True}
        ).content
    assert [t["id"] for t in validate_sse(raw)["input_transformations"]] == [reasoning.id]
