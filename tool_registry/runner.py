"""The engine's view of the registry: which calls the gateway runs, and running them once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from django.conf import settings

from responses_api.protocol.errors import FailedDependency, GatewayError, ServerError
from responses_api.protocol.mcp_tools import ApprovalPolicy
from responses_api.store import db
from responses_api.store.outages import unavailable
from responses_api.ttlcache import TTLCache

from . import services
from .egress import STRICT, EgressPolicy
from .executors import ToolSpec, execute
from .mcp_client import CallOutcome, McpServerSpec, McpUnavailable, call_tool, check_egress, list_tools

log = logging.getLogger("gateway.mcp")


class RegistryToolRunner:
    def __init__(self, *, response_id: str, specs: list[ToolSpec], policy: EgressPolicy) -> None:
        self.response_id = response_id
        self.specs = {s.name: s for s in specs}
        self.policy = policy
        self.allowed_modules = frozenset(settings.GATEWAY_PYTHON_TOOL_MODULES)

    def is_server_tool(self, name: str) -> bool:
        return name in self.specs

    async def execute(self, call: dict[str, Any]) -> str:
        """Run one function_call item's tool; the output for the model, never an exception."""
        previous = await db.run(
            services.tool_call_claim,
            response_id=self.response_id,
            call_id=call["call_id"],
            tool_name=call["name"],
            arguments=call["arguments"],
        )
        if previous is not None:
            if previous.output is not None:
                return previous.output  # it ran before (a redelivered run): reuse, never repeat
            return json.dumps({"error": "this tool call was interrupted and is not run again"})
        result = await execute(
            self.specs[call["name"]],
            call["arguments"],
            policy=self.policy,
            allowed_modules=self.allowed_modules,
        )
        await db.run(
            services.tool_call_finish,
            response_id=self.response_id,
            call_id=call["call_id"],
            output=result.output,
            succeeded=result.ok,
        )
        return result.output


class NoTools:
    """For requests without registry tools."""

    def is_server_tool(self, name: str) -> bool:
        return False

    async def execute(self, call: dict[str, Any]) -> str:  # pragma: no cover - never called
        raise AssertionError("no server tools")


