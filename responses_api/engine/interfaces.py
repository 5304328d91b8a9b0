"""What the engine runs and what it is given: the job (`ResponseJob`), and the Protocols of what
is injected into a run: where it is stored (`Persistence`: store/persistence.py), the registry
tools it calls (`ToolRunner`: tool_registry/runner.py) and its MCP servers (`McpSession`:
responses_api/mcp/session.py). The engine imports none of those implementations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..domain import Route
from ..protocol.compaction import InputSpans
from ..protocol.events import Event, EventBuilder
from ..protocol.files import FileContent
from ..protocol.request import CreateRequest
from ..protocol.tools import Tool


@dataclass(slots=True)
class ResponseJob:
    """Everything needed to run one response, already validated and loaded."""

    response_id: str
    created_at: int
    tenant_id: int
    request: CreateRequest
    params: dict[str, Any]
    route: Route
    context: list[dict[str, Any]]  # the previous chain + this input: what the model sees
    input_items: list[dict[str, Any]]  # this request's own input (stored with the response)
    # Where each request's input lies in `context` (this one's last): what a compaction item
    # keeps before it (protocol/compaction.py expand_compactions).
    input_spans: InputSpans
    # The stored files the context's parts name (`file_id`), read once for the run: each call
    # gives them to its target as its dialect takes them (protocol/files.py). None: the context
    # names no file (a run's calls then never look); empty: the files named are gone.
    files: Mapping[str, FileContent] | None = None


class SummaryScreen(Protocol):
    """Automatic compaction's summariser call checked as input (orchestration/guardrails.py
    `summary_screen`): the items as the summariser may get them; raises a GatewayError when an
    input guardrail blocks them."""

    async def __call__(self, items: list[dict[str, Any]], /) -> list[dict[str, Any]]: ...


class Persistence(Protocol):
    async def open(self) -> None:
        """Make the running response visible (where it is stored at all)."""
        ...

    async def finish(
        self, response: dict[str, Any], *, upstream: str, latency_ms: int, cache_write_1h_tokens: int = 0
    ) -> None:
        """Store the ended response (`cache_write_1h_tokens`: the 1-hour part of its cache
        writes, which its public usage does not show)."""
        ...

    async def finish_failed(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        """Store a response that failed while being stored: its terminal state, no items."""
        ...


class ToolRunner(Protocol):
    def is_server_tool(self, name: str) -> bool: ...

    async def execute(self, call: dict[str, Any]) -> str:
        """Run one function_call item; returns the output (errors become outputs)."""
        ...


class McpSession(Protocol):
    """A response's MCP servers (responses_api/mcp/session.py): the prelude lists and binds their
    tools and runs the calls the client approved; `call` runs one call of a later step."""

    @property
    def labels(self) -> list[str]: ...

    tools: list[Tool]  # the MCP tools the model sees, once the prelude listed them
    names: dict[tuple[str, str], str]  # (server label, tool) -> the function name the model calls

    def prelude(
        self,
        builder: EventBuilder,
        *,
        context: list[dict[str, Any]],
        request: CreateRequest,
        approved: list[tuple[dict[str, Any], dict[str, Any]]],
        stopped: Callable[[], bool],
        check_output: Callable[[str | None], Awaitable[str | None]] | None = None,
    ) -> AsyncIterator[Event]:
        """`check_output`: the output guardrails on what an approved call returned."""
        ...

    async def list_requested(self, context: list[dict[str, Any]]) -> None:
        """Before the first byte: list the servers the request names (FailedDependency if one fails)."""
        ...

    async def call(self, label: str, name: str, arguments: str, *, key: tuple[str, str]) -> Any:
        """Run one call once; returns an outcome with `output` and `error` (never raises)."""
        ...
