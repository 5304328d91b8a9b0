"""Every tool output answers a call, as OpenAI checks it before any model call ("No tool call
found for function call output with call_id ...").

The call may stand anywhere before the output in the context: the chain, the conversation,
earlier items of the same input (item references resolved), before a compaction item of an
inline history. Outputs already in the chain were checked when they came in; only this
request's input is checked.
"""

from __future__ import annotations

from typing import Any

from .client_tool_types import CLIENT_TOOL_TYPES
from .errors import InvalidRequest

# Output item type -> the field of the output, as the client sends it, that names its call
# (the client tool types' outputs: their entry's `output_call_field`, `_call_field`).
OUTPUT_CALL_FIELDS = {
    "function_call_output": "call_id",
    "tool_search_output": "call_id",
    "program_output": "call_id",
}


def _call_field(kind: str) -> str | None:
    """The field naming the call an item of this type answers (None: it answers none)."""
    field = OUTPUT_CALL_FIELDS.get(kind)
    if field is None:
        entry = CLIENT_TOOL_TYPES.of_output(kind)
        field = entry.output_call_field if entry is not None else None
    return field


def _answers(kind: str) -> bool:
    return kind == "mcp_approval_response" or _call_field(kind) is not None


def _calls_of(item: dict[str, Any], calls: set[str], approvals: set[str]) -> None:
    kind = item["type"]
    if kind == "mcp_approval_request":
        approvals.add(item.get("id") or "")
    elif _call_field(kind) is None:
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            calls.add(call_id)
        entry = CLIENT_TOOL_TYPES.of_call(kind)
        if entry is not None and entry.output_call_field == "id" and isinstance(item.get("id"), str):
            calls.add(item["id"])  # its output may name it by its own id (local_shell)


def check_outputs_answer_calls(context: list[dict[str, Any]], input_count: int) -> None:
    """Raise a 400 naming the first output among the last `input_count` items of `context` (this
    request's input) that answers no call made before it."""
    first_input = len(context) - input_count
    if not any(_answers(item["type"]) for item in context[first_input:]):
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
        elif (call_field := _call_field(kind)) is not None:
            call_id = item.get("call_id")
            if kind == "tool_search_output" and not call_id:
                continue  # a hosted search's output carries no call id
            if call_id not in calls:
                raise InvalidRequest(
                    f"No tool call found for {kind.replace('_', ' ')} with call_id '{call_id}'.",
                    param=f"input[{index}].{call_field}",
                )
        _calls_of(item, calls, approvals)
