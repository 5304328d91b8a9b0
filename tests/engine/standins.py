"""Stand-ins for what a `ResponseRun` is given (engine/interfaces.py): persistence, a tool
runner, an upstream, an MCP toolset; and helpers that build a job and drive a run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from responses_api.domain import ProviderConfig, Route, Target
from responses_api.engine.interfaces import ResponseJob
from responses_api.engine.run import ResponseRun
from responses_api.protocol.errors import GatewayError, UpstreamUnavailable
from responses_api.protocol.ids import new_id
from responses_api.protocol.request import parse_create_request
from responses_api.protocol.response import request_params
from responses_api.upstreams import UpstreamRequest

LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}


def make_target(name: str) -> Target:
    return Target(ProviderConfig(name, "chat_completions", "http://unused.invalid", None, 5.0, 1.0), "m", 1)


def make_job(
    body: dict[str, Any],
    *targets: Target,
    window: int | None = None,
    before: list[dict[str, Any]] | None = None,
) -> ResponseJob:
    """A job for `body` (model "m"); `window`: the route's context window; `before`: the chain's
    items the context starts with."""
    req = parse_create_request({"model": "m", **body})
    return ResponseJob(
        response_id=new_id("resp"),
        created_at=1_700_000_000,
        tenant_id=1,
        request=req,
        params=request_params(req),
        route=Route("m", targets or (make_target("a"),), context_window=window),
        context=[*(before or []), *req.input_items],
        input_items=list(req.input_items),
        input_spans=(range(len(before or []), len(before or []) + len(req.input_items)),),
    )


class Stored:
    """Stand-in persistence: what the engine asked to store."""

    def __init__(self) -> None:
        self.opened = 0
        self.finished: list[dict[str, Any]] = []

    async def open(self) -> None:
        self.opened += 1

    async def finish(
        self, response: dict[str, Any], *, upstream: str, latency_ms: int, cache_write_1h_tokens: int = 0
    ) -> None:
        self.finished.append(json.loads(json.dumps(response)))

    async def finish_failed(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        await self.finish({**response, "output": []}, upstream=upstream, latency_ms=latency_ms)


class Tools:
    """Stand-in tool runner: `lookup` is a server-side tool answering "42"."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def is_server_tool(self, name: str) -> bool:
        return name == "lookup"

    async def execute(self, call: dict[str, Any]) -> str:
        self.calls.append(call)
        return "42"


class Call:
    """One model call: its deltas, one loop turn apart; an exception among them is raised there."""

    def __init__(self, deltas: list[Any]) -> None:
        self._deltas = deltas
        self.closed = False

    async def deltas(self) -> AsyncIterator[Any]:
        for delta in self._deltas:
            await asyncio.sleep(0)
            if isinstance(delta, BaseException):
                raise delta
            yield delta

    async def aclose(self) -> None:
        self.closed = True


class Upstream:
    """Stand-in for `upstreams.open_call`: scripted answers, failures by target name."""

    def __init__(self, *answers: list[Any], failing: tuple[str, ...] = (), error: GatewayError | None = None) -> None:
        self.answers = list(answers)
        self.failing = failing
        self.error = error  # what a failing target raises (default: unavailable)
        self.requests: list[tuple[str, UpstreamRequest]] = []
        self.calls: list[Call] = []

    async def __call__(self, target: Target, request: UpstreamRequest) -> Call:
        self.requests.append((target.provider.name, request))
        if target.provider.name in self.failing:
            raise self.error or UpstreamUnavailable(f"{target.label} is down")
        self.calls.append(Call(self.answers.pop(0)))
        return self.calls[-1]


def drive(run: ResponseRun, **events_args: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        await run.connect()
        return [event async for event in run.events(**events_args)]

    return asyncio.run(go())


async def to_end(run: ResponseRun) -> dict[str, Any]:
    await run.connect()
    return await run.run_to_end()


class Outcome:
    def __init__(self, output: str | None, error: dict[str, Any] | None = None) -> None:
        self.output, self.error = output, error


class Toolset:
    """Stand-in MCP toolset (tool_registry.runner.McpToolset) with one server, "srv", whose
    `add` tool answers "3"."""

    def __init__(self, *, approval: bool = False, down: bool = False, deferred: bool = False) -> None:
        self.approval = approval
        self.down = down
        self.is_deferred = deferred
        self.listed = 0
        self.calls: list[tuple[str, str, str, tuple[str, str]]] = []

    @property
    def labels(self) -> list[str]:
        return ["srv"]

    async def list_requested(self, listed_before: set[str]) -> None:
        """ "srv" stands for a server the route attached: the prelude lists it (see
        tests/tool_registry/test_mcp.py for servers a request names)."""

    async def listing(self, label: str) -> list[dict[str, Any]]:
        self.listed += 1
        if self.down:
            raise ConnectionError("srv refused")
        return [ADD]

    def allows(self, label: str, name: str, annotations: dict | None) -> bool:
        return True

    def deferred(self, label: str) -> bool:
        return self.is_deferred

    def requires_approval(self, label: str, name: str, annotations: dict | None) -> bool:
        return self.approval

    async def call(self, label: str, name: str, arguments: str, *, key: tuple[str, str]) -> Outcome:
        self.calls.append((label, name, arguments, key))
        return Outcome("3")


ADD = {
    "name": "add",
    "description": "Adds two numbers.",
    "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}
