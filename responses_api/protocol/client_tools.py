"""Tool types beyond plain functions, for upstreams that only know functions.

OpenAI's Responses API has tool types a Chat Completions model cannot be given
as such: `namespace` (a group of functions), `custom` (freeform text input),
and built-ins the client executes (`local_shell`, `shell`, `apply_patch`,
`computer_use_preview`). Each is offered to the upstream as a function with a
documented parameters schema; a call to that function comes back as the
tool's own item type (`custom_tool_call`, `shell_call`, ...), and the item (and
its output, which the client sends back) turns into a Chat Completions tool
call (and tool message) again. This module holds both directions, so the
mapping lives in one place.

Upstream function names are derived, never stored: `upstream_name()` gives the
same name for the same tool on every turn, so a stored chain replays without a
table. Hosted tools (`web_search`, `file_search`, ...) run on OpenAI's servers;
what the gateway does with them is a per-route policy (see `HOSTED_TOOL_TYPES`).
"""

from __future__ import annotations

import json
from typing import Any

from . import jsonlimits, surface
from .ids import new_id

# Built-in tools the client runs: the item type a call becomes, and the output item type.
CLIENT_BUILTINS: dict[str, tuple[str, str]] = {
    "local_shell": ("local_shell_call", "local_shell_call_output"),
    "shell": ("shell_call", "shell_call_output"),
    "apply_patch": ("apply_patch_call", "apply_patch_call_output"),
    "computer_use_preview": ("computer_call", "computer_call_output"),
    "computer": ("computer_call", "computer_call_output"),
    "computer_use": ("computer_call", "computer_call_output"),
}
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
CALL_ITEM_KIND = {
    "custom_tool_call": "custom",
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
    "computer_call": "computer",
}
OUTPUT_ITEM_TYPES = frozenset(
    {
        "custom_tool_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "computer_call_output",
    }
)
ITEM_ID_PREFIX = {
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "local_shell_call": "lsh",
    "local_shell_call_output": "lsho",
    "shell_call": "sh",
    "shell_call_output": "sho",
    "apply_patch_call": "apc",
    "apply_patch_call_output": "apco",
    "computer_call": "cu",
    "computer_call_output": "cuo",
    "tool_search_output": "tso",
}

# The parameters each built-in is offered with (not strict: optional fields stay optional).
_BUILTIN_SCHEMAS: dict[str, dict[str, Any]] = {
    "local_shell": {
        "type": "object",
        "properties": {
            "command": {
                "type": "array",
                "items": {"type": "string"},
                "description": 'The command and its arguments, e.g. ["ls", "-la"].',
            },
            "working_directory": {"type": "string", "description": "Directory to run the command in."},
            "timeout_ms": {"type": "integer", "description": "Timeout in milliseconds."},
            "env": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Environment variables to set.",
            },
        },
        "required": ["command"],
    },
    "shell": {
        "type": "object",
        "properties": {
            "commands": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Shell commands to run, in order.",
            },
            "timeout_ms": {"type": "integer", "description": "Timeout in milliseconds."},
            "max_output_length": {"type": "integer", "description": "Characters of output to keep per command."},
        },
        "required": ["commands"],
    },
    "apply_patch": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
            "path": {"type": "string", "description": "Path of the file."},
            "diff": {"type": "string", "description": "The diff to apply (create_file: the whole content)."},
        },
        "required": ["type", "path"],
    },
    "computer": {
        "type": "object",
        "properties": {
            "action": {
                "type": "object",
                "description": "One action: {type: click|double_click|drag|keypress|move|screenshot|scroll|"
                "type|wait, ...its fields (x, y, button, keys, text, scroll_x, scroll_y, path)}.",
            },
        },
        "required": ["action"],
    },
}
_BUILTIN_DESCRIPTIONS = {
    "local_shell": "Run a command on the user's machine and get its output.",
    "shell": "Run shell commands on the user's machine and get their output.",
    "apply_patch": "Create, update or delete a file on the user's machine.",
    "computer": "Act on the user's computer screen and get a screenshot back.",
}


def builtin_kind(tool_type: str) -> str:
    """`computer_use_preview` and its aliases are one kind: `computer`."""
    return "computer" if CLIENT_BUILTINS.get(tool_type, ("",))[0] == "computer_call" else tool_type


def builtin_function(kind: str) -> tuple[str, str, dict[str, Any]]:
    """(upstream function name, description, parameters) of a client built-in."""
    return kind, _BUILTIN_DESCRIPTIONS[kind], _BUILTIN_SCHEMAS[kind]


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


