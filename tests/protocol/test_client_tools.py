"""Every tool type of the Responses API through the pure core: parse, offer, call back, replay.

Namespace members, custom tools and client built-ins are offered to a Chat
Completions upstream as functions; the upstream's calls come back as the
items OpenAI's API emits (a namespaced `function_call`, `custom_tool_call`,
`shell_call`, ...), every stream through the strict validator; the items (and
the outputs a client sends back) replay as Chat Completions messages.
Reasoning: summaries on request, and sealed `encrypted_content`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from responses_api.protocol.chat import ChatOptions, build_chat_request, items_to_messages
from responses_api.protocol.deltas import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from responses_api.protocol.events import Event, EventBuilder
from responses_api.protocol.request import CreateRequest, parse_create_request
from responses_api.protocol.response import request_params, response_object
from responses_api.protocol.tools import allowed_tool_names
from tests.support.stream_validator import validate_events

pytestmark = pytest.mark.embedded

# The tools of a Codex CLI request, trimmed: plain functions, a namespace, a custom tool with a
# grammar, a hosted tool, and client built-ins.
CODEX_TOOLS: list[dict[str, Any]] = [
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
            },
            {"type": "function", "name": "wait", "parameters": {"type": "object", "properties": {}}},
        ],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
    },
    {"type": "web_search", "external_web_access": False},
    {"type": "local_shell"},
    {"type": "shell"},
]


def make_request(tools: list[dict[str, Any]] | None = None, **body: Any) -> CreateRequest:
    return parse_create_request({"model": "m", "input": "hi", "tools": CODEX_TOOLS if tools is None else tools, **body})


def make_builder(req: CreateRequest, **kw: Any) -> EventBuilder:
    response = response_object(
        response_id="resp_test0001",
        created_at=1756166400,
        status="in_progress",
        model=req.model,
        previous_response_id=None,
        params=request_params(req),
        output=[],
    )
    return EventBuilder(response, allowed_tools=allowed_tool_names(req.tool_choice, req.tools), tools=req.tools, **kw)


def run(req: CreateRequest, deltas: list[Any], **kw: Any) -> tuple[list[Event], dict[str, Any]]:
    builder = make_builder(req, **kw)
    events = builder.start()
    for delta in deltas:
        events += builder.feed(delta)
    events += builder.finish()
    terminal = validate_events(events, final_response=builder.response)
    return events, terminal


def call(index: int, name: str, arguments: Any, call_id: str | None = None) -> list[ToolCallDelta]:
    """One tool call, its arguments split in two fragments as upstreams stream them."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    half = len(text) // 2
    return [
        ToolCallDelta(index, call_id or f"call_{index}", name, text[:half]),
        ToolCallDelta(index, None, None, text[half:]),
    ]


# -- parsing and what the upstream is offered ---------------------------------------------------


def test_codex_tools_are_accepted_and_offered_as_functions() -> None:
    req = make_request()
    names = [t.name for t in req.tools]
    assert names == ["exec_command", "collab__spawn_agent", "collab__wait", "apply_patch", "local_shell", "shell"]
    assert [h.type for h in req.hosted_tools] == ["web_search"]
    body = build_chat_request(req, req.input_items, upstream_model="u", stream=True)
    offered = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert set(offered) == set(names)
    assert offered["apply_patch"]["parameters"]["required"] == ["input"]
    assert "start: /.+/s" in offered["apply_patch"]["parameters"]["properties"]["input"]["description"]
    assert offered["shell"]["parameters"]["required"] == ["commands"]


def test_the_response_reports_tools_as_sent_and_each_namespace_once() -> None:
    req = make_request()
    reported = request_params(req)["tools"]
    assert [t["type"] for t in reported] == ["function", "namespace", "custom", "local_shell", "shell"]
    assert reported[1] == CODEX_TOOLS[1] and reported[2] == CODEX_TOOLS[2]


def test_namespace_names_are_valid_upstream_function_names() -> None:
    req = make_request(
        [
            {
                "type": "namespace",
                "name": "mcp.github/tools",
                "description": "d",
                "tools": [{"type": "function", "name": "x" * 60}],
            }
        ]
    )
    [tool] = req.tools
    assert len(tool.name) <= 64 and all(c.isalnum() or c in "_-" for c in tool.name)
    assert (tool.item_name, tool.namespace) == ("x" * 60, "mcp.github/tools")


