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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from ..protocol.client_tool_types import CLIENT_TOOL_TYPES, FieldType
from ..protocol.client_tools import HOSTED_ITEM_TYPES, HOSTED_TOOL_TYPES
from ..protocol.items import ID_MAX_CHARS, MCP_CALL_STATUSES
from ..protocol.mcp_tools import LABEL as MCP_LABEL
from ..protocol.request import (
    NUMBER_BOUNDS,
    PROMPT_CACHE_MODES,
    PROMPT_CACHE_RETENTIONS,
    SERVICE_TIERS,
    STRING_BOUNDS,
)
from ..protocol.wirejson import copy_json

SCHEMAS_FILE = Path(__file__).with_name("openresponses-schemas.json")


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


@functools.cache
def protocol_schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = json.loads(SCHEMAS_FILE.read_text())["schemas"]
    return schemas


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


_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_TOOL_NAMES = {
    "anyOf": [
        _STRINGS,
        {
            "type": "object",
            "properties": {
                "tool_names": {"anyOf": [_STRINGS, {"type": "null"}]},
                "read_only": {"type": ["boolean", "null"]},
            },
            "additionalProperties": False,
        },
    ]
}

_DEFER_LOADING: dict[str, Any] = {
    "type": ["boolean", "null"],
    "description": "Deferred: kept from the model until its `tool_search` finds it (a `tool_search` tool "
    "must be given).",
}
_CUSTOM_TOOL: dict[str, Any] = {
    "type": "object",
    "title": "Custom tool",
    "description": "A tool whose input is free-form text (or follows a grammar), run by the client.",
    "required": ["type", "name"],
    "properties": {
        "type": {"const": "custom"},
        "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
        "description": {"type": ["string", "null"]},
        "defer_loading": _DEFER_LOADING,
        "format": {
            "anyOf": [
                {"type": "null"},
                {"type": "object", "required": ["type"], "properties": {"type": {"const": "text"}}},
                {
                    "type": "object",
                    "required": ["type", "syntax", "definition"],
                    "properties": {
                        "type": {"const": "grammar"},
                        "syntax": {"enum": ["lark", "regex"]},
                        "definition": {"type": "string"},
                    },
                },
            ]
        },
    },
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
            "server_url": {"type": ["string", "null"], "pattern": "^https?://"},
            "defer_loading": _DEFER_LOADING,
            "connector_id": {"type": "null", "description": "Not supported: give `server_url` or a registered label."},
            "tunnel_id": {"type": "null", "description": "Not supported: give `server_url` or a registered label."},
            "server_description": {"type": "string"},
            "headers": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
            "authorization": {"type": "string"},
            "allowed_tools": _TOOL_NAMES,
            "require_approval": {
                "anyOf": [
                    {"enum": ["always", "never"]},
                    {
                        "type": "object",
                        "properties": {"always": _TOOL_NAMES, "never": _TOOL_NAMES},
                        "additionalProperties": False,
                    },
                ]
            },
        },
        # Credentials go with an ad-hoc `server_url` only: a registered server brings its own.
        "not": {
            "allOf": [
                {
                    "anyOf": [
                        {"required": ["headers"], "properties": {"headers": {"type": "object", "minProperties": 1}}},
                        {"required": ["authorization"], "properties": {"authorization": {"type": "string"}}},
                    ]
                },
                {"anyOf": [{"not": {"required": ["server_url"]}}, {"properties": {"server_url": {"type": "null"}}}]},
            ]
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
        "properties": {"type": {"enum": sorted(HOSTED_TOOL_TYPES - {"tool_search"})}},
    },
    "ToolSearchToolParam": {
        "type": "object",
        "title": "Tool search",
        "description": "Search over the deferred tools (`defer_loading`). Executed by the gateway for every "
        "upstream (`execution` server, the default), or by the client (`execution: client`: the model's "
        "`tool_search_call` is returned, with the tool's own `description` and `parameters`).",
        "required": ["type"],
        "properties": {
            "type": {"const": "tool_search"},
            "execution": {"enum": ["server", "client", None]},
            "description": {"type": ["string", "null"]},
            "parameters": {"type": ["object", "null"]},
        },
    },
    "ClientToolParam": {
        "type": "object",
        "title": "Client-run tool",
        "description": "A built-in tool the client runs itself (shell, apply_patch, computer use): "
        "the model's calls come back as items.",
        "required": ["type"],
        "properties": {
            "type": {"enum": sorted(t for entry in CLIENT_TOOL_TYPES if entry.is_builtin for t in entry.tool_types)}
        },
    },
    "CustomToolParam": _CUSTOM_TOOL,
    "NamespaceToolParam": {
        "type": "object",
        "title": "Namespace of tools",
        "description": "Function and custom tools under one name; their calls carry the namespace.",
        "required": ["type", "name", "tools"],
        "properties": {
            "type": {"const": "namespace"},
            "name": {"type": "string", "minLength": 1},
            "description": {"type": ["string", "null"]},
            "tools": {
                "type": "array",
                "minItems": 1,
                "items": {"anyOf": [ref("FunctionToolParam"), {**_CUSTOM_TOOL, "required": ["type", "name"]}]},
            },
        },
    },
    "McpApprovalResponseItemParam": {
        "type": "object",
        "title": "MCP approval response",
        "required": ["type", "approval_request_id", "approve"],
        "properties": {
            "type": {"const": "mcp_approval_response"},
            "id": {"type": ["string", "null"]},
            "approval_request_id": {"type": "string", "minLength": 1},
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
            "tools": {
                "type": "array",
                "items": {"anyOf": [ref("FunctionToolParam"), ref("CustomToolParam"), ref("NamespaceToolParam")]},
            },
        },
    },
}


