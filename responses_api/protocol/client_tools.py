"""Tool types beyond plain functions, for upstreams that only know functions.

OpenAI's Responses API has tool types a Chat Completions model cannot be given
as such: `namespace` (a group of functions), `custom` (freeform text input),
and built-ins the client executes (`local_shell`, `shell`, `apply_patch`,
`computer_use_preview`). Each is offered to the upstream as a function with a
documented parameters schema; a call to that function comes back as the
tool's own item type (`custom_tool_call`, `shell_call`, ...), and the item (and
its output, which the client sends back) turns into a Chat Completions tool
call (and tool message) again. This module holds both directions; what differs
per client tool type is its entry in `client_tool_types.CLIENT_TOOL_TYPES`.

Upstream function names are derived, never stored: a built-in's is its kind, a
custom tool's its name (after its namespace), the same on every turn, so a
stored chain replays without a table. Hosted tools (`web_search`,
`file_search`, ...) run on OpenAI's servers; what the gateway does with them is
a per-route policy (see `HOSTED_TOOL_TYPES`).
"""

from __future__ import annotations

import json
from typing import Any

from . import jsonlimits, surface
from .client_tool_types import CLIENT_TOOL_TYPES, NewCall, plain_output_text
from .ids import new_id

# The client tool types (custom and the built-ins): their table, and the live views of it
# that the dialects' conversions read (a call item type -> its tool kind; the output item types).
CALL_ITEM_KIND = CLIENT_TOOL_TYPES.call_kinds
OUTPUT_ITEM_TYPES = CLIENT_TOOL_TYPES.output_types
# Tools OpenAI runs on its own servers (a Chat Completions upstream has nothing to run them)
# and the items they produce: the surface's classification (protocol/surface.py) lists them.
HOSTED_TOOL_TYPES = surface.HOSTED_TOOL_TYPES
# Hosted tools a route may serve with one of its registry tools, and the item a call becomes.
SERVABLE_HOSTED_TOOLS = {"web_search": "web_search_call", "file_search": "file_search_call"}
HOSTED_ALIASES = {
    "web_search_2025_08_26": "web_search",
    "web_search_preview": "web_search",
    "web_search_preview_2025_03_11": "web_search",
}
# The item types a hosted tool produces: kept in history, never sent to a Chat upstream.
HOSTED_ITEM_TYPES = surface.HOSTED_ITEM_TYPES


def custom_parameters(fmt: dict[str, Any] | None) -> dict[str, Any]:
    """A custom tool as a function of one string: the grammar, if any, goes into its description."""
    description = "The tool's input, as free text."
    if fmt and fmt.get("type") == "grammar":
        description = (
            f"The tool's input, as text matching this {fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}"
        )
    return {
        "type": "object",
        "properties": {"input": {"type": "string", "description": description}},
        "required": ["input"],
        "additionalProperties": False,
    }


# -- calls from the model -> items ------------------------------------------------------
def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = jsonlimits.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def call_item(
    kind: str, *, name: str, namespace: str | None, call_id: str, arguments: str, status: str
) -> dict[str, Any]:
    """The output item of one model call of a non-function tool (arguments: the function's JSON)."""
    entry = CLIENT_TOOL_TYPES.of_kind(kind)
    if entry is None:
        raise ValueError(f"not a client tool kind: {kind!r}")
    call = NewCall(
        entry.call_type,
        new_id(entry.call_id_prefix),
        call_id,
        status,
        name,
        namespace,
        _arguments(arguments),
        arguments,
    )
    return entry.make_call(call)


def hosted_call_item(kind: str, arguments: str, status: str, item_id: str | None = None) -> dict[str, Any]:
    """A served hosted tool's call item (web_search_call, file_search_call) from the registry
    tool's arguments: the query is its `query` argument, or the whole arguments text."""
    args = _arguments(arguments)
    query = (
        args.get("query")
        if isinstance(args.get("query"), str)
        else (next((v for v in args.values() if isinstance(v, str)), arguments))
    )
    if kind == "web_search":
        return {
            "type": "web_search_call",
            "id": item_id or new_id("ws"),
            "status": status,
            "action": {"type": "search", "query": query, "queries": [query] if query else []},
        }
    return {
        "type": "file_search_call",
        "id": item_id or new_id("fs"),
        "status": status,
        "queries": [query] if query else [],
        "results": None,
    }


# -- items -> Chat Completions ---------------------------------------------------------------
def call_as_chat(item: dict[str, Any]) -> dict[str, Any]:
    """A non-function call item as a Chat Completions `tool_calls` entry."""
    entry = CLIENT_TOOL_TYPES.of_call(item["type"])
    assert entry is not None, item["type"]  # callers check CALL_ITEM_KIND
    name, arguments = entry.as_function_call(item)
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def output_as_text(item: dict[str, Any]) -> str:
    """What a client-run tool returned, as the text of a Chat Completions tool message."""
    entry = CLIENT_TOOL_TYPES.of_output(item["type"])
    return entry.output_text(item) if entry is not None else plain_output_text(item)


def screenshot_url(item: dict[str, Any]) -> str | None:
    """The image a computer_call_output carries, to show the model next to the tool message."""
    output = item.get("output")
    url = output.get("image_url") if isinstance(output, dict) else None
    return url if isinstance(url, str) else None
