"""The OpenAPI 3.1 document of /v1, generated from the URLconf at request time.

Paths and methods come from the routes themselves (each DRF view's handler
methods), query parameters of the history endpoints from
the same `Param` declarations that parse them, and the protocol's object
schemas from the Open Responses specification, vendored beside this module
(`openresponses-schemas.json`, Apache-2.0) so production needs no spec files.
A route nobody documented still appears, described by its handler's docstring.

drf-spectacular is not used yet: the views are DRF views, but their bodies are
the protocol's (the vendored JSON Schema), not DRF serializers, so this module
still names each operation's schemas itself.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver

from ..protocol.client_tools import CLIENT_BUILTINS, HOSTED_ITEM_TYPES, HOSTED_TOOL_TYPES
from ..protocol.mcp import LABEL as MCP_LABEL
from ..protocol.wirejson import copy_json
from .params import RESPONSE_LIST_PARAMS, THREAD_PARAMS, USAGE_PARAMS, Param

SCHEMAS_FILE = Path(__file__).with_name("openresponses-schemas.json")


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


@functools.cache
def protocol_schemas() -> dict[str, Any]:
    return json.loads(SCHEMAS_FILE.read_text())["schemas"]


def _list_of(item: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["object", "data", "first_id", "last_id", "has_more"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": item},
            "first_id": {"type": ["string", "null"]},
            "last_id": {"type": ["string", "null"]},
            "has_more": {"type": "boolean"},
        },
    }


_STRINGS = {"type": "array", "items": {"type": "string"}}
_TOOL_NAMES = {
    "anyOf": [
        _STRINGS,
        {
            "type": "object",
            "properties": {"tool_names": _STRINGS, "read_only": {"type": "boolean"}},
            "additionalProperties": False,
        },
    ]
}

# What the gateway accepts beyond the Open Responses schema's function tools and items
# (their types come from the protocol core's own tables), merged into its unions by
# `_with_gateway_unions`.
EXTRA_TOOL_SCHEMAS: dict[str, Any] = {
    "McpToolParam": {
        "type": "object",
        "title": "MCP tool",
        "description": "An MCP server: a registered one by `server_label`, or an ad-hoc one with "
        "`server_url` (public addresses only, unless allowed for the tenant). The gateway lists "
        "its tools and runs the calls (`mcp_list_tools`, `mcp_call` items).",
        "required": ["type", "server_label"],
        "properties": {
            "type": {"const": "mcp"},
            "server_label": {"type": "string", "pattern": MCP_LABEL.pattern},
            "server_url": {"type": "string", "pattern": "^https?://"},
            "server_description": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "authorization": {"type": "string"},
            "allowed_tools": _TOOL_NAMES,
            "require_approval": {
                "anyOf": [
                    {"enum": ["always", "never"]},
                    {"type": "object", "properties": {"always": _TOOL_NAMES, "never": _TOOL_NAMES}},
                ]
            },
        },
    },
    "HostedToolParam": {
        "type": "object",
        "title": "Hosted tool",
        "description": "A tool OpenAI runs on its servers. Served by the route's registry tool where "
        "the operator configured one, passed on to a native Responses upstream, or else dropped and "
        "named in the `x-gateway-dropped-tools` header (the model answers without it).",
        "required": ["type"],
        "properties": {"type": {"enum": sorted(HOSTED_TOOL_TYPES)}},
    },
    "ClientToolParam": {
        "type": "object",
        "title": "Client-run tool",
        "description": "A custom (free-form input) tool, a namespace of tools, or a built-in tool the "
        "client runs itself (shell, apply_patch, computer use): the model's calls come back as items.",
        "required": ["type"],
        "properties": {"type": {"enum": sorted({"custom", "namespace", *CLIENT_BUILTINS})}},
    },
    "McpApprovalResponseItemParam": {
        "type": "object",
        "title": "MCP approval response",
        "required": ["type", "approval_request_id", "approve"],
        "properties": {
            "type": {"const": "mcp_approval_response"},
            "id": {"type": ["string", "null"]},
            "approval_request_id": {"type": "string"},
            "approve": {"type": "boolean"},
            "reason": {"type": ["string", "null"]},
        },
    },
    "GatewayOutputItemParam": {
        "type": "object",
        "title": "Output item sent back",
        "description": "An output item of an earlier response, given back as input (store: false "
        "conversations): MCP, hosted-tool and client-tool calls and their outputs.",
        "required": ["type"],
        "properties": {
            "type": {
                "enum": sorted(
                    {"mcp_call", "mcp_list_tools", "mcp_approval_request", *HOSTED_ITEM_TYPES}
                    | {call for call, _ in CLIENT_BUILTINS.values()}
                    | {output for _, output in CLIENT_BUILTINS.values()}
                    | {"custom_tool_call", "custom_tool_call_output"}
                )
            }
        },
    },
}


def _with_gateway_unions(schemas: dict[str, Any]) -> dict[str, Any]:
    """The protocol's tool and input-item unions, widened to what the gateway accepts."""
    schemas = copy_json(schemas)
    tool_union = schemas["ResponsesToolParam"]
    tool_union["oneOf"] += [ref(name) for name in ("McpToolParam", "HostedToolParam", "ClientToolParam")]
    tool_union.pop("discriminator", None)  # the added members are keyed by enums, not one constant each
    item_union = schemas["ItemParam"]
    item_union["oneOf"] += [ref("McpApprovalResponseItemParam"), ref("GatewayOutputItemParam")]
    item_union.pop("discriminator", None)
    return schemas