def upstream_name(kind: str, name: str | None, namespace: str | None = None) -> str:
    """The function name the upstream model sees for a tool (and for its calls in history)."""
    if kind in ("local_shell", "shell", "apply_patch", "computer"):
        return kind
    assert name is not None
    return f"{namespace}__{name}" if namespace else name


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
    args = _arguments(arguments)
    if kind == "custom":
        # A model that wrote its input bare instead of as {"input": ...} still gets it through.
        text = args.get("input") if isinstance(args.get("input"), str) else arguments
        item = {
            "type": "custom_tool_call",
            "id": new_id("ctc"),
            "status": status,
            "call_id": call_id,
            "name": name,
            "input": text,
        }
        if namespace:
            item["namespace"] = namespace
        return item
    if kind == "local_shell":
        command = args.get("command")
        if isinstance(command, str):
            command = ["bash", "-lc", command]
        return {
            "type": "local_shell_call",
            "id": new_id("lsh"),
            "call_id": call_id,
            "status": status,
            "action": {
                "type": "exec",
                "command": [str(c) for c in command or []],
                "timeout_ms": _int_or_none(args.get("timeout_ms")),
                "working_directory": _str_or_none(args.get("working_directory")),
                "env": {str(k): str(v) for k, v in (args.get("env") or {}).items()}
                if isinstance(args.get("env"), dict)
                else {},
                "user": None,
            },
        }
    if kind == "shell":
        commands = args.get("commands")
        if isinstance(commands, str):
            commands = [commands]
        return {
            "type": "shell_call",
            "id": new_id("sh"),
            "call_id": call_id,
            "status": status,
            "action": {
                "commands": [str(c) for c in commands or []],
                "timeout_ms": _int_or_none(args.get("timeout_ms")),
                "max_output_length": _int_or_none(args.get("max_output_length")),
            },
            "environment": None,
        }
    if kind == "apply_patch":
        op_type = (
            args.get("type") if args.get("type") in ("create_file", "update_file", "delete_file") else "update_file"
        )
        operation: dict[str, Any] = {"type": op_type, "path": str(args.get("path") or "")}
        if op_type != "delete_file":
            operation["diff"] = str(args.get("diff") or "")
        return {
            "type": "apply_patch_call",
            "id": new_id("apc"),
            "call_id": call_id,
            "status": status,
            "operation": operation,
        }
    if kind == "computer":
        action = args.get("action") if isinstance(args.get("action"), dict) else {"type": "screenshot"}
        return {
            "type": "computer_call",
            "id": new_id("cu"),
            "call_id": call_id,
            "status": status,
            "action": action,
            "pending_safety_checks": [],
        }
    raise ValueError(f"not a client tool kind: {kind!r}")


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


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- items -> Chat Completions ---------------------------------------------------------------
def call_as_chat(item: dict[str, Any]) -> dict[str, Any]:
    """A non-function call item as a Chat Completions `tool_calls` entry."""
    kind = CALL_ITEM_KIND[item["type"]]
    if kind == "custom":
        name = upstream_name("custom", item["name"], item.get("namespace"))
        arguments: dict[str, Any] = {"input": item.get("input", "")}
    elif kind == "local_shell":
        action = item.get("action") or {}
        name, arguments = (
            "local_shell",
            {
                k: action[k]
                for k in ("command", "working_directory", "timeout_ms", "env")
                if action.get(k) not in (None, {}, [])
            },
        )
    elif kind == "shell":
        action = item.get("action") or {}
        name, arguments = (
            "shell",
            {k: action[k] for k in ("commands", "timeout_ms", "max_output_length") if action.get(k) is not None},
        )
    elif kind == "apply_patch":
        name, arguments = "apply_patch", dict(item.get("operation") or {})
    else:
        name, arguments = "computer", {"action": item.get("action") or (item.get("actions") or [{}])[0]}
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def output_as_text(item: dict[str, Any]) -> str:
    """What a client-run tool returned, as the text of a Chat Completions tool message."""
    kind = item["type"]
    output = item.get("output")
    if kind == "shell_call_output" and isinstance(output, list):
        chunks = []
        for entry in output:
            if not isinstance(entry, dict):
                continue
            outcome = entry.get("outcome") or {}
            ending = "timed out" if outcome.get("type") == "timeout" else f"exit code {outcome.get('exit_code')}"
            text = entry.get("stdout") or ""
            if entry.get("stderr"):
                text += ("\n" if text else "") + f"stderr:\n{entry['stderr']}"
            chunks.append(f"{text}\n({ending})" if text else f"({ending})")
        return "\n\n".join(chunks)
    if kind == "apply_patch_call_output":
        status = item.get("status") or "completed"
        return f"{status}: {output}" if output else status
    if kind == "computer_call_output":
        return "A screenshot of the screen after the action follows."
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(p.get("text", "") for p in output if isinstance(p, dict))
    return json.dumps(output, ensure_ascii=False) if output is not None else ""


def screenshot_url(item: dict[str, Any]) -> str | None:
    """The image a computer_call_output carries, to show the model next to the tool message."""
    output = item.get("output")
    if isinstance(output, dict) and isinstance(output.get("image_url"), str):
        return output["image_url"]
    return None
