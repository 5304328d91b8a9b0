"""MCP tools in the protocol: the request's `{"type": "mcp"}` tools, approval policies,
the names the model sees, and how MCP items read to a Chat Completions model.

Pure: no I/O. Which servers a run uses and the run's MCP session are in responses_api/mcp/;
listing and calling servers is tool_registry/mcp_client.py.
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest
from .tools import TOOL_NAME

MCP_ITEM_TYPES = frozenset({"mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"})
_item_type = operator.itemgetter("type")

LABEL = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
APPROVAL_WORDS = frozenset({"always", "never"})


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """OpenAI's MCPToolFilter: tool names and/or the read-only hint."""

    tool_names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, name: str, annotations: dict[str, Any] | None) -> bool:
        if self.tool_names is not None and name in self.tool_names:
            return True
        if self.read_only is not None:
            hint = bool((annotations or {}).get("readOnlyHint", False))
            return hint == self.read_only
        return False

    def admits(self, name: str, annotations: dict[str, Any] | None) -> bool:
        """As `allowed_tools`: every condition given must hold (names and read-only hint)."""
        if self.tool_names is not None and name not in self.tool_names:
            return False
        if self.read_only is not None:
            return bool((annotations or {}).get("readOnlyHint", False)) == self.read_only
        return True

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tool_names is not None:
            out["tool_names"] = sorted(self.tool_names)
        if self.read_only is not None:
            out["read_only"] = self.read_only
        return out


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """`require_approval`: "always", "never", or {"always": filter, "never": filter}.

    A tool neither filter matches needs approval (OpenAI's default is "always"), unless only
    an `always` filter is given: then it lists the only tools that need it."""

    mode: str = "always"  # always | never | filter
    always: ToolFilter | None = None
    never: ToolFilter | None = None

    def requires(self, name: str, annotations: dict[str, Any] | None = None) -> bool:
        if self.mode != "filter":
            return self.mode == "always"
        if self.always is not None and self.always.matches(name, annotations):
            return True
        if self.never is not None and self.never.matches(name, annotations):
            return False
        # Unmatched: an `always` list alone names the exceptions; otherwise approval is the default.
        return self.always is None

    def as_json(self) -> str | dict[str, Any]:
        if self.mode != "filter":
            return self.mode
        out: dict[str, Any] = {}
        if self.always is not None:
            out["always"] = self.always.as_dict()
        if self.never is not None:
            out["never"] = self.never.as_dict()
        return out


@dataclass(frozen=True, slots=True)
class McpTool:
    """One MCP tool declaration of a request (ad hoc with `server_url`, or a registry label)."""

    server_label: str
    server_url: str | None
    headers: dict[str, str] = field(default_factory=dict)
    allowed: ToolFilter | None = None
    approval: ApprovalPolicy = ApprovalPolicy()
    approval_given: bool = False  # the request said require_approval (else the registry decides)
    server_description: str | None = None
    param: str = "tools"  # where the request declared it, for errors
    deferred: bool = False  # defer_loading: its tools are offered once tool search finds them

    def as_dict(self) -> dict[str, Any]:
        """As the Response echoes it: headers and authorization are secrets, never echoed."""
        out: dict[str, Any] = {"type": "mcp", "server_label": self.server_label}
        if self.server_url is not None:
            out["server_url"] = self.server_url
        if self.server_description is not None:
            out["server_description"] = self.server_description
        out["headers"] = None
        if self.allowed is not None:
            if self.allowed.read_only is None and self.allowed.tool_names is not None:
                out["allowed_tools"] = sorted(self.allowed.tool_names)
            else:
                out["allowed_tools"] = self.allowed.as_dict()
        else:
            out["allowed_tools"] = None
        out["require_approval"] = self.approval.as_json()
        if self.deferred:
            out["defer_loading"] = True
        return out


def _filter(raw: Any, param: str) -> ToolFilter:
    names: list[Any] | None
    if isinstance(raw, list):
        names = raw
        read_only = None
    elif isinstance(raw, dict):
        unknown = set(raw) - {"tool_names", "read_only"}
        if unknown:
            key = sorted(unknown)[0]
            raise InvalidRequest(f"Unknown field '{param}.{key}'.", param=f"{param}.{key}")
        names = raw.get("tool_names")
        read_only = raw.get("read_only")
        if read_only is not None and not isinstance(read_only, bool):
            raise InvalidRequest(f"Invalid '{param}.read_only': expected a boolean.", param=f"{param}.read_only")
        param = f"{param}.tool_names"
    else:
        raise InvalidRequest(f"Invalid '{param}': expected an array of tool names or a filter object.", param=param)
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise InvalidRequest(f"Invalid '{param}': expected an array of tool names.", param=param)
        return ToolFilter(frozenset(names), read_only)
    return ToolFilter(None, read_only)