_EXTRA_TOOLS = (
    "McpToolParam",
    "HostedToolParam",
    "ToolSearchToolParam",
    "ClientToolParam",
    "CustomToolParam",
    "NamespaceToolParam",
)


def with_gateway_unions(schemas: dict[str, Any]) -> dict[str, Any]:
    """The protocol's tool and input-item unions, widened to what the gateway accepts."""
    schemas = copy_json(schemas)
    schemas["FunctionToolParam"]["properties"]["defer_loading"] = _DEFER_LOADING
    tool_union = schemas["ResponsesToolParam"]
    tool_union["oneOf"] += [ref(name) for name in _EXTRA_TOOLS]
    tool_union.pop("discriminator", None)  # the added members are keyed by enums, not one constant each
    item_union = schemas["ItemParam"]
    schemas.update(_output_item_params())
    item_union["oneOf"] += [
        ref("McpApprovalResponseItemParam"),
        ref("AdditionalToolsItemParam"),
        *(ref(name) for name in _output_item_params()),
    ]
    item_union.pop("discriminator", None)
    # What a Response reports: the same tools (MCP ones with `headers: null`, as OpenAI echoes
    # them: the gateway never echoes credentials) and the same kinds of items.
    schemas["Tool"]["oneOf"] += [ref(name) for name in _EXTRA_TOOLS]
    schemas["Tool"].pop("discriminator", None)
    schemas["ItemField"]["oneOf"] += [
        ref("McpApprovalResponseItemParam"),
        ref("AdditionalToolsItemParam"),
        *(ref(name) for name in _output_item_params()),
    ]
    schemas["ItemField"].pop("discriminator", None)
    _with_gateway_rules(schemas)
    return schemas


# A tool, or a namespace's member, with `defer_loading: true`.
_DEFERRED: dict[str, Any] = {
    "type": "object",
    "required": ["defer_loading"],
    "properties": {"defer_loading": {"const": True}},
}
_DEFERRED_ENTRY: dict[str, Any] = {
    "anyOf": [
        _DEFERRED,
        {
            "type": "object",
            "required": ["type", "tools"],
            "properties": {"type": {"const": "namespace"}, "tools": {"type": "array", "contains": _DEFERRED}},
        },
    ]
}


# A model name, as every endpoint's parser takes it: required, not empty, and within the
# stored column (`Response.model`).
MODEL_NAME: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 200}
CONVERSATION_ID: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 64}


