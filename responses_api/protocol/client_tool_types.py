"""The tool types a client runs: one table, one entry per type, that every place reads.

A client tool type is a tool the model calls and the client runs: `custom` tools (named by the
client, free text in) and the built-ins (`local_shell`, `shell`, `apply_patch`, computer use).
No upstream dialect knows them as such, so each is offered to the upstream as a function
(protocol/tools.py); a call of that function becomes the type's own call item (protocol/events.py
through `client_tools.call_item`); the client answers with the type's output item (parsed by
protocol/items.py, checked by protocol/answers.py); and both replay to the upstream as a function
call and its output (`client_tools.call_as_chat`, `output_as_text`). The admin's history shows
them (history/presenters.py), the OpenAPI document describes their items (api/openapi.py), and
the surface tables list them (protocol/surface.py). Each of those reads the entry.

Adding a type is one `ClientToolType` in `CLIENT_TOOL_TYPES` (a test registers its own with
`CLIENT_TOOL_TYPES.register`). The surface tables and the OpenAPI document are built from the
entries present when they are first built (at import, and on the first request for the
document): a type registered later is served, not documented.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeAlias

# The JSON type(s) a required field of an item must have (str, dict, list, or a tuple of them).
FieldType: TypeAlias = type | tuple[type, ...]


@dataclass(frozen=True, slots=True)
class OfferedFunction:
    """What the upstream model is offered for a built-in: a function named as its kind.
    (Not strict: optional fields stay optional.)"""

    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NewCall:
    """One model call of a client tool, for its type's `make_call`: the item's type and fresh id,
    the call's id and status, the tool as the client declared it (name, namespace), and the
    function's arguments (`args` parsed, or `{}`; `raw` as the model wrote them)."""

    type: str
    id: str
    call_id: str
    status: str
    name: str
    namespace: str | None
    args: dict[str, Any]
    raw: str

    def head(self) -> dict[str, Any]:
        """The fields every call item starts with, in the order OpenAI writes them."""
        return {"type": self.type, "id": self.id, "call_id": self.call_id, "status": self.status}


def plain_output_text(item: dict[str, Any]) -> str:
    """An output item's `output` as text: a string as is, content parts' texts joined, else JSON."""
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(p.get("text", "") for p in output if isinstance(p, dict))
    return json.dumps(output, ensure_ascii=False) if output is not None else ""


@dataclass(frozen=True, slots=True)
class ClientToolType:
    """One client tool type: everything the gateway does differently for it."""

    kind: str  # `Tool.kind` of its tools; a built-in's upstream function name
    tool_types: tuple[str, ...]  # its `tools[].type` (and `tool_choice.type`) values, first the main one
    call_type: str  # the item a call becomes
    output_type: str  # the item the client answers with
    call_id_prefix: str  # of the ids the gateway gives its items
    output_id_prefix: str
    # The fields each item must carry, and their JSON types: protocol/items.py checks them on
    # input, and the OpenAPI document's Gateway_<item type>_ItemParam schemas say them.
    call_fields: Mapping[str, FieldType]
    output_fields: Mapping[str, FieldType]
    make_call: Callable[[NewCall], dict[str, Any]]  # a model's call -> its call item
    # A call item -> (name, arguments) of the function call the upstream made.
    as_function_call: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]
    shown: str  # the admin's history shows this field of a call as its arguments
    # A built-in: offered as a function named `kind`. None: the client names each tool (custom:
    # its parameters come from its `format`, protocol/tools.py).
    function: OfferedFunction | None = None
    # The output as the text of a Chat Completions tool message (and the admin's history).
    output_text: Callable[[dict[str, Any]], str] = plain_output_text
    # The output's field that names its call, as the client sends it (the SDK's
    # LocalShellCallOutput: `id`, which items.py copies to `call_id`; the call's own `id` then
    # names it too, protocol/answers.py).
    output_call_field: str = "call_id"
    output_status: bool = False  # the output item gets a status (`completed` unless sent)
    # The SDK's ResponseSteerRequiredInput has a stub for its output (api/steering.py).
    steer_stub: bool = True
    # A call's field streamed before its output_item.done, as response.<call_type>_<field>.delta
    # and .done (custom: `input`).
    streamed_field: str | None = None

    @property
    def is_builtin(self) -> bool:
        return self.function is not None


# `Tool.kind`s and `tools[].type`s the rest of the protocol core owns: a client tool type taking
# one would be shadowed (protocol/tools.py reads these first) or shadow them (protocol/events.py).
_RESERVED_KINDS = frozenset({"function", "tool_search", "web_search", "file_search", "namespace", "mcp"})


