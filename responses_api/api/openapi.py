"""What the OpenAPI document says beyond what drf-spectacular reads from the views.

The protocol's object schemas come from the Open Responses specification, vendored
beside this module (`openresponses-schemas.json`, Apache-2.0) so production needs no
spec files; the gateway's own objects (lists, usage, conversations, errors) and the
tool and item kinds it accepts beyond that specification are declared here. The
views name them with `ref` in their `extend_schema` declarations, and
`openapi_generation.add_components` adds them to the generated document.

Imported by the views, so it imports no more of drf-spectacular than its `utils`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from ..protocol.client_tools import CLIENT_BUILTINS, HOSTED_ITEM_TYPES, HOSTED_TOOL_TYPES
from ..protocol.mcp import LABEL as MCP_LABEL
from ..protocol.wirejson import copy_json

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
# `with_gateway_unions`.
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
        "named in the `x-gateway-dropped-tools` header (the model answers without it). `tool_search` "
        "is served by the gateway itself, over its deferred tools, for every upstream.",
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
    "AdditionalToolsItemParam": {
        "type": "object",
        "title": "Additional tools",
        "description": "Tools the developer adds from this item on (functions, custom tools, namespaces); "
        "kept in the chain like any item.",
        "required": ["type", "tools"],
        "properties": {
            "type": {"const": "additional_tools"},
            "id": {"type": ["string", "null"]},
            "role": {"const": "developer"},
            "tools": {"type": "array", "items": {"type": "object"}},
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


def with_gateway_unions(schemas: dict[str, Any]) -> dict[str, Any]:
    """The protocol's tool and input-item unions, widened to what the gateway accepts."""
    schemas = copy_json(schemas)
    tool_union = schemas["ResponsesToolParam"]
    tool_union["oneOf"] += [ref(name) for name in ("McpToolParam", "HostedToolParam", "ClientToolParam")]
    tool_union.pop("discriminator", None)  # the added members are keyed by enums, not one constant each
    item_union = schemas["ItemParam"]
    item_union["oneOf"] += [
        ref("McpApprovalResponseItemParam"),
        ref("AdditionalToolsItemParam"),
        ref("GatewayOutputItemParam"),
    ]
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
            "limits": {"type": "array", "items": ref("LimitUse")},
        },
    },
    "LimitUse": {
        "type": "object",
        "description": "A rate limit or budget of the key or its tenant, with its use now.",
        "required": ["scope", "limit", "value"],
        "properties": {
            "scope": {"type": "string", "description": "Whose limit: the key's or the tenant's."},
            "limit": {"type": "string", "description": "What it limits (requests or tokens per minute, ...)."},
            "value": {"type": ["integer", "null"]},
            "used": {"type": ["integer", "null"], "description": "Null when the counters cannot be read."},
            "usd": {"type": ["number", "null"]},
            "used_usd": {"type": ["number", "null"]},
            "renews_in_seconds": {"type": "integer"},
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
    "InputTokens": {
        "type": "object",
        "required": ["object", "input_tokens"],
        "properties": {
            "object": {"type": "string", "enum": ["response.input_tokens"]},
            "input_tokens": {"type": "integer"},
        },
    },
    "CompactRequest": {
        "type": "object",
        "required": ["model"],
        "properties": {
            "model": {"type": "string"},
            "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": ref("ItemParam")}, {"type": "null"}]},
            "previous_response_id": {"type": ["string", "null"]},
            "instructions": {"type": ["string", "null"]},
            "prompt_cache_key": {"type": ["string", "null"]},
        },
    },
    "CompactedResponse": {
        "type": "object",
        "required": ["id", "object", "output", "created_at", "usage"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["response.compaction"]},
            "output": {"type": "array", "items": {"anyOf": [ref("ItemField"), ref("CompactionBody")]}},
            "created_at": {"type": "integer"},
            "usage": ref("Usage"),
        },
    },
    "Metadata": {
        "type": "object",
        "description": "Up to 16 key-value pairs: keys of at most 64 characters, values of at most 512.",
        "maxProperties": 16,
        "additionalProperties": {"type": "string", "maxLength": 512},
    },
    "Conversation": {
        "type": "object",
        "required": ["id", "object", "created_at", "metadata"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["conversation"]},
            "created_at": {"type": "integer"},
            "metadata": ref("Metadata"),
        },
    },
    "ConversationList": _list_of(ref("Conversation"), "A page of conversations."),
    "CreateConversationBody": {
        "type": "object",
        "properties": {
            "items": {"anyOf": [{"type": "array", "items": ref("ItemParam"), "maxItems": 20}, {"type": "null"}]},
            "metadata": {"anyOf": [ref("Metadata"), {"type": "null"}]},
        },
    },
    "UpdateConversationBody": {
        "type": "object",
        "required": ["metadata"],
        "properties": {"metadata": {"anyOf": [ref("Metadata"), {"type": "null"}]}},
    },
    "AddConversationItemsBody": {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": ref("ItemParam"), "maxItems": 20}},
    },
    "DeletedConversation": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["conversation.deleted"]},
            "deleted": {"type": "boolean", "enum": [True]},
        },
    },
    "PassThroughBody": {
        "type": "object",
        "description": "The upstream's own request or answer, passed through unchanged (only `model` is read).",
        "required": ["model"],
        "properties": {"model": {"type": "string"}},
    },
}


# Request bodies that may be left out (every other body is required).
OPTIONAL_BODIES = frozenset({"CreateConversationBody"})


def stream_events_schema() -> dict[str, Any]:
    """One JSON event per SSE `data:` line: any of the specification's streaming events."""
    return {"oneOf": [ref(name) for name in sorted(protocol_schemas()) if name.endswith("StreamingEvent")]}


# --------------------------------------------------------------------------- for the views' extend_schema


def json_or_stream(what: str) -> dict[Any, Any]:
    """The answers of an endpoint that speaks JSON, or server-sent events when asked to stream."""
    return {
        (200, "application/json"): OpenApiResponse(ref(what), description="The response, or its event stream."),
        (200, "text/event-stream"): OpenApiResponse(ref("ResponseStreamEvent")),
    }


def rate_limited() -> dict[int, OpenApiResponse]:
    """The 429 of an endpoint admitted against the rate limits and budgets (orchestration/limits.py)."""
    return {429: OpenApiResponse(ref("GatewayError"), description="A rate limit or budget is used up.")}


def json_body(name: str) -> dict[str, Any]:
    return {"application/json": ref(name)}


def response_header(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.HEADER, response=[200], description=description)