def _with_gateway_rules(schemas: dict[str, Any]) -> None:
    """Where the gateway's parsers are stricter than the Open Responses schema, the document says so.

    A request the document allows is served, and one it forbids is refused (the schemathesis test
    in tests/reliability checks both), so each rule the parsers enforce beyond the specification
    is written into the vendored schemas here rather than left for clients to discover.
    """
    create = schemas["CreateResponseBody"]
    create["required"] = sorted({*create.get("required", []), "model"})
    create["properties"]["model"] = {**MODEL_NAME, "description": "The route to use (a model name `/v1/models` lists)."}
    # Something to answer: new input, or the context of an earlier response or a conversation
    # (`protocol/request.parse_create`); and never both of the last two.
    create["properties"]["conversation"] = {
        "description": "The conversation this response belongs to: its items are the context, and "
        "the input and output are added to it.",
        "anyOf": [
            CONVERSATION_ID,
            {"type": "object", "required": ["id"], "properties": {"id": CONVERSATION_ID}},
            {"type": "null"},
        ],
    }
    create["anyOf"] = [_present("input"), _present("previous_response_id"), _present("conversation")]
    no_tools = {
        "anyOf": [
            {"not": {"required": ["tools"]}},
            {"properties": {"tools": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}},
        ]
    }
    create["allOf"] = [
        {"not": {"allOf": [_present("previous_response_id"), _present("conversation")]}},
        # A background response is polled from the store (protocol/request.py).
        {
            "not": {
                "required": ["background", "store"],
                "properties": {"background": {"const": True}, "store": {"const": False}},
            }
        },
        # A deferred tool is found with a `tool_search` tool (protocol/tool_search.py).
        {
            "if": {
                "required": ["tools"],
                "properties": {"tools": {"type": "array", "contains": _DEFERRED_ENTRY}},
            },
            "then": {
                "properties": {
                    "tools": {
                        "contains": {
                            "type": "object",
                            "required": ["type"],
                            "properties": {"type": {"const": "tool_search"}},
                        }
                    }
                }
            },
        },
        # A tool call is required of the model only where it has a tool to call (protocol/tools.py).
        {
            "not": {
                "allOf": [{"required": ["tool_choice"], "properties": {"tool_choice": {"const": "required"}}}, no_tools]
            }
        },
    ]
    for name, (lowest, highest, integer) in NUMBER_BOUNDS.items():
        bounded = {"type": "integer" if integer else "number", "minimum": lowest, "maximum": highest}
        _nullable(create["properties"], name, bounded)
    for name in STRING_BOUNDS:
        _nullable(create["properties"], name, _bounded_string(name))
    # A message's status is one of the item statuses, as a function call's (protocol/items.py
    # refuses others; the specification leaves it a free string).
    for message in (
        "UserMessageItemParam",
        "SystemMessageItemParam",
        "DeveloperMessageItemParam",
        "AssistantMessageItemParam",
    ):
        if "status" in schemas[message]["properties"]:
            schemas[message]["properties"]["status"] = {
                "anyOf": [{"type": "string", "enum": ["in_progress", "completed", "incomplete"]}, {"type": "null"}],
                "description": "The status of the message item.",
            }
    # A conversation stores items, not references to them (conversations/views.py).
    schemas["ConversationItemParam"] = {
        "oneOf": [member for member in schemas["ItemParam"]["oneOf"] if member != ref("ItemReferenceParam")]
    }
    # An item without a `type` is a message if it has a `role`, and a reference if it is `{"id"}`
    # alone (protocol/items.py): anything more needs its type.
    schemas["ItemReferenceParam"]["anyOf"] = [
        {"required": ["type"], "properties": {"type": {"const": "item_reference"}}},
        {"maxProperties": 1},
    ]
    # OpenAI's allowed-tools choice picks among tools: mode `none` would be `tool_choice: "none"`.
    schemas["AllowedToolsParam"]["properties"]["mode"] = {
        "enum": ["auto", "required"],
        "description": "How to select a tool from the allowed set.",
    }
    # text.format: JSON mode too, and a JSON schema needs its name and schema (protocol/request._text).
    schemas["TextFormatParam"]["oneOf"].append(ref("JsonObjectResponseFormat"))
    json_schema = schemas["JsonSchemaResponseFormatParam"]
    json_schema["required"] = ["type", "name", "schema"]
    json_schema["properties"]["name"] = {**json_schema["properties"]["name"], "minLength": 1}
    json_schema["properties"]["description"] = {"type": ["string", "null"]}
    schemas["CompactionSummaryItemParam"]["properties"]["encrypted_content"] = {"type": "string", "minLength": 1}
    schemas["ItemReferenceParam"]["properties"]["id"] = {"type": "string", "minLength": 1, "maxLength": ID_MAX_CHARS}
    for call_item in ("FunctionCallItemParam", "FunctionCallOutputItemParam"):
        schemas[call_item]["properties"]["call_id"]["maxLength"] = (
            ID_MAX_CHARS  # tests/reliability/test_column_bounds.py
        )
    # Tool outputs hold text, images and files; a video is refused (no upstream dialect takes one).
    output_parts = schemas["FunctionCallOutputItemParam"]["properties"]["output"]["oneOf"][1]["items"]
    output_parts["oneOf"] = [part for part in output_parts["oneOf"] if part != ref("InputVideoContent")]
    _explicit_discriminators(schemas)
    image_part = schemas["InputImageContentParamAutoParam"]
    image_part["properties"]["image_url"] = {
        "anyOf": [{"type": "string", "maxLength": 20971520, "pattern": "^(https?://|data:)"}, {"type": "null"}],
        "description": "An http(s) URL, or the image itself in a data URL.",
    }
    image_part["properties"]["file_id"] = _NULLABLE_STRING
    image_part["anyOf"] = [_present("image_url"), _present("file_id")]
    file_part = schemas["InputFileContentParam"]
    file_part["properties"]["file_id"] = _NULLABLE_STRING
    file_part["anyOf"] = [_present("file_data"), _present("file_url"), _present("file_id")]
    _cache_and_compaction_fields(schemas)