class ClientToolTypes:
    """The table, with the lookups the request path makes (by tool type, by item type).

    The views (`call_types`, `output_types`, `call_kinds`, `item_fields`) are live: a type
    registered later is in them."""

    def __init__(self, entries: Iterable[ClientToolType]) -> None:
        self._entries: dict[str, ClientToolType] = {}
        self._by_tool_type: dict[str, ClientToolType] = {}
        self._by_call: dict[str, ClientToolType] = {}
        self._by_output: dict[str, ClientToolType] = {}
        self._call_kinds: dict[str, str] = {}
        self._item_fields: dict[str, Mapping[str, FieldType]] = {}
        self.call_types: KeysView[str] = self._by_call.keys()
        self.output_types: KeysView[str] = self._by_output.keys()
        self.call_kinds: Mapping[str, str] = MappingProxyType(self._call_kinds)
        self.item_fields: Mapping[str, Mapping[str, FieldType]] = MappingProxyType(self._item_fields)
        for entry in entries:
            self.register(entry)

    def register(self, entry: ClientToolType) -> None:
        taken = (
            {entry.kind, *entry.tool_types} & (self._entries.keys() | self._by_tool_type.keys() | _RESERVED_KINDS)
            or {entry.call_type, entry.output_type} & self._item_fields.keys()
            or entry.call_type == entry.output_type
        )
        if taken:
            raise ValueError(f"client tool type {entry.kind!r} clashes with one there is: {taken}")
        self._entries[entry.kind] = entry
        for tool_type in entry.tool_types:
            self._by_tool_type[tool_type] = entry
        self._by_call[entry.call_type] = entry
        self._by_output[entry.output_type] = entry
        self._call_kinds[entry.call_type] = entry.kind
        self._item_fields[entry.call_type] = entry.call_fields
        self._item_fields[entry.output_type] = entry.output_fields

    def unregister(self, kind: str) -> None:
        entry = self._entries.pop(kind)
        for tool_type in entry.tool_types:
            del self._by_tool_type[tool_type]
        del self._by_call[entry.call_type], self._by_output[entry.output_type], self._call_kinds[entry.call_type]
        del self._item_fields[entry.call_type], self._item_fields[entry.output_type]

    def __iter__(self) -> Iterator[ClientToolType]:
        """The entries, in the table's order (the surface tables and the README keep it)."""
        return iter(list(self._entries.values()))

    def of_kind(self, kind: str) -> ClientToolType | None:
        return self._entries.get(kind)

    def of_tool_type(self, tool_type: str) -> ClientToolType | None:
        return self._by_tool_type.get(tool_type)

    def of_call(self, item_type: str) -> ClientToolType | None:
        return self._by_call.get(item_type)

    def of_output(self, item_type: str) -> ClientToolType | None:
        return self._by_output.get(item_type)

    def of_item(self, item_type: str) -> ClientToolType | None:
        """The type whose call or output item this is."""
        return self._by_call.get(item_type) or self._by_output.get(item_type)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- custom: a tool of the client's own, free text in ----------------------------------------
def _custom_call(call: NewCall) -> dict[str, Any]:
    # A model that wrote its input bare instead of as {"input": ...} still gets it through.
    text = call.args.get("input") if isinstance(call.args.get("input"), str) else call.raw
    item = {
        "type": call.type,
        "id": call.id,
        "status": call.status,
        "call_id": call.call_id,
        "name": call.name,
        "input": text,
    }
    if call.namespace:
        item["namespace"] = call.namespace
    return item