@pytest.mark.parametrize(
    ("choice", "forced"),
    [
        ({"type": "custom", "name": "apply_patch"}, "apply_patch"),
        ({"type": "function", "name": "spawn_agent"}, "collab__spawn_agent"),
        ({"type": "shell"}, "shell"),
    ],
)
def test_tool_choice_forces_the_offered_function(choice: dict[str, Any], forced: str) -> None:
    req = make_request(tool_choice=choice)
    body = build_chat_request(req, req.input_items, upstream_model="u", stream=False)
    assert body["tool_choice"] == {"type": "function", "function": {"name": forced}}


def test_a_hosted_tool_choice_is_degraded_to_auto() -> None:
    req = make_request(tool_choice={"type": "web_search_preview"})
    assert build_chat_request(req, req.input_items, upstream_model="u", stream=False)["tool_choice"] == "auto"


# -- calls back to items ----------------------------------------------------------------------


def test_namespace_call_names_its_namespace() -> None:
    req = make_request()
    events, terminal = run(req, [*call(0, "collab__spawn_agent", {"task": "lint"}), Finish("tool_calls")])
    [item] = terminal["output"]
    assert item["type"] == "function_call"
    assert (item["namespace"], item["name"]) == ("collab", "spawn_agent")
    assert json.loads(item["arguments"]) == {"task": "lint"}
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "spawn_agent"


def test_custom_tool_call_streams_its_input() -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch"
    events, terminal = run(make_request(), [*call(0, "apply_patch", {"input": patch}), Finish("tool_calls")])
    [item] = terminal["output"]
    assert item["type"] == "custom_tool_call" and item["input"] == patch and item["name"] == "apply_patch"
    kinds = [e["type"] for e in events]
    assert kinds.index("response.custom_tool_call_input.delta") < kinds.index("response.custom_tool_call_input.done")
    assert "response.function_call_arguments.delta" not in kinds


def test_custom_tool_input_written_bare_still_arrives() -> None:
    _, terminal = run(make_request(), [*call(0, "apply_patch", "not json at all"), Finish("tool_calls")])
    assert terminal["output"][0]["input"] == "not json at all"


@pytest.mark.parametrize(
    ("name", "arguments", "expect"),
    [
        (
            "shell",
            {"commands": ["ls -la", "pwd"], "timeout_ms": 1000},
            {
                "type": "shell_call",
                "action": {"commands": ["ls -la", "pwd"], "timeout_ms": 1000, "max_output_length": None},
            },
        ),
        (
            "local_shell",
            {"command": ["ls"], "working_directory": "/tmp"},
            {
                "type": "local_shell_call",
                "action": {
                    "type": "exec",
                    "command": ["ls"],
                    "timeout_ms": None,
                    "working_directory": "/tmp",
                    "env": {},
                    "user": None,
                },
            },
        ),
        (
            "apply_patch",
            {"type": "create_file", "path": "a.txt", "diff": "+hi"},
            {"type": "apply_patch_call", "operation": {"type": "create_file", "path": "a.txt", "diff": "+hi"}},
        ),
    ],
)
def test_builtin_calls_become_their_items(name: str, arguments: dict[str, Any], expect: dict[str, Any]) -> None:
    tools = [{"type": "local_shell"}, {"type": "shell"}, {"type": "apply_patch"}]
    _, terminal = run(make_request(tools), [*call(0, name, arguments, "call_x"), Finish("tool_calls")])
    [item] = terminal["output"]
    assert {k: item[k] for k in expect} == expect
    assert item["call_id"] == "call_x" and item["status"] == "completed"


def test_parallel_calls_of_every_kind_in_one_step() -> None:
    req = make_request()
    deltas = [
        *call(0, "exec_command", {"cmd": "ls"}),
        *call(1, "apply_patch", {"input": "p"}),
        *call(2, "shell", {"commands": ["pwd"]}),
        *call(3, "collab__wait", {}),
        Finish("tool_calls"),
    ]
    _, terminal = run(req, deltas)
    assert [i["type"] for i in terminal["output"]] == [
        "function_call",
        "custom_tool_call",
        "shell_call",
        "function_call",
    ]


# -- items (and outputs) back to Chat Completions ----------------------------------------------