GATEWAY_SCHEMAS: dict[str, Any] = {
    "GatewayError": {
        "type": "object",
        "description": "Every error answer: the protocol's error body.",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string", "examples": ["invalid_request_error"]},
                    "param": {"type": ["string", "null"], "description": "The parameter at fault."},
                    "code": {"type": ["string", "null"]},
                },
            }
        },
    },
    "ResponseList": _list_of(ref("ResponseResource"), "A page of stored responses."),
    "ItemList": _list_of(ref("ItemField"), "A page of items."),
    "ThreadEntry": {
        "type": "object",
        "required": ["id", "object", "response_id", "role", "item"],
        "properties": {
            "id": {"type": "string", "description": "The entry's cursor: `<response id>:<role>:<position>`."},
            "object": {"type": "string", "enum": ["response.thread_item"]},
            "response_id": {"type": "string", "description": "The response this item belongs to."},
            "role": {"type": "string", "enum": ["input", "output"]},
            "item": ref("ItemField"),
        },
    },
    "ThreadList": _list_of(ref("ThreadEntry"), "A page of a chain's items, in conversation order."),
    "UsageBucket": {
        "type": "object",
        "required": ["object", "requests", "input_tokens", "output_tokens", "total_tokens"],
        "properties": {
            "object": {"type": "string", "enum": ["usage.bucket"]},
            "day": {"type": "string", "format": "date", "description": "UTC day (with group_by=day)."},
            "model": {"type": "string"},
            "tenant": {"type": "string"},
            "requests": {"type": "integer"},
            "input_tokens": {"type": "integer"},
            "output_tokens": {"type": "integer"},
            "total_tokens": {"type": "integer"},
        },
    },
    "UsageList": {
        "type": "object",
        "required": ["object", "group_by", "data"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "group_by": {"type": "array", "items": {"type": "string"}},
            "start": {"type": ["integer", "null"]},
            "end": {"type": ["integer", "null"]},
            "data": {"type": "array", "items": ref("UsageBucket")},
        },
    },
    "DeletedResponse": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["response"]},
            "deleted": {"type": "boolean", "enum": [True]},
        },
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["model"]},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": ref("Model")},
        },
    },
}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _stream_events() -> dict[str, Any]:
    events = sorted(n for n in protocol_schemas() if n.endswith("StreamingEvent"))
    # One JSON event per SSE `data:` line.
    return {"schema": {"oneOf": [ref(n) for n in events]}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _declared(params: tuple[Param, ...]) -> list[dict[str, Any]]:
    return [p.openapi() for p in params]


# --------------------------------------------------------------------------- operations

# Operation documentation by handler. Keyed by the handler's dotted name so
# this module imports no view (and the views never import it).
OPERATIONS: dict[str, dict[str, Any]] = {
    "responses_api.api.views.ResponsesView.post": {
        "operationId": "createResponse",
        "tags": ["Responses"],
        "summary": "Create a response",
        "description": "Run a model response: a JSON body, or server-sent events with `stream: true`.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("CreateResponseBody")}}},
        "responses": {
            "200": {
                "description": "The response, or its event stream.",
                "content": {
                    "application/json": {"schema": ref("ResponseResource")},
                    "text/event-stream": _stream_events(),
                },
            }
        },
    },
    "responses_api.api.views.ResponseCompactView.post": {
        "operationId": "compactResponse",
        "tags": ["Responses"],
        "summary": "Compact a conversation",
        "description": "The routed model summarises the conversation (`input` and/or `previous_response_id`); "
        "the answer keeps the user messages verbatim and adds a `compaction` item whose "
        "`encrypted_content` (sealed by this gateway for the key's tenant) stands for the rest "
        "in a later request's `input`.",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["model"],
                        "properties": {
                            "model": {"type": "string"},
                            "input": {
                                "anyOf": [
                                    {"type": "string"},
                                    {"type": "array", "items": ref("ItemParam")},
                                    {"type": "null"},
                                ]
                            },
                            "previous_response_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                            "instructions": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                            "prompt_cache_key": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        },
                    }
                }
            },
        },
        "responses": {
            "200": _json(
                {
                    "type": "object",
                    "required": ["id", "object", "output", "created_at", "usage"],
                    "properties": {
                        "id": {"type": "string"},
                        "object": {"type": "string", "enum": ["response.compaction"]},
                        "output": {"type": "array", "items": {"anyOf": [ref("ItemField"), ref("CompactionBody")]}},
                        "created_at": {"type": "integer"},
                        "usage": ref("Usage"),
                    },
                }
            )
        },
    },
    "responses_api.api.views.ResponsesView.get": {
        "operationId": "listResponses",
        "tags": ["History"],
        "summary": "List stored responses",
        "description": "Newest first, with filters; cursor paging with `after` = the last page's `last_id`. "
        "An admin key lists every tenant's responses. Deleted and `store: false` "
        "responses are never listed.",
        "parameters": _declared(RESPONSE_LIST_PARAMS),
        "responses": {"200": _json(ref("ResponseList"))},
    },
    "responses_api.api.views.ResponseDetailView.get": {
        "operationId": "getResponse",
        "tags": ["Responses"],
        "summary": "Retrieve a response",
        "parameters": [
            _query("stream", {"type": "boolean"}, "Replay the event log of a background response."),
            _query("starting_after", {"type": "integer"}, "With `stream`: skip events up to this sequence number."),
        ],
        "responses": {
            "200": {
                "description": "The response, or its event stream.",
                "content": {
                    "application/json": {"schema": ref("ResponseResource")},
                    "text/event-stream": _stream_events(),
                },
            }
        },
    },
    "responses_api.api.views.ResponseDetailView.delete": {
        "operationId": "deleteResponse",
        "tags": ["Responses"],
        "summary": "Delete a response",
        "responses": {"200": _json(ref("DeletedResponse"))},
    },
    "responses_api.api.views.ResponseCancelView.post": {
        "operationId": "cancelResponse",
        "tags": ["Responses"],
        "summary": "Cancel a background response",
        "responses": {"200": _json(ref("ResponseResource"))},
    },
    "responses_api.api.views.ResponseInputItemsView.get": {
        "operationId": "listInputItems",
        "tags": ["Responses"],
        "summary": "List a response's input items",
        "parameters": [
            _query("after", {"type": "string"}, "An item id from an earlier page."),
            _query("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}, "Page size."),
            _query("order", {"type": "string", "enum": ["asc", "desc"], "default": "desc"}, "Sort order."),
        ],
        "responses": {"200": _json(ref("ItemList"))},
    },
    "responses_api.history.views.ResponseThreadView.get": {
        "operationId": "getResponseThread",
        "tags": ["History"],
        "summary": "The conversation up to a response",
        "description": "Every item of the `previous_response_id` chain ending at this response: for each "
        "response, oldest first, its input items then its output items, each with the id of "
        "the response it belongs to. Cursor paging with `after`.",
        "parameters": _declared(THREAD_PARAMS),
        "responses": {"200": _json(ref("ThreadList"))},
    },
    "responses_api.history.views.UsageView.get": {
        "operationId": "getUsage",
        "tags": ["History"],
        "summary": "Token usage summary",
        "description": "Requests and tokens of the caller's tenant (every tenant for admin keys), "
        "grouped by model, UTC day and/or tenant. Deleted responses count: their tokens were spent.",
        "parameters": _declared(USAGE_PARAMS),
        "responses": {"200": _json(ref("UsageList"))},
    },
    "responses_api.api.views.ModelsView.get": {
        "operationId": "listModels",
        "tags": ["Models"],
        "summary": "List the models this key may use",
        "responses": {"200": _json(ref("ModelList"))},
    },
    "responses_api.api.views.ModelDetailView.get": {
        "operationId": "getModel",
        "tags": ["Models"],
        "summary": "Retrieve a model",
        "responses": {"200": _json(ref("Model"))},
    },
    "responses_api.history.docs.openapi_document": {
        "operationId": "getOpenApiDocument",
        "tags": ["Documentation"],
        "summary": "This OpenAPI document",
        "security": [],
        "responses": {"200": _json({"type": "object"})},
    },
    "responses_api.history.docs.docs_page": {
        "operationId": "getApiDocs",
        "tags": ["Documentation"],
        "summary": "API reference (HTML)",
        "security": [],
        "responses": {"200": {"description": "HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}},
    },
}

ERROR_RESPONSES = {
    "400": _json(ref("GatewayError"), "Invalid request: `param` names the field or filter at fault."),
    "401": _json(ref("GatewayError"), "Missing or invalid API key."),
    "404": _json(ref("GatewayError"), "Unknown id (another tenant's ids behave as unknown)."),
}


# --------------------------------------------------------------------------- URLconf walk

_CONVERTER = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")


def _handlers(callback: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """The method table of a view: a DRF view's handler methods, or a plain view's `openapi_methods`."""
    declared = getattr(callback, "openapi_methods", None)
    if declared is not None:
        return dict(declared)
    view = getattr(callback, "cls", None)
    if view is None:
        return {}
    return {
        method.upper(): getattr(view, method)
        for method in view.http_method_names
        if method not in ("head", "options") and hasattr(view, method)
    }


def _routes(patterns: list[Any], prefix: str = "") -> list[tuple[str, Callable[..., Any]]]:
    routes: list[tuple[str, Callable[..., Any]]] = []
    for pattern in patterns:
        route = getattr(pattern.pattern, "_route", None)
        if route is None:  # regex patterns (the catch-all 404) are not endpoints
            continue
        if isinstance(pattern, URLResolver):
            routes += _routes(pattern.url_patterns, prefix + route)
        elif isinstance(pattern, URLPattern):
            routes.append((prefix + route, pattern.callback))
    return routes


def _dotted(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _operation(path: str, method: str, handler: Callable[..., Any]) -> dict[str, Any]:
    doc = OPERATIONS.get(_dotted(handler))
    if doc is None:  # undocumented: say what the code says
        owner = getattr(inspect.getmodule(handler), handler.__qualname__.split(".")[0], None)
        own_doc = handler.__doc__ and inspect.cleandoc(handler.__doc__)
        text = own_doc or (inspect.getdoc(owner) if owner is not None else None) or handler.__name__.replace("_", " ")
        doc = {
            "operationId": handler.__qualname__.replace(".", "_"),
            "summary": text.splitlines()[0],
            "description": text,
            "responses": {"200": _json({"type": "object"})},
        }
    operation = json.loads(json.dumps(doc))  # a private copy
    path_params = [
        {"name": m.group("name"), "in": "path", "required": True, "schema": {"type": "string"}}
        for m in _CONVERTER.finditer(path)
    ]
    operation["parameters"] = path_params + operation.get("parameters", [])
    if not operation["parameters"]:
        del operation["parameters"]
    if operation.get("security") != []:
        operation["responses"] = {**ERROR_RESPONSES, **operation["responses"]}
    return operation


def build_document(server_url: str = "/") -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route, callback in _routes(get_resolver().url_patterns):
        if not route.startswith("v1/"):
            continue
        path = "/" + _CONVERTER.sub(lambda m: "{" + m.group("name") + "}", route)
        for method, handler in _handlers(callback).items():
            paths.setdefault(path, {})[method.lower()] = _operation(route, method, handler)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Open Responses gateway",
            "version": "v1",
            "description": "The Open Responses / OpenAI Responses API, with stored history, "
            "served in front of any LLM upstream. Authenticate with "
            "`Authorization: Bearer <API key>`.",
        },
        "servers": [{"url": server_url}],
        "security": [{"ApiKey": []}],
        "tags": [
            {"name": "Responses", "description": "Create, retrieve, cancel and delete responses."},
            {"name": "History", "description": "Browse stored responses, threads and usage."},
            {"name": "Models", "description": "The models this gateway routes."},
            {"name": "Documentation"},
        ],
        "paths": dict(sorted(paths.items())),
        "components": {
            "securitySchemes": {"ApiKey": {"type": "http", "scheme": "bearer"}},
            "schemas": {**_with_gateway_unions(protocol_schemas()), **EXTRA_TOOL_SCHEMAS, **GATEWAY_SCHEMAS},
        },
    }