class McpToolset:
    """The MCP servers of one response: their listings (cached), the rules, and calls made once."""

    def __init__(
        self,
        *,
        response_id: str,
        servers: list[McpServerSpec],
        policy: EgressPolicy,
        adhoc_policy: EgressPolicy = STRICT,
        tenant_id: int | None = None,
        cached: dict[str, list[dict[str, Any]]] | None = None,
        request_approval: dict[str, ApprovalPolicy] | None = None,
    ) -> None:
        """`policy`: the operator's egress allowlist, for registered servers; `adhoc_policy`:
        for servers whose URL the client sent (public only, unless explicitly allowed), whose
        listings are cached per tenant (`tenant_id`)."""
        self.response_id = response_id
        self.tenant_id = tenant_id
        self.servers = {s.label: s for s in servers}
        self.policy = policy
        self.adhoc_policy = adhoc_policy
        self.cached = dict(cached or {})  # label -> a fresh listing (the registry's cache, or listed by this run)
        # A request may ask for approval of more calls than a registered server demands, never fewer.
        self.request_approval = request_approval or {}

    @property
    def labels(self) -> list[str]:
        return list(self.servers)

    async def list_requested(self, listed_before: set[str]) -> None:
        """List, at once, the servers the request names that its chain has not listed; the
        first (in request order) whose listing fails raises FailedDependency, or, where the
        gateway itself failed, the GatewayError saying so (a 503 for an outage), never another
        exception: the run stores its failure for a GatewayError only. The listings are kept
        for the prelude (`listing`), which lists the route's servers itself."""
        wanted = [
            s.label
            for s in self.servers.values()
            if s.param is not None and s.label not in listed_before and s.label not in self.cached
        ]
        if not wanted:
            return
        outcomes = await asyncio.gather(*(self.listing(label) for label in wanted), return_exceptions=True)
        for label, outcome in zip(wanted, outcomes, strict=True):
            if isinstance(outcome, McpUnavailable):
                raise FailedDependency(
                    f"Error retrieving tool list from MCP server: '{label}'. Http status code: 424 "
                    f"(Failed Dependency). {outcome.message}",
                    param=self.servers[label].param,
                )
            if isinstance(outcome, GatewayError) or (
                isinstance(outcome, BaseException) and not isinstance(outcome, Exception)
            ):
                raise outcome  # already the client's answer; or a cancellation
            if isinstance(outcome, Exception):
                error: GatewayError | None = unavailable(outcome)
                if error is None:
                    log.error("listing the tools of MCP server %r failed", label, exc_info=outcome)
                    error = ServerError(f"The gateway failed to list the tools of MCP server '{label}'.")
                raise error from outcome

    async def listing(self, label: str) -> list[dict[str, Any]]:
        spec = self.servers[label]
        if label in self.cached:
            return self.cached[label]
        if spec.registry_id is None:
            # One tenant's listing is never another's, and a hit passes this tenant's egress
            # policy first (as a session would): a server one tenant may reach stays out of
            # reach of the others, cached or not.
            key = (self.tenant_id, self.adhoc_policy.allow, spec.url, tuple(sorted(spec.headers.items())))
            hit = _adhoc_listings.get(key)
            if hit is not None:
                await check_egress(spec, self.adhoc_policy)
                self.cached[label] = hit[0]
                return hit[0]
        try:
            tools = await list_tools(spec, self._policy_for(spec))
        except McpUnavailable as exc:
            if spec.registry_id is not None:
                await _remember(spec, tools=None, error=exc.message)
            raise
        if spec.registry_id is not None:
            await _remember(spec, tools=tools)
        else:
            _adhoc_listings.put(key, tools, ttl=spec.cache_seconds)
        self.cached[label] = tools  # this run lists a server once
        return tools

    def _policy_for(self, spec: McpServerSpec) -> EgressPolicy:
        return self.policy if spec.registry_id is not None else self.adhoc_policy

    def deferred(self, label: str) -> bool:
        """The server's tools are offered only once tool search finds them."""
        return self.servers[label].defer_loading

    def allows(self, label: str, name: str, annotations: dict[str, Any] | None) -> bool:
        return self.servers[label].allows(name, annotations)

    def requires_approval(self, label: str, name: str, annotations: dict[str, Any] | None) -> bool:
        if self.servers[label].approval.requires(name, annotations):
            return True
        extra = self.request_approval.get(label)
        return extra is not None and extra.requires(name, annotations)

    async def call(self, label: str, name: str, arguments: str, *, key: tuple[str, str]) -> CallOutcome:
        """Run one call once: a call claimed before (a redelivered run, a repeated approval)
        answers with its recorded outcome instead of running again."""
        response_key, call_key = key
        previous = await db.run(
            services.tool_call_claim,
            response_id=response_key,
            call_id=call_key,
            tool_name=f"{label}/{name}"[:64],
            arguments=arguments,
        )
        if previous is not None:
            if previous.output is not None:
                recorded = json.loads(previous.output)
                return CallOutcome(recorded.get("output"), recorded.get("error"))
            return CallOutcome(
                None,
                {
                    "type": "mcp_protocol_error",
                    "code": -32000,
                    "message": "this call was interrupted and is not run again",
                },
            )
        spec = self.servers.get(label)
        if spec is None:
            outcome = CallOutcome(
                None,
                {
                    "type": "mcp_protocol_error",
                    "code": -32000,
                    "message": f"MCP server '{label}' is not available to this request",
                },
            )
        else:
            outcome = await call_tool(spec, self._policy_for(spec), name, arguments)
        await db.run(
            services.tool_call_finish,
            response_id=response_key,
            call_id=call_key,
            output=json.dumps({"output": outcome.output, "error": outcome.error}),
            succeeded=outcome.error is None,
        )
        return outcome


async def _remember(spec: McpServerSpec, **listing: object) -> None:
    """Store a registered server's listing (or why it failed) for the admin and later requests.
    This run does not need it stored: a failure to store it is logged, never the run's failure."""
    try:
        await db.run(services.mcp_listing_store, server_id=spec.registry_id, **listing)
    except Exception:  # the listing itself stands; the store's trouble goes to the log
        log.warning("the tool listing of MCP server %r could not be stored", spec.label, exc_info=True)


# Ad-hoc servers' listings, by (tenant, ad-hoc egress policy, url, headers), each for its
# server's `cache_seconds`: one process's memory, bounded (the URLs come from clients), and
# emptied with every other cache by `ttlcache.clear_all`.
_adhoc_listings: TTLCache[tuple[Any, ...], list[dict[str, Any]]] = TTLCache(lambda: 0.0, max_entries=4096)