def parse_approval(raw: Any, param: str) -> ApprovalPolicy:
    if raw is None:
        return ApprovalPolicy("always")
    if isinstance(raw, str):
        if raw not in APPROVAL_WORDS:
            raise InvalidRequest(f"Invalid '{param}': expected 'always', 'never' or a filter object.", param=param)
        return ApprovalPolicy(raw)
    if not isinstance(raw, dict):
        raise InvalidRequest(f"Invalid '{param}': expected 'always', 'never' or a filter object.", param=param)
    unknown = set(raw) - {"always", "never"}
    if unknown:
        key = sorted(unknown)[0]
        raise InvalidRequest(f"Unknown field '{param}.{key}'.", param=f"{param}.{key}")
    always = _filter(raw["always"], f"{param}.always") if raw.get("always") is not None else None
    never = _filter(raw["never"], f"{param}.never") if raw.get("never") is not None else None
    return ApprovalPolicy("filter", always, never)


def parse_mcp_tool(entry: dict[str, Any], param: str) -> McpTool:
    label = entry.get("server_label")
    if not isinstance(label, str) or not LABEL.match(label):
        raise InvalidRequest(
            f"Invalid '{param}.server_label': 1-64 letters, digits, '_' or '-'.", param=f"{param}.server_label"
        )
    for unsupported in ("connector_id", "tunnel_id"):
        if entry.get(unsupported) is not None:
            raise InvalidRequest(
                f"'{param}.{unsupported}' is not supported by this gateway; give 'server_url' or the "
                "label of a registered MCP server.",
                param=f"{param}.{unsupported}",
            )
    url = entry.get("server_url")
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise InvalidRequest(f"Invalid '{param}.server_url': expected an http(s) URL.", param=f"{param}.server_url")
    headers = entry.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidRequest(f"Invalid '{param}.headers': expected an object of strings.", param=f"{param}.headers")
    headers = dict(headers)
    authorization = entry.get("authorization")
    if authorization is not None:
        if not isinstance(authorization, str):
            raise InvalidRequest(f"Invalid '{param}.authorization': expected a string.", param=f"{param}.authorization")
        headers.setdefault("Authorization", f"Bearer {authorization}")
    if headers and url is None:
        raise InvalidRequest(
            f"'{param}.headers' only apply to an ad-hoc 'server_url'; a registered server brings its own credentials.",
            param=f"{param}.headers",
        )
    allowed_raw = entry.get("allowed_tools")
    allowed = _filter(allowed_raw, f"{param}.allowed_tools") if allowed_raw is not None else None
    description = entry.get("server_description")
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(
            f"Invalid '{param}.server_description': expected a string.", param=f"{param}.server_description"
        )
    deferred = entry.get("defer_loading")
    if deferred is not None and not isinstance(deferred, bool):
        raise InvalidRequest(f"Invalid '{param}.defer_loading': expected a boolean.", param=f"{param}.defer_loading")
    return McpTool(
        deferred=bool(deferred),
        server_label=label,
        server_url=url,
        headers=headers,
        allowed=allowed,
        approval=parse_approval(entry.get("require_approval"), f"{param}.require_approval"),
        approval_given=entry.get("require_approval") is not None,
        server_description=description,
        param=param,
    )


def normalize_mcp_tools(raw: Any) -> list[McpTool]:
    """The request's `{"type": "mcp"}` entries (normalize_tools has checked the array)."""
    if not isinstance(raw, list):
        return []
    out: list[McpTool] = []
    labels: set[str] = set()
    for i, entry in enumerate(raw):
        if isinstance(entry, dict) and entry.get("type") == "mcp":
            tool = parse_mcp_tool(entry, f"tools[{i}]")
            if tool.server_label in labels:
                raise InvalidRequest(
                    f"Duplicate MCP server_label {tool.server_label!r}.", param=f"tools[{i}].server_label"
                )
            labels.add(tool.server_label)
            out.append(tool)
    return out


# -- the names the model sees ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class McpBinding:
    """A model-visible function name bound to one MCP server's tool."""

    server_label: str
    tool_name: str
    requires_approval: bool


def fallback_name(server_label: str, tool_name: str) -> str:
    return _NOT_NAME_CHARS.sub("_", f"{server_label}__{tool_name}")[:64]


def model_names(listed: list[tuple[str, str]], taken: set[str]) -> dict[tuple[str, str], str]:
    """(server_label, tool_name) -> the function name the model sees.

    A tool keeps its own name when that is a valid function name and no other tool (a
    function tool or another server's) has it; otherwise it becomes `label__name`."""
    counts: dict[str, int] = {}
    for _, name in listed:
        counts[name] = counts.get(name, 0) + 1
    out: dict[tuple[str, str], str] = {}
    for label, name in listed:
        plain = TOOL_NAME.match(name) and counts[name] == 1 and name not in taken
        out[(label, name)] = name if plain else fallback_name(label, name)
    return out


