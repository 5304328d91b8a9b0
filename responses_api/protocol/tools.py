"""Function tools: validation, strict-schema normalisation and `tool_choice`.

Omitted/null `strict` normalises the schema into strict form where possible
(every object closed, every property required) and reports `strict: true`;
`strict: true` with a schema that cannot be strict is a 400; `strict: false`
passes the schema through untouched.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequest

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(slots=True)
class Tool:
    """A function tool as the Response reports it. `source` says who runs it."""

    name: str
    description: str | None
    parameters: dict[str, Any]
    strict: bool
    source: str = "client"  # "client": returned to the caller; "registry": run by the gateway
    bare: bool = False  # given as just {type, name}: may name a registry tool

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": self.strict,
        }


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
    is_object = node.get("type") == "object" or (
        isinstance(node.get("type"), list) and "object" in node["type"]
    ) or "properties" in node
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
    *, name: str, description: str | None, parameters: Any, strict: bool | None, param: str,
    source: str = "client",
) -> Tool:
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise InvalidRequest(
            f"Invalid '{param}.name': must match ^[a-zA-Z0-9_-]{{1,64}}$.", param=f"{param}.name"
        )
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


def normalize_tools(raw: Any) -> list[Tool]:
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
        if kind == "mcp":
            continue  # parsed by protocol.mcp.normalize_mcp_tools
        if kind != "function":
            raise InvalidRequest(
                f"Unsupported tool type {kind!r} in '{param}.type'; this gateway supports "
                "'function' and 'mcp' tools.",
                param=f"{param}.type",
            )
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
        tool.bare = all(entry.get(k) is None for k in ("parameters", "description", "strict"))
        if tool.name in seen:
            raise InvalidRequest(f"Duplicate tool name {tool.name!r}.", param=f"{param}.name")
        seen.add(tool.name)
        tools.append(tool)
    return tools


def normalize_tool_choice(raw: Any, tools: list[Tool]) -> str | dict[str, Any]:
    if raw is None:
        return "auto"
    names = {t.name for t in tools}
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
    kind = raw.get("type")
    if kind == "function":
        name = raw.get("name")
        if name not in names:
            raise InvalidRequest(
                f"'tool_choice.name' {name!r} is not one of the request's tools.", param="tool_choice.name"
            )
        return {"type": "function", "name": name}
    if kind == "allowed_tools":
        mode = raw.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise InvalidRequest(
                "Invalid 'tool_choice.mode'; expected 'auto' or 'required'.", param="tool_choice.mode"
            )
        allowed = raw.get("tools")
        if not isinstance(allowed, list) or not allowed:
            raise InvalidRequest("'tool_choice.tools' must be a non-empty array.", param="tool_choice.tools")
        out = []
        for i, entry in enumerate(allowed):
            if not isinstance(entry, dict) or entry.get("type") != "function" or entry.get("name") not in names:
                raise InvalidRequest(
                    f"'tool_choice.tools[{i}]' must name one of the request's function tools.",
                    param=f"tool_choice.tools[{i}]",
                )
            out.append({"type": "function", "name": entry["name"]})
        return {"type": "allowed_tools", "mode": mode, "tools": out}
    raise InvalidRequest(f"Invalid 'tool_choice.type': {kind!r}.", param="tool_choice.type")


def allowed_tool_names(tool_choice: str | dict[str, Any], tools: list[Tool]) -> frozenset[str]:
    """The names a call may use; a call to any other name is never run nor returned."""
    if tool_choice == "none":
        return frozenset()
    if isinstance(tool_choice, dict):
        if tool_choice["type"] == "function":
            return frozenset({tool_choice["name"]})
        if tool_choice["type"] == "allowed_tools":
            return frozenset(t["name"] for t in tool_choice["tools"])
    return frozenset(t.name for t in tools)