def _cache_and_compaction_fields(schemas: dict[str, Any]) -> None:
    """Prompt caching, the service tier and automatic compaction, as `protocol/request.py` and
    `protocol/items.py` take them (newer than the Open Responses schemas)."""
    create = schemas["CreateResponseBody"]["properties"]
    _nullable(create, "service_tier", {"type": "string", "enum": sorted(SERVICE_TIERS)})
    _nullable(create, "prompt_cache_retention", {"type": "string", "enum": sorted(PROMPT_CACHE_RETENTIONS)})
    _nullable(
        create,
        "prompt_cache_options",
        {
            "type": "object",
            "properties": {
                "mode": {"enum": [*sorted(PROMPT_CACHE_MODES), None]},
                "ttl": {"type": ["string", "null"], "description": "A minimum cache lifetime, e.g. `30m`, `12h`."},
                "prewarm": {"type": ["boolean", "null"]},
                "comparison_response_id": {"type": ["string", "null"]},
            },
        },
    )
    entry = {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"const": "compaction"},
            "compact_threshold": {
                "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}],
                "description": "Tokens; null: 80% of the route's context window.",
            },
        },
    }
    _nullable(create, "context_management", {"type": "array", "items": entry})
    breakpoint_ = {
        "anyOf": [
            {
                "type": "object",
                "required": ["mode"],
                "properties": {"mode": {"const": "explicit"}, "ttl": {"type": ["string", "null"]}},
            },
            {"type": "null"},
        ],
        "description": "The end of a reusable prompt prefix (a cache breakpoint).",
    }
    for part in ("InputTextContentParam", "InputImageContentParamAutoParam", "InputFileContentParam"):
        schemas[part]["properties"]["prompt_cache_breakpoint"] = breakpoint_


_JSON_TYPES: dict[type, str] = {str: "string", dict: "object", list: "array"}
_NULLABLE_STRING = {"type": ["string", "null"]}
_NAME = {"type": "string", "minLength": 1}


def _json_type(kind: FieldType) -> dict[str, Any]:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return {"type": [_JSON_TYPES[k] for k in kinds] if len(kinds) > 1 else _JSON_TYPES[kinds[0]]}


def _item(kind: str, title: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "title": title,
        "required": ["type", *required],
        "properties": {"type": {"const": kind}, "id": _NULLABLE_STRING, **required, **(optional or {})},
    }


@functools.cache
def _output_item_params() -> dict[str, Any]:
    """Output items of an earlier response given back as input (store: false conversations):
    MCP, hosted-tool and client-tool calls and their outputs, each with the fields the request
    parser (`protocol/items.py`) requires of it."""
    schemas: dict[str, Any] = {}
    client_items: dict[str, tuple[Mapping[str, FieldType], str]] = {}
    for entry in CLIENT_TOOL_TYPES:
        client_items[entry.call_type] = (entry.call_fields, "call_id")
        client_items[entry.output_type] = (entry.output_fields, entry.output_call_field)
    for kind, (fields, call_field) in sorted(client_items.items()):
        required = {name: _json_type(expected) for name, expected in fields.items()}
        schemas[f"Gateway_{kind}_ItemParam"] = _item(kind, f"{kind} (client-run tool)", required)
        if call_field != "call_id":  # the SDK's LocalShellCallOutput names its call by `id` alone
            schemas[f"Gateway_{kind}_ItemParam"]["anyOf"] = [
                {"required": ["call_id"], "properties": {"call_id": {"type": "string"}}},
                {"required": [call_field], "properties": {call_field: _NAME}},
            ]
    for kind in sorted(HOSTED_ITEM_TYPES):
        schemas[f"Gateway_{kind}_ItemParam"] = _item(kind, f"{kind} (hosted tool)", {"id": _NAME})
    # A tool search's call may come without an id (one is given); a client's search output
    # answers its call by `call_id` and loads its `tools` (protocol/items.py).
    schemas["Gateway_tool_search_call_ItemParam"] = _item("tool_search_call", "tool_search_call", {})
    schemas["Gateway_tool_search_output_ItemParam"]["required"] = ["type"]
    schemas["Gateway_tool_search_output_ItemParam"]["anyOf"] = [
        {"required": ["id"], "properties": {"id": _NAME}},
        {
            "required": ["execution", "call_id", "tools"],
            "properties": {
                "execution": {"const": "client"},
                "call_id": _NAME,
                "tools": {"type": "array", "items": {"type": "object"}},
            },
        },
    ]
    mcp_tool = {"server_label": _NAME, "name": _NAME, "arguments": {"type": "string"}}
    schemas["Gateway_mcp_call_ItemParam"] = _item(
        "mcp_call",
        "MCP call",
        mcp_tool,
        {
            "output": _NULLABLE_STRING,
            "error": {"type": ["string", "object", "null"]},
            "status": {"enum": sorted(MCP_CALL_STATUSES)},
            "approval_request_id": _NULLABLE_STRING,
        },
    )
    schemas["Gateway_mcp_approval_request_ItemParam"] = _item(
        "mcp_approval_request", "MCP approval request", {"id": _NAME, **mcp_tool}
    )
    named_tools = {
        "type": "array",
        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    }
    schemas["Gateway_mcp_list_tools_ItemParam"] = _item(
        "mcp_list_tools", "MCP tool listing", {"server_label": _NAME, "tools": named_tools}, {"error": _NULLABLE_STRING}
    )
    return schemas