def test_every_item_type_replays_as_chat_messages() -> None:
    req = make_request(
        input=[
            {"role": "user", "content": "fix it"},
            {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "namespace": "collab", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "agent 7"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "PATCH"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "applied"},
            {
                "type": "shell_call",
                "call_id": "c3",
                "action": {"commands": ["ls"], "timeout_ms": None, "max_output_length": None},
            },
            {
                "type": "shell_call_output",
                "call_id": "c3",
                "output": [{"stdout": "a.txt", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
            },
            {"type": "local_shell_call", "call_id": "c4", "action": {"type": "exec", "command": ["pwd"]}},
            {"type": "local_shell_call_output", "id": "c4", "output": "/src"},
            {"type": "apply_patch_call", "call_id": "c5", "operation": {"type": "delete_file", "path": "b"}},
            {"type": "apply_patch_call_output", "call_id": "c5", "status": "failed", "output": "no such file"},
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "action": {"type": "search", "query": "q"},
            },
            {"role": "user", "content": "thanks"},
        ]
    )
    messages = items_to_messages(req.input_items, None)
    assert [m["role"] for m in messages] == ["user", *["assistant", "tool"] * 5, "user"]
    calls = [c for m in messages if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [c["function"]["name"] for c in calls] == [
        "collab__spawn_agent",
        "apply_patch",
        "shell",
        "local_shell",
        "apply_patch",
    ]
    assert json.loads(calls[1]["function"]["arguments"]) == {"input": "PATCH"}
    assert json.loads(calls[2]["function"]["arguments"]) == {"commands": ["ls"]}
    assert json.loads(calls[4]["function"]["arguments"]) == {"type": "delete_file", "path": "b"}
    tool_messages = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert tool_messages == {
        "c1": "agent 7",
        "c2": "applied",
        "c3": "a.txt\n(exit code 0)",
        "c4": "/src",
        "c5": "failed: no such file",
    }


def test_computer_screenshot_follows_its_tool_message() -> None:
    req = make_request(
        [{"type": "computer_use_preview", "environment": "linux", "display_width": 800, "display_height": 600}],
        input=[
            {
                "type": "computer_call",
                "call_id": "c1",
                "action": {"type": "click", "x": 1, "y": 2},
                "pending_safety_checks": [],
            },
            {
                "type": "computer_call_output",
                "call_id": "c1",
                "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
            },
        ],
    )
    messages = items_to_messages(req.input_items, None)
    assert [m["role"] for m in messages] == ["assistant", "tool", "user"]
    assert messages[2]["content"][0]["image_url"]["url"].startswith("data:image/png")


def test_reasoning_goes_back_only_where_the_provider_takes_it() -> None:
    items = parse_create_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
                {"role": "assistant", "content": "a"},
            ],
        }
    ).input_items
    assert "reasoning_content" not in items_to_messages(items, None)[1]
    sent = items_to_messages(items, None, ChatOptions(send_reasoning=True))
    assert sent[1] == {"role": "assistant", "content": "a", "reasoning_content": "think"}


# -- reasoning ------------------------------------------------------------------------------------


def test_reasoning_summary_requested_streams_summary_parts() -> None:
    req = make_request([], reasoning={"summary": "auto"})
    events, terminal = run(
        req,
        [ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("Hi"), Usage(3, 4), Finish("stop")],
        reasoning_summary=True,
    )
    reasoning = terminal["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Let me think."}]
    assert reasoning["content"] == []
    kinds = [e["type"] for e in events]
    assert "response.reasoning_summary_text.delta" in kinds and "response.reasoning_text.delta" not in kinds


def test_reasoning_without_summary_stays_reasoning_text() -> None:
    _, terminal = run(make_request([]), [ReasoningDelta("hmm"), TextDelta("Hi"), Finish("stop")])
    assert terminal["output"][0]["content"] == [{"type": "reasoning_text", "text": "hmm"}]


def test_sealed_reasoning_is_set_on_the_item() -> None:
    _, terminal = run(
        make_request([]),
        [ReasoningDelta("secret plan"), TextDelta("Hi"), Finish("stop")],
        seal_reasoning=lambda text: f"sealed:{text[::-1]}",
    )
    assert terminal["output"][0]["encrypted_content"] == "sealed:nalp terces"
