"""Tool planning derives the request a run sees; the parsed request stays as the client sent it.

Pure: no servers, no database. The web path and the worker both plan with `plan_tools`, so
what is checked here holds for both."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from responses_api.domain import Route
from responses_api.mcp.planning import registry_mcp_labels
from responses_api.orchestration.admission import open_sealed_reasoning
from responses_api.orchestration.toolplan import plan_tools, registry_tool_names
from responses_api.protocol.request import CreateRequest, parse_create_request
from responses_api.sealing import sealer
from tool_registry.executors import ToolSpec
from tool_registry.mcp_client import McpServerSpec

pytestmark = pytest.mark.embedded


def _spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"the {name} tool",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        strict=False,
        executor="http",
        timeout=5.0,
    )


def _listing(tools: list[dict]) -> dict:
    return {"fresh": True, "tools": tools}


BODY = {
    "model": "m",
    "input": "hi",
    "tools": [
        {"type": "function", "name": "lookup"},  # bare: names a registry tool
        {"type": "function", "name": "client_fn", "parameters": {"type": "object", "properties": {}}},
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "mcp", "server_label": "shop", "require_approval": "never"},
    ],
}
ROUTE = Route(name="m", targets=(), hosted_tools=(("web_search", "corp_search"),))


def test_the_plan_is_a_new_request_and_the_parsed_one_is_unchanged() -> None:
    req = parse_create_request(copy.deepcopy(BODY))
    before = copy.deepcopy(req)
    specs = [_spec("lookup"), _spec("corp_search"), _spec("route_tool")]
    registry = [
        (McpServerSpec(label="shop", url="http://shop.invalid/mcp"), _listing([{"name": "buy"}])),
        (McpServerSpec(label="docs", url="http://docs.invalid/mcp"), _listing([{"name": "read"}])),
    ]
    assert registry_tool_names(req, ROUTE) == ["corp_search", "lookup"]
    assert registry_mcp_labels(req) == ["shop"]

    plan = plan_tools(req, ROUTE, specs, registry)

    assert req == before  # nothing planned leaks into what the client sent
    planned = plan.request
    by_name = {t.name: t for t in planned.tools}
    assert by_name["lookup"].source == "registry" and by_name["lookup"].description == "the lookup tool"
    assert by_name["client_fn"].source != "registry"
    assert by_name["corp_search"].kind == "web_search"  # the hosted tool, served by the registry
    assert "route_tool" in by_name  # attached by the route
    assert planned.dropped_tools == []  # file_search: the gateway's own, over its vector stores
    assert by_name["file_search"].kind == "file_search" and by_name["file_search"].source == "gateway"
    assert [m.server_label for m in planned.mcp_tools] == ["shop", "docs"]  # docs: attached by the route
    servers, cached, approvals = plan.mcp
    assert [s.label for s in servers] == ["shop", "docs"]
    assert cached == {"shop": [{"name": "buy"}], "docs": [{"name": "read"}]}
    assert "shop" in approvals
    assert plan.specs == specs


def test_a_request_without_tools_is_planned_as_it_is() -> None:
    req = parse_create_request({"model": "m", "input": "hi"})
    plan = plan_tools(req, Route(name="m", targets=()), [], [])
    assert plan.request is req and plan.mcp == ([], {}, {})


def test_the_parsed_request_cannot_be_assigned_to() -> None:
    req = parse_create_request({"model": "m", "input": "hi"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.stream = True  # type: ignore[misc]  # the frozen assignment is what the test checks
    assert dataclasses.replace(req, stream=True).stream and not req.stream


def test_opening_sealed_reasoning_copies_the_items_it_opens() -> None:
    sealed = sealer().seal({"text": "because"}, tenant_id=7, purpose="reasoning")
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed}
    req = parse_create_request({"model": "m", "input": [item], "store": False})
    before = copy.deepcopy(req)
    opened = open_sealed_reasoning(req, tenant_id=7)
    assert req == before
    assert opened is not req
    assert opened.input_items[0]["content"] == [{"type": "reasoning_text", "text": "because"}]
    plain: CreateRequest = parse_create_request({"model": "m", "input": "hi"})
    assert open_sealed_reasoning(plain, tenant_id=7) is plain
