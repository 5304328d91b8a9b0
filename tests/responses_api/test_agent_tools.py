"""Coding agents' requests end to end: every tool type, store: false replay, sealed reasoning.

The request bodies follow what Codex CLI sends (a namespace tool, `web_search`, a
custom `apply_patch` tool with a grammar, `include: ["reasoning.encrypted_content"]`,
`reasoning.summary`, `prompt_cache_key`, `client_metadata`, `store: false`), through
the real openai SDK and the gateway, with the scripted upstream playing the model.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.errors import error_body
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_response_object, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a command.",
        "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
    {
        "type": "namespace",
        "name": "collab",
        "description": "Sub-agents.",
        "tools": [
            {
                "type": "function",
                "name": "spawn_agent",
                "description": "Start one.",
                "strict": False,
                "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            }
        ],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
    },
    {"type": "web_search", "external_web_access": False},
]
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"


def codex_body(input_items: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "instructions": "You are a coding agent.",
        "input": input_items,
        "tools": TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "5f0c",
        "client_metadata": {"x-codex-turn": "1"},
        **extra,
    }


def stream(gateway: Gateway, body: dict[str, Any], key: str | None = None) -> tuple[dict[str, Any], Any]:
    with gateway.http(key) as http:
        raw = http.post("/v1/responses", json=body, headers={"x-codex-beta-features": "remote_compaction_v2"})
    assert raw.status_code == 200, raw.text
    return validate_sse(raw.text), raw


def test_a_codex_turn_with_tool_calls_and_a_stateless_replay(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add hello.txt"}]}
    scripted.enqueue(
        MODEL,
        Reply(
            reasoning="I should add the file.",
            tool_calls=[{"id": "call_patch", "name": "apply_patch", "arguments": {"input": PATCH}}],
        ),
    )
    first, raw = stream(gateway, codex_body([user]))
    assert raw.headers["x-gateway-dropped-tools"] == "web_search"
    reasoning, patch_call = first["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["summary"] == [{"type": "summary_text", "text": "I should add the file."}]
    assert reasoning["encrypted_content"].startswith("gwsealed1.")
    assert "I should add" not in reasoning["encrypted_content"]
    assert patch_call["type"] == "custom_tool_call" and patch_call["input"] == PATCH
    sent = scripted.requests[-1].body
    assert {t["function"]["name"] for t in sent["tools"]} == {"exec_command", "collab__spawn_agent", "apply_patch"}
    assert [t["type"] for t in first["tools"]] == ["function", "namespace", "custom"]

    # store: false, so the next turn carries the whole history back, outputs included.
    scripted.enqueue(
        MODEL, Reply(tool_calls=[{"id": "call_sub", "name": "collab__spawn_agent", "arguments": {"task": "review"}}])
    )
    history = [
        user,
        reasoning,
        patch_call,
        {"type": "custom_tool_call_output", "call_id": "call_patch", "output": "Done!"},
    ]
    second, _ = stream(gateway, codex_body(history))
    [sub] = second["output"]
    assert sub["type"] == "function_call" and (sub["namespace"], sub["name"]) == ("collab", "spawn_agent")
    messages = scripted.requests[-1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "apply_patch",
        "arguments": json.dumps({"input": PATCH}),
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_patch", "content": "Done!"}

    scripted.enqueue(MODEL, Reply(text="Added hello.txt."))
    third, _ = stream(
        gateway,
        codex_body([*history, sub, {"type": "function_call_output", "call_id": "call_sub", "output": "agent 1 done"}]),
    )
    assert third["output"][-1]["content"][0]["text"] == "Added hello.txt."
    assert scripted.requests[-1].body["messages"][-2]["tool_calls"][0]["function"]["name"] == "collab__spawn_agent"


def test_stored_chain_replays_every_item_type(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    tools = [{"type": "shell"}, {"type": "apply_patch"}, {"type": "local_shell"}]
    scripted.enqueue(
        MODEL,
        Reply(
            tool_calls=[
                {"id": "c1", "name": "shell", "arguments": {"commands": ["ls"]}},
                {"id": "c2", "name": "apply_patch", "arguments": {"type": "create_file", "path": "a", "diff": "+x"}},
                {"id": "c3", "name": "local_shell", "arguments": {"command": ["pwd"]}},
            ]
        ),
    )
    client = gateway.openai()
    first = client.responses.create(model=MODEL, input="go", tools=tools)
    assert [i.type for i in first.output] == ["shell_call", "apply_patch_call", "local_shell_call"]
    with gateway.http() as http:
        validate_response_object(http.get(f"/v1/responses/{first.id}").json())
    scripted.enqueue(MODEL, Reply(text="all done"))
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[
            {
                "type": "shell_call_output",
                "call_id": "c1",
                "output": [{"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
            },
            {"type": "apply_patch_call_output", "call_id": "c2", "status": "completed"},
            {"type": "local_shell_call_output", "id": "c3", "output": "/src"},
        ],
    )
    assert second.output_text == "all done"
    messages = scripted.requests[-1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool"]
    assert [c["function"]["name"] for c in messages[1]["tool_calls"]] == ["shell", "apply_patch", "local_shell"]
    assert [m["content"] for m in messages[2:]] == ["a\n\n(exit code 0)", "completed", "/src"]


def test_a_foreign_or_altered_reasoning_blob_is_refused(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(reasoning="plan", text="ok"))
    user = {"role": "user", "content": "hi"}
    first, _ = stream(gateway, codex_body([user]))
    reasoning = first["output"][0]
    sealed = reasoning["encrypted_content"]
    other_key, _ = make_key(tenant="other-tenant")
    for blob, key in ((sealed[:-4] + "AAAA", None), ("gAAAAB-openai-blob", None), (sealed, other_key)):
        with gateway.http(key) as http:
            raw = http.post(
                "/v1/responses", json=codex_body([user, {**reasoning, "encrypted_content": blob}], stream=False)
            )
        assert raw.status_code == 400, raw.text
        assert raw.json()["error"]["param"] == "input[1].encrypted_content"
    assert len(scripted.model_calls) == 1  # refused before any upstream call


def test_the_reasoning_comes_back_to_a_provider_that_takes_it(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Provider

    Provider.objects.update(options={"send_reasoning": True})
    scripted.enqueue(MODEL, Reply(reasoning="secret plan", text="step one"), Reply(text="step two"))
    user = {"role": "user", "content": "hi"}
    first, _ = stream(gateway, codex_body([user]))
    stripped = [
        {k: v for k, v in item.items() if k not in ("content", "summary")} | {"summary": []}
        if item["type"] == "reasoning"
        else item
        for item in first["output"]
    ]
    stream(gateway, codex_body([user, *stripped, {"role": "user", "content": "next"}]))
    assistant = scripted.requests[-1].body["messages"][2]
    assert assistant == {"role": "assistant", "content": "step one", "reasoning_content": "secret plan"}


def test_sdk_stream_helper_accepts_custom_tool_events(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[{"id": "c", "name": "apply_patch", "arguments": {"input": PATCH}}]))
    client = gateway.openai()
    with client.responses.stream(model=MODEL, input="patch it", tools=TOOLS[2:3]) as events:
        kinds = [e.type for e in events]
        final = events.get_final_response()
    assert "response.custom_tool_call_input.done" in kinds
    assert final.output[0].type == "custom_tool_call" and final.output[0].input == PATCH


def test_bad_custom_tool_is_a_400_naming_the_field(gateway: Gateway) -> None:
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL,
            input="x",
            tools=[{"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "web_search"}]}],
        )
    assert error_body(info.value)["param"] == "tools[0].tools[0].type"
