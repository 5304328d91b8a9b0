"""A response's MCP servers as its run uses them (the engine's `McpSession` Protocol): before the
first model call, the prelude lists each server's tools (unless the chain already did), binds
them to function names the model can call, and runs the calls the client approved; later steps
call tools through `call`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tool_registry.runner import McpToolset

from ..protocol.events import Event, EventBuilder
from ..protocol.mcp_tools import McpBinding, model_names
from ..protocol.request import CreateRequest
from ..protocol.tools import Tool, allowed_tool_names, make_tool


class McpSession:
    def __init__(self, toolset: McpToolset) -> None:
        self.toolset = toolset
        self.tools: list[Tool] = []  # the MCP tools the model sees, once listed
        self.names: dict[tuple[str, str], str] = {}  # (server label, tool) -> the model's name for it

    @property
    def labels(self) -> list[str]:
        return self.toolset.labels

    async def list_requested(self, context: list[dict[str, Any]]) -> None:
        """Before the response starts: list the servers the request names that its chain has not
        listed; one that fails raises FailedDependency (a 424), so no model answers without the
        tools the client asked for. The prelude then uses these listings."""
        await self.toolset.list_requested(set(_listed_before(context)))

    async def call(self, label: str, name: str, arguments: str, *, key: tuple[str, str]) -> Any:
        """Run one call once (`key`: the response and item it belongs to); an outcome with
        `output` and `error`, never an exception."""
        return await self.toolset.call(label, name, arguments, key=key)

    async def prelude(
        self,
        builder: EventBuilder,
        *,
        context: list[dict[str, Any]],
        request: CreateRequest,
        approved: list[tuple[dict[str, Any], dict[str, Any]]],
        stopped: Callable[[], bool],
        check_output: Callable[[str | None], Awaitable[str | None]] | None = None,
    ) -> AsyncIterator[Event]:
        """List, bind, run the approved calls; stops before the next call once `stopped()`.
        `check_output`: the output guardrails on each call's output (redacted or withheld)."""
        toolset = self.toolset
        listed_before = _listed_before(context)
        listed: list[tuple[str, dict[str, Any]]] = []
        for label in toolset.labels:

            def allowed(tools: list[dict[str, Any]], label: str = label) -> list[dict[str, Any]]:
                return [t for t in tools if toolset.allows(label, t["name"], t.get("annotations"))]

            if label in listed_before:
                tools = allowed(listed_before[label])
            else:
                item, events = builder.open_list_tools(label)
                for event in events:
                    yield event
                try:
                    # The item shows what this response may use: allowed_tools applied.
                    tools, error = allowed(await toolset.listing(label)), None
                except Exception as exc:  # noqa: BLE001 - the server is down or refused: answer without its tools
                    tools, error = [], getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                for event in builder.close_list_tools(item, tools, error):
                    yield event
            listed += [(label, t) for t in tools]
        self.names = model_names([(label, t["name"]) for label, t in listed], {t.name for t in request.tools})
        bindings: dict[str, McpBinding] = {}
        for label, tool in listed:
            name = self.names[(label, tool["name"])]
            schema = tool.get("input_schema") if isinstance(tool.get("input_schema"), dict) else None
            offered = make_tool(
                name=name,
                description=tool.get("description") or None,
                parameters=schema,
                strict=False,
                param=f"MCP tool {label}/{tool['name']}",
                source="mcp",
            )
            offered.deferred = toolset.deferred(label)
            self.tools.append(offered)
            needs_approval = toolset.requires_approval(label, tool["name"], tool.get("annotations"))
            bindings[name] = McpBinding(label, tool["name"], needs_approval)
        builder.mcp_bindings = bindings
        builder.allowed_tools = allowed_tool_names(request.tool_choice, request.tools + self.tools)
        for approval_request, _answer in approved:
            if stopped():
                return
            item, events = builder.open_mcp_call(
                approval_request["server_label"],
                approval_request["name"],
                approval_request["arguments"],
                approval_request_id=approval_request["id"],
            )
            for event in events:
                yield event
            outcome = await toolset.call(
                approval_request["server_label"],
                approval_request["name"],
                approval_request["arguments"],
                key=(approval_request["id"], "approved"),
            )
            output = outcome.output if check_output is None else await check_output(outcome.output)
            for event in builder.finish_mcp_call(item, output=output, error=outcome.error):
                yield event


def _listed_before(context: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The tools each server listed earlier in the chain (by label)."""
    return {i["server_label"]: i["tools"] for i in context if i["type"] == "mcp_list_tools" and not i.get("error")}
