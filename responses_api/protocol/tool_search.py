"""Tool search over deferred tools (OpenAI's `tool_search` with `defer_loading`), for any upstream.

A deferred tool (a client function with `defer_loading: true`, a registry tool or MCP server
marked deferred) is kept out of the model's tool list. The model is offered a `tool_search`
function instead; the gateway answers its searches from the deferred set (tool_ranking.py: BM25
over each tool's name, namespace or server, description and parameter names) with a
`tool_search_output` item that carries the found definitions, and those tools are offered from
the next model call on. The output items stay in the chain, so a continued chain still has them
(`found_in`).

With `execution: "client"` the search is the client's: its calls come back as
`tool_search_call` items, and the client's `tool_search_output` loads what it returns.
`additional_tools` input items add tools the same way. Pure: no Django, no I/O.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest
from .ids import new_id
from .tools import Tool, namespaced_name, normalize_tools

_LOADING_TYPES = frozenset({"tool_search_output", "additional_tools"})  # items that load tools
_item_type = operator.itemgetter("type")

SEARCH_NAME = "tool_search"  # the function the model calls; OpenAI's tool has no other name
SEARCH_DESCRIPTION = (
    "Search the tools that are not loaded yet by what they do. Returns the best matches, which "
    "you can call from then on. Use keywords: a task, an object, a service (e.g. 'create github issue')."
)
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "Keywords describing the tool you need."}},
    "required": ["query"],
    "additionalProperties": False,
}
ITEM_TYPES = frozenset({"tool_search_call", "tool_search_output", "additional_tools"})
_ADDABLE = frozenset({"function", "custom", "namespace"})  # the tool types an additional_tools item adds


def search_tool(entry: dict[str, Any] | None, param: str = "tools") -> Tool:
    """The `tool_search` tool as the model is offered it: `entry` is the request's (None: the
    gateway offers it for deferred registry or MCP tools, and the Response does not list it).
    `source` is "client" for `execution: "client"` (the call is returned), else "gateway"."""
    client = False
    description, parameters = SEARCH_DESCRIPTION, SEARCH_PARAMETERS
    if entry is not None:
        execution = entry.get("execution")
        if execution not in (None, "server", "client"):
            raise InvalidRequest(
                f"Invalid '{param}.execution': expected 'server' or 'client'.", param=f"{param}.execution"
            )
        client = execution == "client"
        given_description, given_parameters = entry.get("description"), entry.get("parameters")
        if given_description is not None and not isinstance(given_description, str):
            raise InvalidRequest(f"Invalid '{param}.description': expected a string.", param=f"{param}.description")
        if given_parameters is not None and not isinstance(given_parameters, dict):
            raise InvalidRequest(
                f"Invalid '{param}.parameters': expected a JSON Schema object.", param=f"{param}.parameters"
            )
        if client:  # a client's search takes what its own search takes
            description = given_description or description
            parameters = given_parameters or parameters
    return Tool(
        SEARCH_NAME,
        description,
        parameters,
        parameters is SEARCH_PARAMETERS,
        source="client" if client else "gateway",
        kind="tool_search",
        report=dict(entry) if entry is not None else None,
        reported=entry is not None,
    )


def search_description(count: int, groups: dict[str, str]) -> str:
    """The search function's description for `count` deferred tools: what they are grouped in
    (MCP servers, namespaces; at most 30 named), so the model knows what it may search for."""
    if not count:
        return SEARCH_DESCRIPTION
    text = f"{SEARCH_DESCRIPTION} {count} tools are not loaded yet"
    if groups:
        named = [f"{name} ({what[:80]})" for name, what in list(groups.items())[:30]]
        more = f" and {len(groups) - 30} more" if len(groups) > 30 else ""
        text += ", among them those of " + ", ".join(named) + more
    return text + "."


def check_deferred(tools: list[Tool]) -> None:
    """A client's deferred tool needs a `tool_search` tool to be found with (as OpenAI requires)."""
    if not any(t.deferred for t in tools) or any(t.kind == "tool_search" for t in tools):
        return
    first = next(t for t in tools if t.deferred)
    raise InvalidRequest(
        f"Tool {first.item_name!r} has 'defer_loading': true, which needs a 'tool_search' tool in 'tools'.",
        param="tools",
    )


def search_query(arguments: Any) -> str:
    """The query of a search call's arguments (an object; a model's bare text is taken whole)."""
    if isinstance(arguments, dict):
        query = arguments.get("query")
        if isinstance(query, str):
            return query
        return " ".join(v for v in arguments.values() if isinstance(v, str))
    return arguments if isinstance(arguments, str) else ""