# -- MCP items as a Chat Completions model reads them ----------------------------------------


def _call_output(item: dict[str, Any]) -> str:
    if item.get("error"):
        error = item["error"]
        if isinstance(error, dict):
            error = error.get("message") or json.dumps(error.get("content", error))
        return json.dumps({"error": error})
    if item.get("output") is not None:
        output: str = item["output"]  # an mcp_call's output is text (items.py checks it)
        return output
    return json.dumps({"error": "this call did not finish"})


def as_model_items(items: list[dict[str, Any]], names: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Replace MCP items by the function_call/function_call_output pairs the model understands.

    mcp_list_tools: dropped (its tools are the request's function tools). mcp_call: a call and
    its output. An approval request the user denied: a call and a "denied" output, so the model
    hears about it; approved ones are the later mcp_call; unanswered ones are dropped."""
    if MCP_ITEM_TYPES.isdisjoint(map(_item_type, items)):  # in C: a long chain is scanned on every call
        return items
    denied = {
        i["approval_request_id"]: i.get("reason")
        for i in items
        if i["type"] == "mcp_approval_response" and not i.get("approve")
    }
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "mcp_call":
            out += _as_function_call(item, names, _call_output(item))
        elif kind == "mcp_approval_request" and item["id"] in denied:
            reason = denied[item["id"]]
            message = "The user denied this tool call" + (f": {reason}" if reason else ".")
            out += _as_function_call(item, names, json.dumps({"error": message}))
        elif not kind.startswith("mcp_"):
            out.append(item)
    return out


def _as_function_call(item: dict[str, Any], names: dict[tuple[str, str], str], output: str) -> list[dict[str, Any]]:
    """An MCP call (or a denied request) as the function call and output a model without MCP
    understands, under the function name it was offered."""
    name = names.get((item["server_label"], item["name"])) or fallback_name(item["server_label"], item["name"])
    call = {
        "type": "function_call",
        "id": item["id"],
        "call_id": item["id"],
        "name": name,
        "arguments": item.get("arguments") or "{}",
        "status": "completed",
    }
    result = {
        "type": "function_call_output",
        "id": item["id"] + "_out",
        "call_id": item["id"],
        "output": output,
        "status": "completed",
    }
    return [call, result]


def pending_approvals(
    context: list[dict[str, Any]], input_items: list[dict[str, Any]]
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[str]]:
    """Approved requests still to run: (request item, response item) pairs, and errors.

    An approval response must answer a request in the context; a request already run (an
    mcp_call carries its id) is not run again."""
    if not any(i["type"] == "mcp_approval_response" for i in input_items):
        return [], []  # nothing to look up: a long chain's context is not scanned on every turn
    requests = {i["id"]: i for i in context if i["type"] == "mcp_approval_request"}
    done = {i.get("approval_request_id") for i in context if i["type"] == "mcp_call"}
    to_run: list[tuple[dict[str, Any], dict[str, Any]]] = []
    unknown: list[str] = []
    for answer in input_items:
        if answer["type"] != "mcp_approval_response":
            continue
        request = requests.get(answer["approval_request_id"])
        if request is None:
            unknown.append(answer["approval_request_id"])
        elif answer["approve"] and request["id"] not in done:
            to_run.append((request, answer))
            done.add(request["id"])
    return to_run, unknown


# The credentials a request's MCP tools carry, kept apart from a stored copy of the request.
_CREDENTIAL_FIELDS = ("headers", "authorization")


def split_mcp_credentials(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A copy of a create body without its MCP tools' `headers`/`authorization`, and those
    (by tool index), so that a stored job can keep them sealed instead of in plain text."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return body, {}
    credentials: dict[str, dict[str, Any]] = {}
    stripped: list[Any] = []
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "mcp" and any(k in tool for k in _CREDENTIAL_FIELDS):
            credentials[str(i)] = {k: tool[k] for k in _CREDENTIAL_FIELDS if k in tool}
            tool = {k: v for k, v in tool.items() if k not in _CREDENTIAL_FIELDS}
        stripped.append(tool)
    return ({**body, "tools": stripped}, credentials) if credentials else (body, {})


def restore_mcp_credentials(body: dict[str, Any], credentials: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`split_mcp_credentials` undone."""
    tools = list(body.get("tools") or [])
    for index, fields in credentials.items():
        tools[int(index)] = {**tools[int(index)], **fields}
    return {**body, "tools": tools}