def _explicit_discriminators(schemas: dict[str, Any]) -> None:
    """Each `discriminator` maps the `type` values to their schemas explicitly.

    Without a `mapping`, OpenAPI reads a discriminator's values as the schema names
    ("UserMessageItemParam"), which no client sends. Where one value belongs to several members
    (the message roles all have `type: "message"`), no mapping can say it: the discriminator goes,
    and `oneOf` alone decides.
    """

    def type_values(member: dict[str, Any]) -> list[str]:
        target = schemas.get(member.get("$ref", "").rsplit("/", 1)[-1], member)
        kind = target.get("properties", {}).get("type", {})
        options = [kind, *kind.get("anyOf", [])]
        return [v for o in options for v in ([o["const"]] if "const" in o else o.get("enum", [])) if v is not None]

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            members = node.get("oneOf") or node.get("anyOf")
            if "discriminator" in node and members:
                mapping: dict[str, str] = {}
                unique = True
                for member in members:
                    for value in type_values(member):
                        unique = unique and value not in mapping and "$ref" in member
                        mapping[value] = member.get("$ref", "")
                if unique and mapping and all(type_values(m) for m in members):
                    node["discriminator"] = {"propertyName": node["discriminator"]["propertyName"], "mapping": mapping}
                else:
                    del node["discriminator"]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schemas)


def _bounded_string(name: str) -> dict[str, Any]:
    """A string field of a create request as `protocol/request.py` bounds it."""
    shortest = 1 if name == "previous_response_id" else 0
    return {"type": "string", "minLength": shortest, "maxLength": STRING_BOUNDS[name]}