def _custom_function_call(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    namespace = item.get("namespace")
    name = f"{namespace}__{item['name']}" if namespace else item["name"]
    return name, {"input": item.get("input", "")}


CUSTOM = ClientToolType(
    kind="custom",
    tool_types=("custom",),
    call_type="custom_tool_call",
    output_type="custom_tool_call_output",
    call_id_prefix="ctc",
    output_id_prefix="ctco",
    call_fields={"call_id": str, "name": str, "input": str},
    output_fields={"call_id": str, "output": (str, list)},
    make_call=_custom_call,
    as_function_call=_custom_function_call,
    shown="input",
    streamed_field="input",
)


# -- local_shell: one command ----------------------------------------------------------------
def _local_shell_call(call: NewCall) -> dict[str, Any]:
    args = call.args
    command = args.get("command")
    if isinstance(command, str):
        command = ["bash", "-lc", command]
    env = args.get("env")
    return {
        **call.head(),
        "action": {
            "type": "exec",
            "command": [str(c) for c in command or []],
            "timeout_ms": _int_or_none(args.get("timeout_ms")),
            "working_directory": _str_or_none(args.get("working_directory")),
            "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
            "user": None,
        },
    }


def _local_shell_function_call(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    action = item.get("action") or {}
    keys = ("command", "working_directory", "timeout_ms", "env")
    return "local_shell", {k: action[k] for k in keys if action.get(k) not in (None, {}, [])}


LOCAL_SHELL = ClientToolType(
    kind="local_shell",
    tool_types=("local_shell",),
    call_type="local_shell_call",
    output_type="local_shell_call_output",
    call_id_prefix="lsh",
    output_id_prefix="lsho",
    call_fields={"call_id": str, "action": dict},
    output_fields={"output": str},
    make_call=_local_shell_call,
    as_function_call=_local_shell_function_call,
    shown="action",
    function=OfferedFunction(
        "Run a command on the user's machine and get its output.",
        {
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
    ),
    output_call_field="id",
    output_status=True,
    steer_stub=False,
)


# -- shell: commands in order ----------------------------------------------------------------
def _shell_call(call: NewCall) -> dict[str, Any]:
    args = call.args
    commands = args.get("commands")
    if isinstance(commands, str):
        commands = [commands]
    return {
        **call.head(),
        "action": {
            "commands": [str(c) for c in commands or []],
            "timeout_ms": _int_or_none(args.get("timeout_ms")),
            "max_output_length": _int_or_none(args.get("max_output_length")),
        },
        "environment": None,
    }


def _shell_function_call(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    action = item.get("action") or {}
    keys = ("commands", "timeout_ms", "max_output_length")
    return "shell", {k: action[k] for k in keys if action.get(k) is not None}


def _shell_output_text(item: dict[str, Any]) -> str:
    """Each command's stdout, stderr and how it ended."""
    output = item.get("output")
    if not isinstance(output, list):
        return plain_output_text(item)
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


SHELL = ClientToolType(
    kind="shell",
    tool_types=("shell",),
    call_type="shell_call",
    output_type="shell_call_output",
    call_id_prefix="sh",
    output_id_prefix="sho",
    call_fields={"call_id": str, "action": dict},
    output_fields={"call_id": str, "output": list},
    make_call=_shell_call,
    as_function_call=_shell_function_call,
    shown="action",
    function=OfferedFunction(
        "Run shell commands on the user's machine and get their output.",
        {
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
    ),
    output_text=_shell_output_text,
)


# -- apply_patch: one file operation ---------------------------------------------------------
_PATCH_OPERATIONS = ("create_file", "update_file", "delete_file")


def _apply_patch_call(call: NewCall) -> dict[str, Any]:
    args = call.args
    op_type = args.get("type") if args.get("type") in _PATCH_OPERATIONS else "update_file"
    operation: dict[str, Any] = {"type": op_type, "path": str(args.get("path") or "")}
    if op_type != "delete_file":
        operation["diff"] = str(args.get("diff") or "")
    return {**call.head(), "operation": operation}


def _apply_patch_output_text(item: dict[str, Any]) -> str:
    output = item.get("output")
    status = item.get("status") or "completed"
    return f"{status}: {output}" if output else status


APPLY_PATCH = ClientToolType(
    kind="apply_patch",
    tool_types=("apply_patch",),
    call_type="apply_patch_call",
    output_type="apply_patch_call_output",
    call_id_prefix="apc",
    output_id_prefix="apco",
    call_fields={"call_id": str, "operation": dict},
    output_fields={"call_id": str},
    make_call=_apply_patch_call,
    as_function_call=lambda item: ("apply_patch", dict(item.get("operation") or {})),
    shown="operation",
    function=OfferedFunction(
        "Create, update or delete a file on the user's machine.",
        {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": list(_PATCH_OPERATIONS)},
                "path": {"type": "string", "description": "Path of the file."},
                "diff": {"type": "string", "description": "The diff to apply (create_file: the whole content)."},
            },
            "required": ["type", "path"],
        },
    ),
    output_text=_apply_patch_output_text,
)


# -- computer use: one action on the screen, a screenshot back --------------------------------
def _computer_call(call: NewCall) -> dict[str, Any]:
    action = call.args.get("action") if isinstance(call.args.get("action"), dict) else {"type": "screenshot"}
    return {**call.head(), "action": action, "pending_safety_checks": []}


def _computer_function_call(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "computer", {"action": item.get("action") or (item.get("actions") or [{}])[0]}


COMPUTER = ClientToolType(
    kind="computer",
    tool_types=("computer", "computer_use", "computer_use_preview"),
    call_type="computer_call",
    output_type="computer_call_output",
    call_id_prefix="cu",
    output_id_prefix="cuo",
    call_fields={"call_id": str},
    output_fields={"call_id": str, "output": dict},
    make_call=_computer_call,
    as_function_call=_computer_function_call,
    shown="action",
    function=OfferedFunction(
        "Act on the user's computer screen and get a screenshot back.",
        {
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
    ),
    # The screenshot follows the tool message as an image (client_tools.screenshot_url).
    output_text=lambda item: "A screenshot of the screen after the action follows.",
)


CLIENT_TOOL_TYPES = ClientToolTypes([CUSTOM, LOCAL_SHELL, SHELL, APPLY_PATCH, COMPUTER])
