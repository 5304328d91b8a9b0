"""A run's tool search (protocol/tool_search.py has the search and the items): which tools each
model call is offered (deferred ones only once found, the search function while any is deferred,
tools a chain's items loaded), and the gateway's answers to the model's searches."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..protocol import tool_search
from ..protocol.events import EventBuilder
from ..protocol.tool_ranking import ToolIndex
from ..protocol.tool_search import Loaded
from ..protocol.tools import Tool, allowed_tool_names


class RunToolSearch:
    def __init__(self, tool_choice: Any, context: list[dict[str, Any]]) -> None:
        self._tool_choice = tool_choice
        # What the chain and this input loaded (tool_search_output, additional_tools items).
        self._loaded: Loaded = tool_search.found_in(context)
        self._extra: list[Tool] | None = None  # definitions those items brought, parsed once
        self._index: ToolIndex | None = None
        self._searches: dict[int, Tool] = {}  # the search functions offered, described for the deferred set
        self._deferred: list[Tool] = []
        self._deferred_ids: list[int] = []
        self._namespaces: dict[str, str] = {}
        self._servers: dict[str, tuple[str, str]] = {}

    @property
    def loads(self) -> bool:
        """The context loaded tools: its search items are shown to the model as function calls."""
        return bool(self._loaded.names or self._loaded.added or self._loaded.mcp)

    def offered(
        self,
        tools: list[Tool],
        items: list[dict[str, Any]],
        mcp_names: dict[tuple[str, str], str],
        builder: EventBuilder,
    ) -> tuple[list[Tool], list[dict[str, Any]]]:
        """The tools one model call is offered, out of the run's `tools` (request and MCP tools),
        and its `items` with searches shown as the function calls the model made. Without deferred
        tools, a search tool or loaded items: both as they are."""
        has_search = any(t.kind == "tool_search" for t in tools)
        deferred = [t for t in tools if t.deferred]
        if not (deferred or has_search or self.loads):
            return tools, items
        for key in self._loaded.mcp:  # MCP tools a chain found, by the names the model knows them
            if key in mcp_names:
                self._loaded.names.setdefault(mcp_names[key])
        known = {t.name for t in tools}
        if self._extra is None:
            self._extra = tool_search.added_tools(self._loaded, known)
        ids = [id(t) for t in deferred]
        if ids != self._deferred_ids:  # the MCP prelude adds a server's deferred tools once
            self._deferred, self._deferred_ids, self._index, self._searches = deferred, ids, None, {}
            self._namespaces = {
                t.namespace: str(t.report.get("description") or "")
                for t in tools
                if t.namespace and t.report is not None
            }
            self._servers = {name: (b.server_label, b.tool_name) for name, b in builder.mcp_bindings.items()}
        offered = [self._described(t) if t.kind == "tool_search" else t for t in tools if not t.deferred]
        if deferred and not has_search:
            # Deferred registry or MCP tools (the client cannot know them): the gateway offers its search.
            offered.append(self._described(None))
        # Found tools follow, in the order found: the tools before them stay as they were, so an
        # upstream's prompt cache keeps its prefix as tools are found.
        by_name = {t.name: t for t in deferred}
        offered += [by_name[name] for name in self._loaded.names if name in by_name]
        offered += self._extra
        searchable = [t for t in offered if t.kind != "function" or t.namespace]
        builder.tool_kinds.update({t.name: t for t in searchable})
        # A deferred tool's call is run even if the model named it before finding it.
        builder.allowed_tools = allowed_tool_names(self._tool_choice, offered + deferred)
        return offered, tool_search.as_function_items(items, mcp_names)

    def _described(self, search: Tool | None) -> Tool:
        """The search function (the request's, or the gateway's when `search` is None) telling the
        model what it can find: how many tools, of which servers and namespaces. A client's own
        search keeps the client's description."""
        if search is not None and search.source == "client":
            return search
        cached = self._searches.get(id(search))
        if cached is None:
            deferred = self._deferred
            groups = {self._servers[t.name][0]: "MCP server" for t in deferred if t.name in self._servers}
            for name in dict.fromkeys(t.namespace for t in deferred if t.namespace):
                groups[name] = f"namespace: {self._namespaces[name]}" if self._namespaces.get(name) else "namespace"
            description = tool_search.search_description(len(self._deferred), groups)
            base = search if search is not None else tool_search.search_tool(None)
            cached = self._searches[id(search)] = dataclasses.replace(base, description=description)
        return cached

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        """The `tool_search_output` answering a server-executed search call; what it found is
        offered from the next model call on."""
        if self._index is None:
            self._index = ToolIndex(
                self._deferred,
                groups={name: label for name, (label, _) in self._servers.items()},
            )
        found = self._index.search(tool_search.search_query(call.get("arguments")))
        self._loaded.names.update(dict.fromkeys(t.name for t in found))
        return tool_search.output_item(call, tool_search.tool_entries(found, self._namespaces, self._servers))
