"""Every tool output answers a call, as OpenAI checks it before any model call ("No tool call
found for function call output with call_id ...").

The call may stand anywhere before the output in the context: the chain, the conversation,
earlier items of the same input (item references resolved), before a compaction item of an
inline history. Outputs already in the chain were checked when they came in; only this
request's input is checked.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequest

# Output item type -> the field of the output, as the client sends it, that names its call.
# (local_shell_call_output names its call by `id` in the SDK; items.py copies it to `call_id`.)
OUTPUT_CALL_FIELDS = {
    "function_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "computer_call_output": "call_id",
    "local_shell_call_output": "id",
    "tool_search_output": "call_id",
    "program_output": "call_id",
}


_ANSWER_TYPES = frozenset({*OUTPUT_CALL_FIELDS, "mcp_approval_response"})


def _calls_of(item: dict[str, Any], calls: set[str], approvals: set[str]) -> None:
    kind = item["type"]
    if kind == "mcp_approval_request":
        approvals.add(item.get("id") or "")
    elif kind not in OUTPUT_CALL_FIELDS:
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            calls.add(call_id)
        if kind == "local_shell_call" and isinstance(item.get("id"), str):
            calls.add(item["id"])


def check_outputs_answer_calls(context: list[dict[str, Any]], input_count: int) -> None:
    """Raise a 400 naming the first output among the last `input_count` items of `context` (this
    request's input) that answers no call made before it."""
    first_input = len(context) - input_count
    if not any(item["type"] in _ANSWER_TYPES for item in context[first_input:]):
        return  # most requests: nothing to look up
    calls: set[str] = set()
    approvals: set[str] = set()
    for item in context[:first_input]:
        _calls_of(item, calls, approvals)
    for index, item in enumerate(context[first_input:]):
        kind = item["type"]
        if kind == "mcp_approval_response":
            if item["approval_request_id"] not in approvals:
                raise InvalidRequest(
                    f"No MCP approval request found for mcp_approval_response with approval_request_id "
                    f"'{item['approval_request_id']}'.",
                    param=f"input[{index}].approval_request_id",
                )
        elif kind in OUTPUT_CALL_FIELDS:
            call_id = item.get("call_id")
            if kind == "tool_search_output" and not call_id:
                continue  # a hosted search's output carries no call id
            if call_id not in calls:
                raise InvalidRequest(
                    f"No tool call found for {kind.replace('_', ' ')} with call_id '{call_id}'.",
                    param=f"input[{index}].{OUTPUT_CALL_FIELDS[kind]}",
                )
        _calls_of(item, calls, approvals)
