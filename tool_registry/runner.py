"""The engine's view of the registry: which calls the gateway runs, and running them once."""
from __future__ import annotations

import json

from django.conf import settings

from responses_api import db

from . import services
from .egress import EgressPolicy
from .executors import ToolSpec, execute


class RegistryToolRunner:
    def __init__(self, *, response_id: str, specs: list[ToolSpec], policy: EgressPolicy) -> None:
        self.response_id = response_id
        self.specs = {s.name: s for s in specs}
        self.policy = policy
        self.allowed_modules = frozenset(settings.GATEWAY_PYTHON_TOOL_MODULES)

    def is_server_tool(self, name: str) -> bool:
        return name in self.specs

    async def execute(self, call: dict) -> str:
        """Run one function_call item's tool; the output for the model, never an exception."""
        previous = await db.run(
            services.tool_call_claim, response_id=self.response_id, call_id=call["call_id"],
            tool_name=call["name"], arguments=call["arguments"],
        )
        if previous is not None:
            if previous.output is not None:
                return previous.output  # it ran before (a redelivered run): reuse, never repeat
            return json.dumps({"error": "this tool call was interrupted and is not run again"})
        result = await execute(
            self.specs[call["name"]], call["arguments"], policy=self.policy,
            allowed_modules=self.allowed_modules,
        )
        await db.run(
            services.tool_call_finish, response_id=self.response_id, call_id=call["call_id"],
            output=result.output, succeeded=result.ok,
        )
        return result.output


class NoTools:
    """For requests without registry tools."""

    def is_server_tool(self, name: str) -> bool:
        return False

    async def execute(self, call: dict) -> str:  # pragma: no cover - never called
        raise AssertionError("no server tools")