def _nullable(properties: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    """The field, `null` or `schema` (keeping the specification's description)."""
    description = properties.get(name, {}).get("description")
    if description is None:
        description = next(
            (m.get("description") for m in properties.get(name, {}).get("anyOf", []) if "description" in m), None
        )
    properties[name] = {"anyOf": [schema, {"type": "null"}], **({"description": description} if description else {})}


def _present(name: str) -> dict[str, Any]:
    """The field is given and not null."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def _messages_body(*, count_tokens: bool) -> dict[str, Any]:
    """A Messages request as its checks (protocol/messages_api.py) read it."""
    text_block = {
        "type": "object",
        "required": ["type", "text"],
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string", "minLength": 1}},
        "additionalProperties": False,
    }
    message = {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"type": "string", "enum": ["user", "assistant"]},
            "content": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "minItems": 1, "items": text_block},
                ]
            },
        },
        "additionalProperties": False,
    }
    properties: dict[str, Any] = {
        "model": MODEL_NAME,
        "messages": {"type": "array", "minItems": 1, "items": message},
        "system": {"type": "string"},
    }
    required = ["model", "messages"]
    if not count_tokens:
        properties["max_tokens"] = {"type": "integer", "minimum": 1, "maximum": 4096}
        properties["stream"] = {"type": "boolean"}
        required.insert(1, "max_tokens")
    return {"type": "object", "required": required, "properties": properties}


def anthropic_errors() -> dict[int, OpenApiResponse]:
    """The error answers of the Messages front door: Anthropic's shape, not the protocol's."""
    return {
        status: OpenApiResponse(ref("AnthropicError"), description=what)
        for status, what in (
            (400, "Invalid request: the field at fault is named."),
            (401, "Missing or invalid API key."),
            (404, "Unknown model."),
            (429, "A rate limit or budget is used up."),
        )
    }


# --------------------------------------------------------------------------- vector stores

_ATTRIBUTES: dict[str, Any] = {
    "type": "object",
    "description": "Up to 16 pairs, for filters: keys of 1 to 64 characters; strings of at most 512, "
    "numbers or booleans.",
    "maxProperties": 16,
    "propertyNames": {"minLength": 1, "maxLength": 64},
    "additionalProperties": {"anyOf": [{"type": "string", "maxLength": 512}, {"type": "number"}, {"type": "boolean"}]},
}
_CHUNKING: dict[str, Any] = {
    "description": "`auto` (800 tokens, 400 overlap) or `static`; tokens are counted as four characters.",
    "oneOf": [
        {"type": "object", "required": ["type"], "properties": {"type": {"const": "auto"}}},
        {
            "type": "object",
            "required": ["type", "static"],
            "properties": {
                "type": {"const": "static"},
                "static": {
                    "type": "object",
                    "required": ["max_chunk_size_tokens", "chunk_overlap_tokens"],
                    "properties": {
                        "max_chunk_size_tokens": {"type": "integer", "minimum": 100, "maximum": 4096},
                        "chunk_overlap_tokens": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 2048,
                            "description": "At most half of max_chunk_size_tokens.",
                        },
                    },
                },
            },
        },
    ],
}
_EXPIRES_AFTER: dict[str, Any] = {
    "type": "object",
    "required": ["anchor", "days"],
    "properties": {
        "anchor": {"const": "last_active_at"},
        "days": {"type": "integer", "minimum": 1, "maximum": 365},
    },
}
_FILE_COUNTS: dict[str, Any] = {
    "type": "object",
    "required": ["in_progress", "completed", "failed", "cancelled", "total"],
    "properties": {
        name: {"type": "integer", "minimum": 0} for name in ("in_progress", "completed", "failed", "cancelled", "total")
    },
}
_FILE_IDS: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "maxItems": 2000}
_ATTACH_FILE: dict[str, Any] = {
    "type": "object",
    "required": ["file_id"],
    "properties": {
        "file_id": {"type": "string"},
        "attributes": {"anyOf": [_ATTRIBUTES, {"type": "null"}]},
        "chunking_strategy": {"anyOf": [_CHUNKING, {"type": "null"}]},
    },
}

VECTOR_STORE_SCHEMAS: dict[str, Any] = {
    "VectorStore": {
        "type": "object",
        "required": ["id", "object", "created_at", "name", "usage_bytes", "file_counts", "status", "metadata"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store"},
            "created_at": {"type": "integer"},
            "name": {"type": "string"},
            "description": {"type": ["string", "null"]},
            "usage_bytes": {"type": "integer", "minimum": 0},
            "file_counts": _FILE_COUNTS,
            "status": {"enum": ["expired", "in_progress", "completed"]},
            "expires_after": {"anyOf": [_EXPIRES_AFTER, {"type": "null"}]},
            "expires_at": {"type": ["integer", "null"]},
            "last_active_at": {"type": ["integer", "null"]},
            "metadata": ref("Metadata"),
        },
    },
    "VectorStoreList": _list_of(ref("VectorStore"), "A page of vector stores."),
    "CreateVectorStoreBody": {
        "type": "object",
        "properties": {
            "name": {"type": ["string", "null"], "maxLength": 256},
            "description": {"type": ["string", "null"], "maxLength": 512},
            "file_ids": {"anyOf": [_FILE_IDS, {"type": "null"}]},
            "chunking_strategy": {"anyOf": [_CHUNKING, {"type": "null"}]},
            "expires_after": {"anyOf": [_EXPIRES_AFTER, {"type": "null"}]},
            "metadata": {"anyOf": [ref("Metadata"), {"type": "null"}]},
        },
    },
    "UpdateVectorStoreBody": {
        "type": "object",
        "properties": {
            "name": {"type": ["string", "null"], "maxLength": 256},
            "expires_after": {"anyOf": [_EXPIRES_AFTER, {"type": "null"}]},
            "metadata": {"anyOf": [ref("Metadata"), {"type": "null"}]},
        },
    },
    "DeletedVectorStore": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store.deleted"},
            "deleted": {"const": True},
        },
    },
    "VectorStoreFilter": {
        "description": "A comparison of a file attribute, or `and` / `or` of filters.",
        "oneOf": [
            {
                "type": "object",
                "title": "Comparison filter",
                "required": ["type", "key", "value"],
                "properties": {
                    "type": {"enum": ["eq", "ne", "gt", "gte", "lt", "lte"]},
                    "key": {"type": "string"},
                    "value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]},
                },
            },
            {
                "type": "object",
                "title": "Membership filter",
                "required": ["type", "key", "value"],
                "properties": {
                    "type": {"enum": ["in", "nin"]},
                    "key": {"type": "string"},
                    "value": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}},
                },
            },
            {
                "type": "object",
                "title": "Compound filter",
                "required": ["type", "filters"],
                "properties": {
                    "type": {"enum": ["and", "or"]},
                    "filters": {"type": "array", "items": {"$ref": "#/components/schemas/VectorStoreFilter"}},
                },
            },
        ],
    },
    "VectorStoreSearchBody": {
        "type": "object",
        "required": ["query"],
        "properties": {
            "query": {
                "anyOf": [
                    {"type": "string", "pattern": "\\S"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1, "contains": {"pattern": "\\S"}},
                ]
            },
            "filters": {"anyOf": [ref("VectorStoreFilter"), {"type": "null"}]},
            "max_num_results": {"type": ["integer", "null"], "minimum": 1, "maximum": 50},
            "ranking_options": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "ranker": {"enum": ["auto", "default-2024-11-15", "none", None]},
                            "score_threshold": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                        },
                    },
                    {"type": "null"},
                ]
            },
            "rewrite_query": {"type": ["boolean", "null"]},
        },
    },
    "VectorStoreSearchResults": {
        "type": "object",
        "required": ["object", "search_query", "data", "has_more", "next_page"],
        "properties": {
            "object": {"const": "vector_store.search_results.page"},
            "search_query": {"type": "array", "items": {"type": "string"}},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["file_id", "filename", "score", "attributes", "content"],
                    "properties": {
                        "file_id": {"type": "string"},
                        "filename": {"type": "string"},
                        "score": {"type": "number", "minimum": 0, "maximum": 1},
                        "attributes": _ATTRIBUTES,
                        "content": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["type", "text"],
                                "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                            },
                        },
                    },
                },
            },
            "has_more": {"type": "boolean"},
            "next_page": {"type": ["string", "null"]},
        },
    },
    "VectorStoreFile": {
        "type": "object",
        "required": ["id", "object", "created_at", "vector_store_id", "status", "usage_bytes", "last_error"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store.file"},
            "created_at": {"type": "integer"},
            "vector_store_id": {"type": "string"},
            "status": {"enum": ["in_progress", "completed", "cancelled", "failed"]},
            "usage_bytes": {"type": "integer", "minimum": 0},
            "last_error": {
                "anyOf": [
                    {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"enum": ["server_error", "unsupported_file", "invalid_file"]},
                            "message": {"type": "string"},
                        },
                    },
                    {"type": "null"},
                ]
            },
            "attributes": _ATTRIBUTES,
            "chunking_strategy": _CHUNKING["oneOf"][1],
        },
    },
    "VectorStoreFileList": _list_of(ref("VectorStoreFile"), "A page of a vector store's files."),
    "CreateVectorStoreFileBody": _ATTACH_FILE,
    "UpdateVectorStoreFileBody": {
        "type": "object",
        "required": ["attributes"],
        "properties": {"attributes": {"anyOf": [_ATTRIBUTES, {"type": "null"}]}},
    },
    "DeletedVectorStoreFile": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store.file.deleted"},
            "deleted": {"const": True},
        },
    },
    "VectorStoreFileContent": {
        "type": "object",
        "required": ["object", "data", "has_more", "next_page"],
        "properties": {
            "object": {"const": "vector_store.file_content.page"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["type", "text"],
                    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                },
            },
            "has_more": {"type": "boolean"},
            "next_page": {"type": ["string", "null"]},
        },
    },
    "CreateVectorStoreFileBatchBody": {
        "type": "object",
        "description": "`file_ids` or `files`, not both.",
        "properties": {
            "file_ids": _FILE_IDS,
            "files": {"type": "array", "items": _ATTACH_FILE, "maxItems": 2000},
            "attributes": {"anyOf": [_ATTRIBUTES, {"type": "null"}]},
            "chunking_strategy": {"anyOf": [_CHUNKING, {"type": "null"}]},
        },
        "oneOf": [
            {"required": ["file_ids"], "not": {"required": ["files"]}},
            {"required": ["files"], "not": {"required": ["file_ids"]}},
        ],
    },
    "VectorStoreFileBatch": {
        "type": "object",
        "required": ["id", "object", "created_at", "vector_store_id", "status", "file_counts"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store.files_batch"},
            "created_at": {"type": "integer"},
            "vector_store_id": {"type": "string"},
            "status": {"enum": ["in_progress", "completed", "cancelled", "failed"]},
            "file_counts": _FILE_COUNTS,
        },
    },
}


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
        "required": ["object", "requests", "input_tokens", "output_tokens", "total_tokens", "cost_usd"],
        "properties": {
            "object": {"type": "string", "enum": ["usage.bucket"]},
            "day": {"type": "string", "format": "date", "description": "UTC day (with group_by=day)."},
            "model": {"type": "string"},
            "tenant": {"type": "string"},
            "key_id": {"type": ["integer", "null"], "description": "With group_by=key; null: a deleted key's."},
            "key": {"type": ["string", "null"], "description": "With group_by=key: the key's name and prefix."},
            "prompt": {
                "type": ["string", "null"],
                "description": "With group_by=prompt: the reusable prompt's id; null: none.",
            },
            "prompt_version": {"type": ["string", "null"], "description": "With group_by=prompt: its version."},
            "kind": {
                "type": "string",
                "description": "With group_by=kind: responses (stored), responses (store: false), chat.completions, "
                "embeddings, messages, guardrail.judge (a judge guardrail's model runs), responses (purged).",
            },
            "requests": {"type": "integer"},
            "input_tokens": {"type": "integer", "description": "Every prompt token, cache reads and writes included."},
            "output_tokens": {"type": "integer"},
            "total_tokens": {"type": "integer"},
            "cached_tokens": {"type": "integer", "description": "Input tokens read from the prompt cache."},
            "cache_write_tokens": {"type": "integer", "description": "Input tokens written to the prompt cache."},
            "cache_write_1h_tokens": {"type": "integer", "description": "The 1-hour part of cache_write_tokens."},
            "cost_usd": {
                "type": "number",
                "description": "At the model routes' current prices, cache reads and writes included.",
            },
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
            "total": ref("UsageBucket"),
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
            "model": MODEL_NAME,
            "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": ref("ItemParam")}, {"type": "null"}]},
            "previous_response_id": {"anyOf": [_bounded_string("previous_response_id"), {"type": "null"}]},
            "instructions": {"type": ["string", "null"]},
            "prompt_cache_key": {"anyOf": [_bounded_string("prompt_cache_key"), {"type": "null"}]},
        },
        "anyOf": [_present("input"), _present("previous_response_id")],
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
        "propertyNames": {"maxLength": 64},
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
            "items": {
                "anyOf": [{"type": "array", "items": ref("ConversationItemParam"), "maxItems": 20}, {"type": "null"}]
            },
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
        "properties": {"items": {"type": "array", "items": ref("ConversationItemParam"), "maxItems": 20}},
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
    # Files (responses_api/files/): the OpenAI SDK's FileObject, its list page and deletion.
    "OpenAIFile": {
        "type": "object",
        "required": ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["file"]},
            "bytes": {"type": "integer", "minimum": 0},
            "created_at": {"type": "integer"},
            "expires_at": {"type": ["integer", "null"]},
            "filename": {"type": "string"},
            "purpose": {"type": "string", "enum": ["user_data", "assistants"]},
            "status": {"type": "string", "enum": ["uploaded", "processed", "error"]},
            "status_details": {"type": ["string", "null"]},
        },
    },
    "OpenAIFileList": _list_of(ref("OpenAIFile"), "A page of files."),
    "DeletedFile": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["file"]},
            "deleted": {"type": "boolean", "enum": [True]},
        },
    },
    "CreateFileBody": {
        "type": "object",
        "required": ["file", "purpose"],
        "properties": {
            "file": {"type": "string", "format": "binary", "description": "The file (its part's name and type)."},
            "purpose": {"type": "string", "enum": ["user_data", "assistants"]},
            "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
            "expires_after[seconds]": {"type": "integer", "minimum": 3600, "maximum": 2592000},
        },
        # `expires_after` is one object: its anchor and seconds come together.
        "dependentRequired": {
            "expires_after[anchor]": ["expires_after[seconds]"],
            "expires_after[seconds]": ["expires_after[anchor]"],
        },
    },
    **VECTOR_STORE_SCHEMAS,
    # Anthropic's Messages API (api/messages_views.py): what its checks require; every other field
    # Anthropic defines is accepted (passed to an Anthropic route, translated or named in
    # x-gateway-ignored-fields elsewhere), as README's "Claude Code" section says.
    "MessagesBody": _messages_body(count_tokens=False),
    "CountTokensBody": _messages_body(count_tokens=True),
    "AnthropicError": {
        "type": "object",
        "description": "An error of the Messages front door, in Anthropic's shape.",
        "required": ["type", "error"],
        "properties": {
            "type": {"type": "string", "enum": ["error"]},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {
                    "type": {"type": "string", "examples": ["invalid_request_error"]},
                    "message": {"type": "string"},
                    "param": {"type": "string", "description": "The field at fault (an extra key)."},
                },
            },
        },
    },
    "PassThroughBody": {
        "type": "object",
        "description": "The upstream's own request or answer, passed through unchanged (only `model` is read).",
        "required": ["model"],
        "properties": {"model": MODEL_NAME},
    },
}


# Request bodies that may be left out (every other body is required).
OPTIONAL_BODIES = frozenset({"CreateConversationBody", "CreateVectorStoreBody"})


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


def failed_dependency() -> dict[int, OpenApiResponse]:
    """The 424 of a create whose named MCP server could not list its tools (as OpenAI answers)."""
    return {
        424: OpenApiResponse(
            ref("GatewayError"),
            description="An MCP server the request names could not list its tools (`type` "
            "`external_connector_error`, `code` `http_error`, `param` `tools[i]`).",
        )
    }


def json_body(name: str) -> dict[str, Any]:
    return {"application/json": ref(name)}


def response_header(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.HEADER, response=[200], description=description)
