"""The admin's thread view renders client-tool and hosted-tool items as calls and outputs."""

from __future__ import annotations

import pytest

from responses_api.history.presenters import item_block

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    ("item", "kind", "title", "text"),
    [
        (
            {
                "type": "custom_tool_call",
                "id": "c",
                "call_id": "k",
                "name": "apply_patch",
                "namespace": "ns",
                "input": "PATCH",
            },
            "tool_call",
            "ns · apply_patch",
            "PATCH",
        ),
        (
            {"type": "shell_call", "id": "s", "call_id": "k", "action": {"commands": ["ls"]}},
            "tool_call",
            "shell",
            '"ls"',
        ),
        (
            {"type": "web_search_call", "id": "w", "status": "completed", "action": {"type": "search", "query": "q"}},
            "tool_call",
            "web_search",
            '"q"',
        ),
        (
            {
                "type": "shell_call_output",
                "id": "o",
                "call_id": "k",
                "output": [{"stdout": "a.txt", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
            },
            "tool_output",
            "",
            "a.txt\n(exit code 0)",
        ),
        (
            {"type": "apply_patch_call_output", "id": "p", "call_id": "k", "status": "failed", "output": "no file"},
            "tool_output",
            "",
            "failed: no file",
        ),
        (
            {"type": "tool_search_call", "id": "t", "call_id": "k", "execution": "server", "arguments": {"query": "q"}},
            "tool_call",
            "tool_search",
            '"query": "q"',
        ),
        (
            {
                "type": "tool_search_output",
                "id": "o",
                "call_id": "k",
                "execution": "server",
                "tools": [{"type": "mcp", "server_label": "shop", "allowed_tools": ["lookup_order"]}],
            },
            "tool_output",
            "tool_search",
            "- lookup_order: lookup_order of the MCP server shop",
        ),
    ],
)
def test_tool_items_render_as_calls_and_outputs(item: dict, kind: str, title: str, text: str) -> None:
    block = item_block(item)
    assert (block.kind, block.title) == (kind, title)
    assert text in (block.arguments if kind == "tool_call" else block.output)