def call_arguments(text: str) -> Any:
    """A search call's `arguments` (an object in the item) from the function arguments the model wrote."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {"query": text}
    return value if isinstance(value, dict) else {"query": text}


# -- what a search loads, as the wire shows it ----------------------------------------------
def tool_entries(
    found: list[Tool], namespaces: dict[str, str], servers: dict[str, tuple[str, str]]
) -> list[dict[str, Any]]:
    """The `tools` of a `tool_search_output`: functions and custom tools as declared (with
    `defer_loading`), namespace members in their namespace (`namespaces`: name -> description),
    MCP tools as their server with the found tools allowed (`servers`: upstream name -> (label,
    tool)); one entry per namespace and per server."""
    entries: list[dict[str, Any]] = []
    by_group: dict[tuple[str, str], dict[str, Any]] = {}
    for tool in found:
        if tool.name in servers:
            label, name = servers[tool.name]
            entry = by_group.get(("mcp", label))
            if entry is None:
                entry = by_group[("mcp", label)] = {
                    "type": "mcp",
                    "server_label": label,
                    "allowed_tools": [],
                    "defer_loading": True,
                }
                entries.append(entry)
            entry["allowed_tools"].append(name)
            continue
        member = _member_entry(tool)
        if tool.namespace:
            entry = by_group.get(("namespace", tool.namespace))
            if entry is None:
                entry = by_group[("namespace", tool.namespace)] = {
                    "type": "namespace",
                    "name": tool.namespace,
                    "description": namespaces.get(tool.namespace, ""),
                    "tools": [],
                }
                entries.append(entry)
            entry["tools"].append(member)
        else:
            entries.append(member)
    return entries


def _member_entry(tool: Tool) -> dict[str, Any]:
    entry: dict[str, Any]
    if tool.kind == "custom":
        entry = {"type": "custom", "name": tool.item_name, "description": tool.description}
        if tool.report is not None and "format" in tool.report:
            entry["format"] = tool.report["format"]
    else:
        entry = {
            "type": "function",
            "name": tool.item_name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": tool.strict,
        }
    entry["defer_loading"] = True
    return entry


def call_item(call_id: str, *, client: bool) -> dict[str, Any]:
    """A `tool_search_call` as it opens (its arguments are filled when the model's call ends)."""
    return {
        "id": new_id("tsc"),
        "type": "tool_search_call",
        "status": "in_progress",
        "call_id": call_id,
        "execution": "client" if client else "server",
        "arguments": {},
    }


def output_item(call: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The gateway's answer to a server-executed search call."""
    return {
        "id": new_id("tso"),
        "type": "tool_search_output",
        "status": "completed",
        "call_id": call.get("call_id"),
        "execution": "server",
        "tools": entries,
    }


# -- what a chain has loaded ------------------------------------------------------------------
@dataclass(slots=True)
class Loaded:
    """What the items of a context load: the upstream names of tools found (deferred tools the run
    has), and the definitions a client brought (a client search's results, `additional_tools`),
    which the run offers where it has no tool of that name. A server search's results only name
    tools: a tool of the registry is never turned into a client's by a chain that outlived it."""

    names: dict[str, None] = field(default_factory=dict)  # in the order found: offered in that order
    added: list[dict[str, Any]] = field(default_factory=list)
    mcp: list[tuple[str, str]] = field(default_factory=list)  # (server label, tool) found


def found_in(items: Iterable[dict[str, Any]]) -> Loaded:
    """The tools the `tool_search_output` and `additional_tools` items of `items` load."""
    loaded = Loaded()
    if isinstance(items, list) and _LOADING_TYPES.isdisjoint(map(_item_type, items)):
        return loaded  # the common case, found in C: a long chain is scanned on every turn
    for item in items:
        if item["type"] not in _LOADING_TYPES:
            continue
        clients = item["type"] == "additional_tools" or item.get("execution") == "client"
        for entry in item.get("tools") or []:
            if not isinstance(entry, dict):
                continue
            kind = entry.get("type")
            if kind == "mcp" and isinstance(entry.get("server_label"), str):
                names = entry.get("allowed_tools")
                if isinstance(names, list):
                    loaded.mcp += [(entry["server_label"], n) for n in names if isinstance(n, str)]
            elif kind in ("function", "custom"):
                loaded.names.setdefault(str(entry.get("name")))
                if clients:
                    loaded.added.append(entry)
            elif kind == "namespace":
                for member in entry.get("tools") or []:
                    if isinstance(member, dict):
                        loaded.names.setdefault(namespaced_name(str(entry.get("name")), str(member.get("name"))))
                if clients:
                    loaded.added.append(entry)
    return loaded


def check_additional_tools(raw: dict[str, Any], param: str) -> dict[str, Any]:
    """An `additional_tools` input item, as stored: developer-given functions, custom tools and
    namespaces (checked as `tools` entries are) that the model may call from this item on."""
    if raw.get("role", "developer") != "developer":
        raise InvalidRequest(f"Invalid '{param}.role': only 'developer' is supported.", param=f"{param}.role")
    tools = raw.get("tools")
    if not isinstance(tools, list):
        raise InvalidRequest(f"Missing or invalid '{param}.tools': expected an array.", param=f"{param}.tools")
    for j, entry in enumerate(tools):
        if not isinstance(entry, dict) or entry.get("type") not in _ADDABLE:
            raise InvalidRequest(
                f"Invalid '{param}.tools[{j}]': additional tools are 'function', 'custom' or 'namespace' tools.",
                param=f"{param}.tools[{j}].type",
            )
    try:
        normalize_tools(tools)
    except InvalidRequest as exc:  # named where the item has it
        raise InvalidRequest(
            exc.message.replace("'tools[", f"'{param}.tools["), param=f"{param}.{exc.param or 'tools'}"
        ) from None
    item_id = raw.get("id")
    if item_id is not None and not isinstance(item_id, str):
        raise InvalidRequest(f"Invalid '{param}.id': expected a string.", param=f"{param}.id")
    return {"type": "additional_tools", "id": item_id or new_id("adt"), "role": "developer", "tools": tools}


def added_tools(loaded: Loaded, known: set[str]) -> list[Tool]:
    """The tools `loaded` brings that are not among `known` upstream names, as the model is offered
    them; each is the client's (the gateway runs only registry and MCP tools it planned)."""
    out: list[Tool] = []
    for entry in loaded.added:
        try:
            parsed = normalize_tools([entry])
        except InvalidRequest:
            continue  # checked when it came in; an entry this run cannot offer is left out
        for tool in parsed:
            if tool.name not in known:
                tool.deferred, tool.reported = False, False
                known.add(tool.name)
                out.append(tool)
    return out


# -- what the model sees of them ---------------------------------------------------------------
def as_function_items(
    items: list[dict[str, Any]], mcp_names: dict[tuple[str, str], str] | None = None
) -> list[dict[str, Any]]:
    """Searches as the function calls the model made and their results (a text listing what was
    loaded); `additional_tools` items and searches without a call id (another server's) left out."""
    if not any(item["type"] in ITEM_TYPES for item in items):
        return items
    answered = {i.get("call_id") for i in items if i["type"] == "tool_search_output" and i.get("call_id")}
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "tool_search_call":
            if item.get("call_id") in answered or item.get("execution") == "client":
                out.append(
                    {
                        "type": "function_call",
                        "id": item["id"],
                        "call_id": item["call_id"],
                        "name": SEARCH_NAME,
                        "arguments": json.dumps(item.get("arguments") or {}),
                    }
                )
        elif kind == "tool_search_output":
            if item.get("call_id"):
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": item["call_id"],
                        "output": listing(item.get("tools"), mcp_names),
                    }
                )
        elif kind != "additional_tools":
            out.append(item)
    return out


def listing(entries: Any, mcp_names: dict[tuple[str, str], str] | None = None) -> str:
    """What a search found, for the model: each tool by the function name it calls, with its
    description (the schemas are in its tool list from now on)."""
    lines: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "namespace":
            for member in entry.get("tools") or []:
                if isinstance(member, dict):
                    called = namespaced_name(str(entry.get("name")), str(member.get("name")))
                    lines.append(f"- {called}: {member.get('description') or ''}")
        elif entry.get("type") == "mcp":
            label = str(entry.get("server_label"))
            for name in entry.get("allowed_tools") or []:
                called = (mcp_names or {}).get((label, name), name)  # the function name the model calls
                lines.append(f"- {called}: {name} of the MCP server {label}")
        else:
            lines.append(f"- {entry.get('name')}: {entry.get('description') or ''}")
    if not lines:
        return "No tool matched the query; try other keywords."
    return "Tools loaded, callable now:\n" + "\n".join(lines)
