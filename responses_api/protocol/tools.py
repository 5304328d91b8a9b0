"""Tools: validation, strict-schema normalisation and `tool_choice`.

Omitted/null `strict` normalises the schema into strict form where possible
(every object closed, every property required) and reports `strict: true`;
`strict: true` with a schema that cannot be strict is a 400; `strict: false`
passes the schema through untouched.

Every tool type of OpenAI's Responses API is accepted. Functions, members of
`namespace` tools, `custom` tools and the built-ins a client executes
(`local_shell`, `shell`, `apply_patch`, `computer_use_preview`) become `Tool`s
the upstream is offered as functions (see `client_tools`). Hosted tools
(`web_search`, `file_search`, ...) are kept apart in `HostedTool`s: the
route's policy decides what happens to them.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from .client_tool_types import CLIENT_TOOL_TYPES, ClientToolType
from .client_tools import HOSTED_TOOL_TYPES, custom_parameters
from .errors import InvalidRequest

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UPSTREAM_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(slots=True)
class Tool:
    """A tool the model is offered as a function. `source` says who runs it.

    `name` is the function name the upstream sees; `kind`, `call_name` and `namespace` say
    which item a call becomes (a `function_call` named `call_name` in `namespace`, a
    `custom_tool_call`, a `shell_call`, ...). `report` is how the Response's `tools` shows a
    non-function tool (the request's own entry); `reported` is false for the second and
    later members of one namespace, which the namespace's entry already shows."""

    name: str
    description: str | None
    parameters: dict[str, Any]
    strict: bool
    source: str = "client"  # "client": returned to the caller; "registry": run by the gateway
    bare: bool = False  # given as just {type, name}: may name a registry tool
    kind: str = "function"  # function, or a client tool type's (custom, shell, ...: client_tool_types)
    call_name: str | None = None
    namespace: str | None = None
    report: dict[str, Any] | None = None
    reported: bool = True
    deferred: bool = False  # defer_loading: offered only once tool search finds it (protocol/tool_search.py)

    @property
    def item_name(self) -> str:
        return self.call_name or self.name

    def schema(self) -> dict[str, Any]:
        """What a model is shown of the tool (a function's name, description and parameters),
        for token estimates: `as_dict` is the Response's view, where a namespace's first
        member stands for the whole namespace, members included."""
        entry: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            entry["description"] = self.description
        return entry

    def as_dict(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report
        entry = {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": self.strict,
        }
        if self.deferred:
            entry["defer_loading"] = True
        return entry


@dataclass(frozen=True, slots=True)
class HostedTool:
    """A tool OpenAI would run on its own servers (`web_search`, `file_search`, ...), as sent."""

    type: str
    spec: dict[str, Any]
    param: str


def namespaced_name(namespace: str, name: str) -> str:
    """The upstream function name of a namespace member: stable, and valid for every upstream."""
    joined = _UPSTREAM_UNSAFE.sub("_", f"{namespace}__{name}")
    if len(joined) <= 64:
        return joined
    return f"{joined[:55]}_{hashlib.sha256(joined.encode()).hexdigest()[:8]}"


class NotStrictable(ValueError):
    """The schema cannot be expressed in strict form; the message says where."""


def to_strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return a strict copy of `schema` or raise NotStrictable."""
    result = copy.deepcopy(schema)
    _make_strict(result, "")
    return result


def _make_strict(node: Any, path: str) -> None:
    if not isinstance(node, dict):
        return
    if "patternProperties" in node:
        raise NotStrictable(f"{path or '/'}: 'patternProperties' cannot be strict")
    is_object = (
        node.get("type") == "object"
        or (isinstance(node.get("type"), list) and "object" in node["type"])
        or "properties" in node
    )
    if is_object:
        extra = node.get("additionalProperties", False)
        if extra is not False:
            raise NotStrictable(f"{path or '/'}: 'additionalProperties' must be false")
        node["additionalProperties"] = False
        properties = node.setdefault("properties", {})
        if not isinstance(properties, dict):
            raise NotStrictable(f"{path}/properties: must be an object")
        node["required"] = list(properties)
        for key, sub in properties.items():
            _make_strict(sub, f"{path}/properties/{key}")
    for key in ("items", "not", "contains", "additionalItems"):
        if isinstance(node.get(key), dict):
            _make_strict(node[key], f"{path}/{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                _make_strict(sub, f"{path}/{key}/{i}")
    for key in ("$defs", "definitions"):
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                _make_strict(sub, f"{path}/{key}/{name}")


def make_tool(
    *,
    name: Any,  # as sent: checked here
    description: Any,
    parameters: Any,
    strict: bool | None,
    param: str,
    source: str = "client",
) -> Tool:
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise InvalidRequest(f"Invalid '{param}.name': must match ^[a-zA-Z0-9_-]{{1,64}}$.", param=f"{param}.name")
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(f"Invalid '{param}.description': expected a string.", param=f"{param}.description")
    if parameters is None:
        parameters = dict(EMPTY_PARAMETERS)
    if not isinstance(parameters, dict):
        raise InvalidRequest(
            f"Invalid '{param}.parameters': expected a JSON Schema object.", param=f"{param}.parameters"
        )
    if strict is not None and not isinstance(strict, bool):
        raise InvalidRequest(f"Invalid '{param}.strict': expected a boolean.", param=f"{param}.strict")
    if strict is False:
        return Tool(name, description, parameters, False, source)
    try:
        strict_parameters = to_strict_schema(parameters)
    except NotStrictable as exc:
        if strict is True:
            raise InvalidRequest(
                f"Invalid schema for function '{name}' with 'strict': true: {exc}.",
                param=f"{param}.parameters",
            ) from None
        return Tool(name, description, parameters, False, source)
    return Tool(name, description, strict_parameters, True, source)


def _function_tool(entry: dict[str, Any], param: str, namespace: str | None = None) -> Tool:
    if "function" in entry and "name" not in entry:
        raise InvalidRequest(
            f"'{param}' uses the Chat Completions shape; Responses function tools are flat: "
            "{type, name, description, parameters, strict}.",
            param=f"{param}.name",
        )
    tool = make_tool(
        name=entry.get("name"),
        description=entry.get("description"),
        parameters=entry.get("parameters"),
        strict=entry.get("strict"),
        param=param,
    )
    tool.deferred = _defer_loading(entry, param)
    if namespace is None:
        tool.bare = all(entry.get(k) is None for k in ("parameters", "description", "strict"))
    else:
        tool.call_name, tool.namespace = tool.name, namespace
        tool.name = namespaced_name(namespace, tool.name)
        tool.reported = False
    return tool


def _defer_loading(entry: dict[str, Any], param: str) -> bool:
    value = entry.get("defer_loading")
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(f"Invalid '{param}.defer_loading': expected a boolean.", param=f"{param}.defer_loading")
    return bool(value)


def _custom_tool(entry: dict[str, Any], param: str, namespace: str | None = None) -> Tool:
    name = entry.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise InvalidRequest(f"Invalid '{param}.name': must match ^[a-zA-Z0-9_-]{{1,64}}$.", param=f"{param}.name")
    description = entry.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(f"Invalid '{param}.description': expected a string.", param=f"{param}.description")
    fmt = entry.get("format")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
            raise InvalidRequest(
                f"Invalid '{param}.format': expected {{type: 'text'}} or {{type: 'grammar', syntax, definition}}.",
                param=f"{param}.format",
            )
        if fmt["type"] == "grammar" and not (
            fmt.get("syntax") in ("lark", "regex") and isinstance(fmt.get("definition"), str)
        ):
            raise InvalidRequest(
                f"Invalid '{param}.format': a grammar needs 'syntax' ('lark' or 'regex') and 'definition'.",
                param=f"{param}.format",
            )
    upstream = namespaced_name(namespace, name) if namespace else name
    return Tool(
        upstream,
        description,
        custom_parameters(fmt),
        False,
        kind="custom",
        call_name=name,
        namespace=namespace,
        report=None if namespace else dict(entry),
        reported=namespace is None,
        deferred=_defer_loading(entry, param),
    )


def _namespace_tools(entry: dict[str, Any], param: str) -> list[Tool]:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"Missing or invalid '{param}.name': expected a string.", param=f"{param}.name")
    members = entry.get("tools")
    if not isinstance(members, list) or not members:
        raise InvalidRequest(f"Invalid '{param}.tools': expected a non-empty array.", param=f"{param}.tools")
    out: list[Tool] = []
    for j, member in enumerate(members):
        member_param = f"{param}.tools[{j}]"
        if not isinstance(member, dict):
            raise InvalidRequest(f"Invalid '{member_param}': expected an object.", param=member_param)
        kind = member.get("type", "function")
        if kind == "function":
            out.append(_function_tool(member, member_param, namespace=name))
        elif kind == "custom":
            out.append(_custom_tool(member, member_param, namespace=name))
        else:
            raise InvalidRequest(
                f"Invalid '{member_param}.type': a namespace holds 'function' and 'custom' tools.",
                param=f"{member_param}.type",
            )
    # The Response reports the namespace once, as sent.
    out[0].report, out[0].reported = dict(entry), True
    return out


def _builtin_tool(entry: dict[str, Any], builtin: ClientToolType) -> Tool:
    """A client built-in, offered as the function its type describes (named as its kind)."""
    assert builtin.function is not None
    function = builtin.function
    return Tool(builtin.kind, function.description, function.parameters, False, kind=builtin.kind, report=dict(entry))


def _builtin(tool_type: Any) -> ClientToolType | None:
    """The client built-in a `tools[].type` gives (None: it gives none)."""
    entry = CLIENT_TOOL_TYPES.of_tool_type(tool_type) if isinstance(tool_type, str) else None
    return entry if entry is not None and entry.is_builtin else None


def normalize_tools(raw: Any) -> list[Tool]:
    """The tools the model is offered as functions (MCP and hosted tools are parsed apart)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("Invalid 'tools': expected an array.", param="tools")
    tools: list[Tool] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        param = f"tools[{i}]"
        if not isinstance(entry, dict):
            raise InvalidRequest(f"Invalid '{param}': expected an object.", param=param)
        kind = entry.get("type")
        if kind == "mcp" or kind in HOSTED_TOOL_TYPES:
            continue  # protocol.mcp.normalize_mcp_tools, hosted_tools
        if kind == "function":
            new = [_function_tool(entry, param)]
        elif kind == "custom":
            new = [_custom_tool(entry, param)]
        elif kind == "namespace":
            new = _namespace_tools(entry, param)
        elif (builtin := _builtin(kind)) is not None:
            new = [_builtin_tool(entry, builtin)]
        else:
            raise InvalidRequest(f"Unsupported tool type {kind!r} in '{param}.type'.", param=f"{param}.type")
        for tool in new:
            if tool.name in seen:
                raise InvalidRequest(f"Duplicate tool name {tool.item_name!r}.", param=f"{param}.name")
            seen.add(tool.name)
        tools += new
    return tools


def hosted_tools(raw: Any) -> list[HostedTool]:
    """The request's hosted tools (`web_search`, ...), in order; `normalize_tools` checked the array.
    `tool_search` is not one of them: the gateway serves it for every upstream (request.py)."""
    if not isinstance(raw, list):
        return []
    return [
        HostedTool(entry["type"], dict(entry), f"tools[{i}]")
        for i, entry in enumerate(raw)
        if isinstance(entry, dict) and entry.get("type") in HOSTED_TOOL_TYPES and entry["type"] != "tool_search"
    ]


def _find_tool(tools: list[Tool], kind: str, name: str | None) -> Tool | None:
    for tool in tools:
        if tool.kind == kind and (name is None or name in (tool.item_name, tool.name)):
            return tool
    return None


def _choice_kind(choice_type: Any) -> str | None:
    """The tool kind a `tool_choice` type names: a client tool type's (None: not one)."""
    entry = CLIENT_TOOL_TYPES.of_tool_type(choice_type) if isinstance(choice_type, str) else None
    return entry.kind if entry is not None else None


def _choice_entry(entry: Any, tools: list[Tool], param: str) -> dict[str, Any]:
    """One tool named by `tool_choice` (or by its `allowed_tools`), checked against the tools."""
    if not isinstance(entry, dict):
        raise InvalidRequest(f"Invalid '{param}': expected an object.", param=param)
    kind = entry.get("type")
    if kind in ("function", "custom"):
        name = entry.get("name")
        if _find_tool(tools, kind, name if isinstance(name, str) else "") is None:
            raise InvalidRequest(
                f"'{param}.name' {name!r} is not one of the request's {kind} tools.", param=f"{param}.name"
            )
        return {"type": kind, "name": name}
    chosen_kind = _choice_kind(kind)
    if chosen_kind is not None:
        if _find_tool(tools, chosen_kind, None) is None:
            raise InvalidRequest(
                f"'{param}' names the {kind!r} tool, which the request does not give.", param=f"{param}.type"
            )
        return {"type": kind}
    if kind == "mcp":
        if not isinstance(entry.get("server_label"), str):
            raise InvalidRequest(f"Missing '{param}.server_label'.", param=f"{param}.server_label")
        return {"type": "mcp", "server_label": entry["server_label"], "name": entry.get("name")}
    if kind in HOSTED_TOOL_TYPES:
        return {"type": kind}
    raise InvalidRequest(f"Invalid '{param}.type': {kind!r}.", param=f"{param}.type")


def normalize_tool_choice(raw: Any, tools: list[Tool]) -> str | dict[str, Any]:
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        if raw not in ("auto", "none", "required"):
            raise InvalidRequest(
                "Invalid 'tool_choice'; expected 'auto', 'none', 'required' or an object.",
                param="tool_choice",
            )
        if raw == "required" and not tools:
            raise InvalidRequest("'tool_choice' is 'required' but no tools are given.", param="tool_choice")
        return raw
    if not isinstance(raw, dict):
        raise InvalidRequest("Invalid 'tool_choice'.", param="tool_choice")
    if raw.get("type") == "allowed_tools":
        mode = raw.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise InvalidRequest("Invalid 'tool_choice.mode'; expected 'auto' or 'required'.", param="tool_choice.mode")
        allowed = raw.get("tools")
        if not isinstance(allowed, list) or not allowed:
            raise InvalidRequest("'tool_choice.tools' must be a non-empty array.", param="tool_choice.tools")
        out = [_choice_entry(entry, tools, f"tool_choice.tools[{i}]") for i, entry in enumerate(allowed)]
        return {"type": "allowed_tools", "mode": mode, "tools": out}
    return _choice_entry(raw, tools, "tool_choice")


def chosen_upstream_name(choice: dict[str, Any], tools: list[Tool]) -> str | None:
    """The function a specific `tool_choice` forces, as the upstream knows it (None: none to force)."""
    kind = choice.get("type")
    if kind in ("function", "custom"):
        tool = _find_tool(tools, kind, choice.get("name"))
    elif (chosen_kind := _choice_kind(kind)) is not None:
        tool = _find_tool(tools, chosen_kind, None)
    else:
        return None
    return tool.name if tool is not None else None


def allowed_tool_names(tool_choice: str | dict[str, Any], tools: list[Tool]) -> frozenset[str]:
    """The upstream names a call may use; a call to any other name is never run nor returned."""
    if tool_choice == "none":
        return frozenset()
    if isinstance(tool_choice, dict):
        entries = tool_choice["tools"] if tool_choice["type"] == "allowed_tools" else [tool_choice]
        names: set[str] = set()
        for entry in entries:
            if entry["type"] == "mcp":  # every tool of that server (bound once the server is listed)
                names |= {t.name for t in tools if t.source == "mcp"}
            elif entry["type"] in HOSTED_TOOL_TYPES:
                continue
            else:
                name = chosen_upstream_name(entry, tools)
                if name is not None:
                    names.add(name)
        if tool_choice["type"] == "allowed_tools" or names:
            return frozenset(names)
    return frozenset(t.name for t in tools)
