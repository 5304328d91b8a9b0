"""The pure MCP protocol pieces: approval policies, model-visible names, items for the model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.mcp_tools import (
    as_model_items,
    model_names,
    parse_approval,
    parse_mcp_tool,
    pending_approvals,
)

pytestmark = pytest.mark.embedded


def test_approval_policies() -> None:
    assert parse_approval(None, "p").requires("x")  # OpenAI's default: always
    assert not parse_approval("never", "p").requires("x")
    never_add = parse_approval({"never": {"tool_names": ["add"]}}, "p")
    assert not never_add.requires("add") and never_add.requires("other")
    only_delete = parse_approval({"always": {"tool_names": ["delete"]}}, "p")
    assert only_delete.requires("delete") and not only_delete.requires("read")
    read_only_free = parse_approval({"never": {"read_only": True}}, "p")
    assert not read_only_free.requires("get", {"readOnlyHint": True})
    assert read_only_free.requires("put", {"readOnlyHint": False})
    with pytest.raises(InvalidRequest) as exc:
        parse_approval({"sometimes": {}}, "tools[0].require_approval")
    assert exc.value.param == "tools[0].require_approval.sometimes"


def test_authorization_becomes_a_header_and_is_never_echoed() -> None:
    tool = parse_mcp_tool(
        {
            "type": "mcp",
            "server_label": "s",
            "server_url": "https://x/mcp",
            "authorization": "tok",
            "headers": {"X-A": "1"},
        },
        "tools[0]",
    )
    assert tool.headers == {"X-A": "1", "Authorization": "Bearer tok"}
    echoed = tool.as_dict()
    assert echoed["headers"] is None and "authorization" not in echoed
    assert "tok" not in json.dumps(echoed)


def test_model_names_keep_plain_names_unless_they_collide() -> None:
    names = model_names([("a", "search"), ("b", "search"), ("a", "add"), ("b", "weird.name"), ("b", "f")], {"f"})
    assert names[("a", "add")] == "add"
    assert names[("a", "search")] == "a__search" and names[("b", "search")] == "b__search"
    assert names[("b", "weird.name")] == "b__weird_name"
    assert names[("b", "f")] == "b__f"  # a function tool of the request already has "f"


def test_mcp_items_read_as_calls_and_outputs() -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "id": "m", "role": "user", "content": []},
        {"type": "mcp_list_tools", "id": "l", "server_label": "s", "tools": []},
        {
            "type": "mcp_call",
            "id": "c",
            "server_label": "s",
            "name": "add",
            "arguments": "{}",
            "output": "2",
            "error": None,
            "status": "completed",
        },
        {
            "type": "mcp_call",
            "id": "e",
            "server_label": "s",
            "name": "add",
            "arguments": "{}",
            "output": None,
            "error": {"type": "http_error", "code": 502, "message": "down"},
            "status": "failed",
        },
        {"type": "mcp_approval_request", "id": "r1", "server_label": "s", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_request", "id": "r2", "server_label": "s", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_response", "id": "a", "approval_request_id": "r1", "approve": False, "reason": None},
    ]
    out = as_model_items(items, {("s", "add"): "add"})
    assert [i["type"] for i in out] == ["message"] + ["function_call", "function_call_output"] * 3
    assert out[2]["output"] == "2" and "down" in out[4]["output"] and "denied" in out[6]["output"]
    assert all(i["call_id"] != "r2" for i in out[1:])  # unanswered: not shown


def test_pending_approvals() -> None:
    context = [
        {"type": "mcp_approval_request", "id": "r1", "server_label": "s", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_request", "id": "r2", "server_label": "s", "name": "add", "arguments": "{}"},
        {"type": "mcp_call", "id": "c", "approval_request_id": "r2", "server_label": "s", "name": "add"},
    ]
    answers = [
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},  # twice: once
        {"type": "mcp_approval_response", "approval_request_id": "r2", "approve": True},  # already ran
        {"type": "mcp_approval_response", "approval_request_id": "zz", "approve": True},
    ]
    to_run, unknown = pending_approvals(context + answers, answers)
    assert [r["id"] for r, _ in to_run] == ["r1"] and unknown == ["zz"]
