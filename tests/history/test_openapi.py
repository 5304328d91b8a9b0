"""/v1/openapi.json is a valid OpenAPI 3.1 document covering every /v1 route, and real bodies match it."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from django.urls import get_resolver
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from responses_api.history.openapi import _routes
from responses_api.history.params import RESPONSE_LIST_PARAMS, THREAD_PARAMS, USAGE_PARAMS
from tests.history.conftest import HistoryApi
from tests.history.factories import make_response, tool_loop_conversation

pytestmark = pytest.mark.embedded


@pytest.fixture
def document(api: HistoryApi) -> dict[str, Any]:
    reply = httpx.get(f"{api.url}/v1/openapi.json", timeout=30)  # public: no key
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/json")
    return reply.json()


def _validator(document: dict[str, Any], name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": document["components"]})


def test_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)  # raises on any violation of the OpenAPI 3.1 schema
    assert document["openapi"] == "3.1.0"
    ids = [op["operationId"] for path in document["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids)), "operationIds must be unique"


def test_every_route_and_method_is_documented(document: dict[str, Any]) -> None:
    routes = {
        "/" + re.sub(r"<(?:[^>:]+:)?([^>]+)>", r"{\1}", route)
        for route, _ in _routes(get_resolver().url_patterns)
        if route.startswith("v1/") and not route.endswith(".js")
    }
    assert routes == set(document["paths"])
    assert set(document["paths"]["/v1/responses"]) == {"get", "post"}
    assert set(document["paths"]["/v1/responses/{response_id}"]) == {"get", "delete"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation.get("summary"), f"{method.upper()} {path} has no summary"


def test_history_parameters_come_from_the_parsers(document: dict[str, Any]) -> None:
    def names(path: str) -> set[str]:
        return {p["name"] for p in document["paths"][path]["get"]["parameters"] if p["in"] == "query"}

    assert names("/v1/responses") == {p.name for p in RESPONSE_LIST_PARAMS}
    assert names("/v1/responses/{response_id}/thread") == {p.name for p in THREAD_PARAMS}
    assert names("/v1/usage") == {p.name for p in USAGE_PARAMS}
    metadata = next(p for p in document["paths"]["/v1/responses"]["get"]["parameters"] if p["name"] == "metadata")
    assert metadata["style"] == "deepObject"


def test_real_bodies_match_the_document(api: HistoryApi, document: dict[str, Any]) -> None:
    *_, head = tool_loop_conversation(api.tenant_id)
    make_response(api.tenant_id, status="failed", output=[], error={"code": "server_error", "message": "boom"})
    _validator(document, "ResponseList").validate(api.ok("/v1/responses"))
    _validator(document, "ThreadList").validate(api.ok(f"/v1/responses/{head.id}/thread"))
    _validator(document, "UsageList").validate(api.ok("/v1/usage"))
    _validator(document, "UsageList").validate(api.ok("/v1/usage", {"group_by": "tenant"}, key=api.admin_key))
    _validator(document, "ResponseResource").validate(api.ok(f"/v1/responses/{head.id}"))
    _validator(document, "GatewayError").validate(api.get("/v1/responses", {"limit": 0}).json())


def test_docs_page_loads_nothing_from_the_internet(api: HistoryApi) -> None:
    page = httpx.get(f"{api.url}/v1/docs", timeout=30)
    assert page.status_code == 200 and "<redoc" in page.text
    assert not re.search(r"""(src|href)=["']https?://""", page.text), "the docs page must not use a CDN"
    script = re.search(r'<script src="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    bundle = httpx.get(f"{api.url}{script}", timeout=30)
    assert bundle.status_code == 200
    assert bundle.headers["content-type"].startswith("application/javascript")
    assert len(bundle.content) > 100_000  # the real Redoc bundle from drf-spectacular-sidecar


def test_the_document_accepts_every_tool_and_item_kind_the_gateway_does(document: dict[str, Any]) -> None:
    """MCP servers, hosted and client-run tools, and MCP approvals are in the served schema,
    as the gateway accepts them (the Open Responses schema alone has only function tools)."""
    body = _validator(document, "CreateResponseBody")
    accepted = {
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
            {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "search", "arguments": "{}"},
        ],
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {
                "type": "mcp",
                "server_label": "docs",
                "server_url": "https://mcp.example.com/mcp",
                "require_approval": "never",
                "allowed_tools": ["search"],
            },
            {"type": "web_search"},
            {"type": "shell"},
            {"type": "custom", "name": "grammar"},
        ],
    }
    body.validate(accepted)
    assert not body.is_valid({**accepted, "tools": [{"type": "teleport"}]})
    assert not body.is_valid({**accepted, "tools": [{"type": "mcp", "server_label": "bad label!"}]})
