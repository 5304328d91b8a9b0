"""Normalise request `input` into stored item form, each with an `id`.

Accepts the easy forms clients send (a bare string, `{"role", "content"}`
without `type`, string content, `item_reference` without `type`) and returns
the canonical item dicts the store keeps and the API returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .client_tool_types import CLIENT_TOOL_TYPES, FieldType
from .client_tools import HOSTED_ITEM_TYPES
from .errors import InvalidRequest
from .ids import new_id
from .surface import REFUSED_INPUT_ITEMS
from .tool_search import check_additional_tools

INPUT_ROLES = frozenset({"user", "system", "developer"})
# The statuses of messages and function call items (OpenAI's and Open Responses' output enum):
# an item given back keeps its status, anything else is refused rather than stored.
ITEM_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_STATUS_CHECKED = frozenset({"message", "function_call", "function_call_output"})
# OpenAI's cap on a function name; an item carrying a longer one is refused, not sent upstream.
FUNCTION_NAME_MAX_CHARS = 64
PHASES = frozenset({"commentary", "final_answer"})
IMAGE_DETAILS = frozenset({"low", "high", "auto", "original"})


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _require_str(obj: dict[str, Any], key: str, param: str, *, allow_empty: bool = True) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or (not allow_empty and not value):
        raise _bad(f"Missing or invalid '{param}.{key}': expected a string.", f"{param}.{key}")
    return value


def _text_part(part: dict[str, Any], param: str, kind: str) -> dict[str, Any]:
    return {"type": kind, "text": _require_str(part, "text", param)}


def _cache_breakpoint(part: dict[str, Any], param: str) -> dict[str, Any] | None:
    """`prompt_cache_breakpoint` (newest SDK): `{"mode": "explicit", "ttl"?: "30m" | "12h"}`,
    kept on the part so that each dialect can place its cache breakpoint there."""
    value = part.get("prompt_cache_breakpoint")
    if value is None:
        return None
    name = f"{param}.prompt_cache_breakpoint"
    if not isinstance(value, dict):
        raise _bad(f"Invalid type for '{name}': expected an object.", name)
    if value.get("mode") != "explicit":
        raise _bad(f"Invalid value for '{name}.mode': expected 'explicit'.", f"{name}.mode")
    ttl = value.get("ttl")
    if ttl is not None and not isinstance(ttl, str):  # '30m', '12h' today; the upstream judges the value
        raise _bad(f"Invalid type for '{name}.ttl': expected a string.", f"{name}.ttl")
    return {"mode": "explicit", **({"ttl": ttl} if ttl else {})}


def _input_part(part: Any, param: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _bad(f"Invalid '{param}': expected a content part object.", param)
    out = _input_part_fields(part, param)
    breakpoint_ = _cache_breakpoint(part, param)
    if breakpoint_ is not None:
        out["prompt_cache_breakpoint"] = breakpoint_
    return out


def _input_part_fields(part: dict[str, Any], param: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "text"):
        return _text_part(part, param, "input_text")
    if kind == "input_image":
        image_url = part.get("image_url")
        file_id = part.get("file_id")
        if isinstance(image_url, dict):  # Chat Completions habit: {"url": ...}
            image_url = image_url.get("url")
        if not isinstance(image_url, str) and not isinstance(file_id, str):
            raise _bad(
                f"'{param}' needs 'image_url' (an http(s) or data URL) or 'file_id'.",
                f"{param}.image_url",
            )
        if isinstance(image_url, str) and not image_url.startswith(("http://", "https://", "data:")):
            raise _bad(
                f"Invalid '{param}.image_url': expected an http(s) URL or a data URL.",
                f"{param}.image_url",
            )
        detail = part.get("detail") or "auto"
        if not isinstance(detail, str) or detail not in IMAGE_DETAILS:
            raise _bad(f"Invalid '{param}.detail': {detail!r}.", f"{param}.detail")
        return {"type": "input_image", "image_url": image_url, "file_id": file_id, "detail": detail}
    if kind == "input_file":
        out: dict[str, Any] = {"type": "input_file"}
        for key in ("file_data", "file_url", "file_id", "filename"):
            value = part.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise _bad(f"Invalid '{param}.{key}': expected a string.", f"{param}.{key}")
                out[key] = value
        if not any(k in out for k in ("file_data", "file_url", "file_id")):
            raise _bad(f"'{param}' needs one of 'file_data', 'file_url' or 'file_id'.", f"{param}.file_data")
        return out
    raise _bad(
        f"Invalid '{param}.type': {kind!r}; expected 'input_text', 'input_image' or 'input_file'.",
        f"{param}.type",
    )


def _assistant_part(part: Any, param: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _bad(f"Invalid '{param}': expected a content part object.", param)
    kind = part.get("type")
    if kind in ("output_text", "input_text", "text"):
        annotations = part.get("annotations") or []
        if not isinstance(annotations, list):
            raise _bad(f"Invalid '{param}.annotations': expected an array.", f"{param}.annotations")
        return {
            "type": "output_text",
            "text": _require_str(part, "text", param),
            "annotations": annotations,
            "logprobs": part.get("logprobs") or [],
        }
    if kind == "refusal":
        return {"type": "refusal", "refusal": _require_str(part, "refusal", param)}
    raise _bad(
        f"Invalid '{param}.type': {kind!r}; assistant content is 'output_text' or 'refusal'.",
        f"{param}.type",
    )


def _message(raw: dict[str, Any], param: str) -> dict[str, Any]:
    role = raw.get("role")
    content = raw.get("content")
    if role == "assistant":
        if isinstance(content, str):
            parts = [{"type": "output_text", "text": content, "annotations": [], "logprobs": []}]
        elif isinstance(content, list):
            parts = [_assistant_part(p, f"{param}.content[{i}]") for i, p in enumerate(content)]
        else:
            raise _bad(f"Invalid '{param}.content': expected a string or an array.", f"{param}.content")
        item: dict[str, Any] = {
            "type": "message",
            "id": raw.get("id") or new_id("msg"),
            "status": raw.get("status") or "completed",
            "role": "assistant",
            "content": parts,
        }
        phase = raw.get("phase")
        if phase is not None:
            if not isinstance(phase, str) or phase not in PHASES:
                raise _bad(
                    f"Invalid '{param}.phase': expected 'commentary' or 'final_answer'.",
                    f"{param}.phase",
                )
            item["phase"] = phase
        return item
    if not isinstance(role, str) or role not in INPUT_ROLES:
        raise _bad(
            f"Invalid '{param}.role': {role!r}; expected 'user', 'system', 'developer' or 'assistant'.",
            f"{param}.role",
        )
    if isinstance(content, str):
        parts = [{"type": "input_text", "text": content}]
    elif isinstance(content, list):
        parts = [_input_part(p, f"{param}.content[{i}]") for i, p in enumerate(content)]
    else:
        raise _bad(f"Invalid '{param}.content': expected a string or an array.", f"{param}.content")
    return {
        "type": "message",
        "id": raw.get("id") or new_id("msg"),
        "status": "completed",
        "role": role,
        "content": parts,
    }


def _function_call(raw: dict[str, Any], param: str) -> dict[str, Any]:
    arguments = raw.get("arguments", "")
    if not isinstance(arguments, str):
        raise _bad(f"Invalid '{param}.arguments': expected a JSON string.", f"{param}.arguments")
    item = {
        "type": "function_call",
        "id": raw.get("id") or new_id("fc"),
        "call_id": _require_str(raw, "call_id", param, allow_empty=False),
        "name": _require_str(raw, "name", param, allow_empty=False),
        "arguments": arguments,
        "status": raw.get("status") or "completed",
    }
    namespace = _optional_str(raw, "namespace", param)
    if namespace:
        item["namespace"] = namespace
    return item


def _function_call_output(raw: dict[str, Any], param: str) -> dict[str, Any]:
    output = raw.get("output")
    if isinstance(output, list):
        output = [_input_part(p, f"{param}.output[{i}]") for i, p in enumerate(output)]
    elif not isinstance(output, str):
        raise _bad(
            f"Invalid '{param}.output': expected a string or an array of content parts.",
            f"{param}.output",
        )
    return {
        "type": "function_call_output",
        "id": raw.get("id") or new_id("fco"),
        "call_id": _require_str(raw, "call_id", param, allow_empty=False),
        "output": output,
        "status": raw.get("status") or "completed",
    }


def _reasoning(raw: dict[str, Any], param: str) -> dict[str, Any]:
    summary = raw.get("summary") or []
    if not isinstance(summary, list):
        raise _bad(f"Invalid '{param}.summary': expected an array.", f"{param}.summary")
    summary_parts = []
    for i, entry in enumerate(summary):
        if not isinstance(entry, dict):
            raise _bad(f"Invalid '{param}.summary[{i}]': expected an object.", f"{param}.summary[{i}]")
        summary_parts.append({"type": "summary_text", "text": _require_str(entry, "text", f"{param}.summary[{i}]")})
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": raw.get("id") or new_id("rs"),
        "summary": summary_parts,
    }
    content = raw.get("content")
    if isinstance(content, list):
        item["content"] = [
            {"type": "reasoning_text", "text": _require_str(c, "text", f"{param}.content[{i}]")}
            for i, c in enumerate(content)
            if isinstance(c, dict)
        ]
    if isinstance(raw.get("encrypted_content"), str):
        item["encrypted_content"] = raw["encrypted_content"]
    return item


def _optional_str(raw: dict[str, Any], key: str, param: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(f"Invalid '{param}.{key}': expected a string.", f"{param}.{key}")
    return value


def _mcp_approval_response(raw: dict[str, Any], param: str) -> dict[str, Any]:
    approve = raw.get("approve")
    if not isinstance(approve, bool):
        raise _bad(f"Missing or invalid '{param}.approve': expected a boolean.", f"{param}.approve")
    return {
        "type": "mcp_approval_response",
        "id": raw.get("id") or new_id("mcpa"),
        "approval_request_id": _require_str(raw, "approval_request_id", param, allow_empty=False),
        "approve": approve,
        "reason": _optional_str(raw, "reason", param),
    }


def _mcp_tool_fields(raw: dict[str, Any], param: str) -> dict[str, Any]:
    """What an MCP call and an approval request both name: server, tool, arguments."""
    return {
        "server_label": _require_str(raw, "server_label", param, allow_empty=False),
        "name": _require_str(raw, "name", param, allow_empty=False),
        "arguments": _require_str(raw, "arguments", param),
    }


def _mcp_approval_request(raw: dict[str, Any], param: str) -> dict[str, Any]:
    return {
        "type": "mcp_approval_request",
        "id": _require_str(raw, "id", param, allow_empty=False),
        **_mcp_tool_fields(raw, param),
    }


MCP_CALL_STATUSES = frozenset({"in_progress", "completed", "incomplete", "calling", "failed"})


def _mcp_call(raw: dict[str, Any], param: str) -> dict[str, Any]:
    error = raw.get("error")
    if error is not None and not isinstance(error, (str, dict)):
        raise _bad(f"Invalid '{param}.error': expected an object or a string.", f"{param}.error")
    status = raw.get("status")
    if status is not None and status not in MCP_CALL_STATUSES:
        raise _bad(
            f"Invalid '{param}.status': expected one of {', '.join(sorted(MCP_CALL_STATUSES))}.", f"{param}.status"
        )
    return {
        "type": "mcp_call",
        "id": raw.get("id") or new_id("mcp"),
        **_mcp_tool_fields(raw, param),
        "output": _optional_str(raw, "output", param),
        "error": error,
        "status": raw.get("status") or "completed",
        "approval_request_id": _optional_str(raw, "approval_request_id", param),
    }


def _mcp_list_tools(raw: dict[str, Any], param: str) -> dict[str, Any]:
    tools = raw.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
        raise _bad(f"Invalid '{param}.tools': expected an array of tools with names.", f"{param}.tools")
    return {
        "type": "mcp_list_tools",
        "id": raw.get("id") or new_id("mcpl"),
        "server_label": _require_str(raw, "server_label", param, allow_empty=False),
        "tools": tools,
        "error": _optional_str(raw, "error", param),
    }


_MCP_ITEMS = {
    "mcp_approval_response": _mcp_approval_response,
    "mcp_approval_request": _mcp_approval_request,
    "mcp_call": _mcp_call,
    "mcp_list_tools": _mcp_list_tools,
}


def _client_tool_item(
    raw: dict[str, Any], param: str, required: Mapping[str, FieldType], *, prefix: str, call_field: str, status: bool
) -> dict[str, Any]:
    """A call or output item of a client-run tool, kept as sent once its required fields check
    out (`call_field`: the output's field naming its call; `status`: the item gets one)."""
    item = dict(raw)
    if call_field != "call_id" and not isinstance(item.get("call_id"), str):
        # The SDK's LocalShellCallOutput names the call by `id` alone.
        item["call_id"] = _require_str(raw, call_field, param, allow_empty=False)
    for key, expected in required.items():
        if not isinstance(item.get(key), expected) or isinstance(item.get(key), bool):
            what = {str: "a string", dict: "an object", list: "an array"}.get(expected, "a string or an array")  # type: ignore[call-overload]  # a dict keyed by types: the stubs' overloads of get take no type key
            raise _bad(f"Missing or invalid '{param}.{key}': expected {what}.", f"{param}.{key}")
    item["id"] = item.get("id") or new_id(prefix)
    if status:
        item.setdefault("status", "completed")
    return item


def _client_tool_type_item(raw: dict[str, Any], param: str) -> dict[str, Any] | None:
    """A call or output item of a client tool type (None: the item is of no such type)."""
    kind = raw["type"]
    entry = CLIENT_TOOL_TYPES.of_call(kind)
    if entry is not None:
        return _client_tool_item(
            raw, param, entry.call_fields, prefix=entry.call_id_prefix, call_field="call_id", status=True
        )
    entry = CLIENT_TOOL_TYPES.of_output(kind)
    if entry is not None:
        return _client_tool_item(
            raw,
            param,
            entry.output_fields,
            prefix=entry.output_id_prefix,
            call_field=entry.output_call_field,
            status=entry.output_status,
        )
    return None


# The fields each client-run tool's call and output item must carry (a live view of the client
# tool types' table; the OpenAPI document's schemas for them are generated from it too).
CLIENT_TOOL_ITEM_FIELDS = CLIENT_TOOL_TYPES.item_fields


# Hosted items whose id the SDK's input params leave optional: a client-run tool search
# (`execution: "client"`) answers the model's call with a `tool_search_output` naming only its call.
HOSTED_ITEM_ID_OPTIONAL = frozenset({"tool_search_call", "tool_search_output"})


def _hosted_tool_item(raw: dict[str, Any], param: str) -> dict[str, Any]:
    """An item a hosted tool produced (web_search_call, ...): history the gateway keeps, not runs."""
    if raw["type"] in HOSTED_ITEM_ID_OPTIONAL and raw.get("id") is None:
        return {**raw, "id": new_id("ts")}
    _require_str(raw, "id", param, allow_empty=False)
    return dict(raw)


def _compaction(raw: dict[str, Any], param: str) -> dict[str, Any]:
    item_id = raw.get("id")
    if item_id is not None and not isinstance(item_id, str):
        raise _bad(f"Invalid type for '{param}.id': expected a string.", f"{param}.id")
    return {
        "type": "compaction",
        "id": item_id or new_id("cmp"),
        "encrypted_content": _require_str(raw, "encrypted_content", param, allow_empty=False),
    }


def _item_reference(raw: dict[str, Any], param: str) -> dict[str, Any]:
    return {"type": "item_reference", "id": _require_str(raw, "id", param, allow_empty=False)}


# The longest item id (and call id) a client may send: the stored items' column holds 255
# (models.Item.public_id). Real clients stay far below (OpenAI's ids are about 50 characters).
ID_MAX_CHARS = 255


def normalize_item(raw: Any, param: str) -> dict[str, Any]:
    """One input item (of /v1/responses or /v1/conversations/{id}/items) in stored form."""
    if isinstance(raw, dict) and raw.get("id") is not None and not isinstance(raw["id"], str):
        raise _bad(f"Invalid '{param}.id': expected a string.", f"{param}.id")
    item = _normalize_item(raw, param)
    status = raw.get("status")
    if (
        item["type"] in _STATUS_CHECKED
        and status is not None
        and (not isinstance(status, str) or status not in ITEM_STATUSES)
    ):
        raise _bad(f"Invalid '{param}.status': expected one of {', '.join(sorted(ITEM_STATUSES))}.", f"{param}.status")
    if item["type"] == "function_call" and len(item["name"]) > FUNCTION_NAME_MAX_CHARS:
        raise _bad(f"'{param}.name' is longer than {FUNCTION_NAME_MAX_CHARS} characters.", f"{param}.name")
    for field in ("id", "call_id"):
        value = item.get(field)
        if isinstance(value, str) and len(value) > ID_MAX_CHARS:
            # local_shell_call_output names its call by `id`: its copy in call_id is that field.
            named = _call_field(item["type"]) if field == "call_id" else field
            raise _bad(f"'{param}.{named}' is longer than {ID_MAX_CHARS} characters.", f"{param}.{named}")
    return item


def _call_field(item_type: str) -> str:
    """The field of an item, as the client sends it, that names its call."""
    entry = CLIENT_TOOL_TYPES.of_output(item_type)
    return entry.output_call_field if entry is not None else "call_id"


def _normalize_item(raw: Any, param: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad(f"Invalid '{param}': expected an object.", param)
    kind = raw.get("type")
    if kind is None:
        if "role" in raw:
            kind = "message"
        elif "id" in raw and len(raw) == 1:
            kind = "item_reference"
        else:
            raise _bad(f"Missing required parameter: '{param}.type'.", f"{param}.type")
    if not isinstance(kind, str):
        raise _bad(f"Invalid type for '{param}.type': expected a string.", f"{param}.type")
    if kind == "message":
        return _message(raw, param)
    if kind == "function_call":
        return _function_call(raw, param)
    if kind == "function_call_output":
        return _function_call_output(raw, param)
    if kind == "reasoning":
        return _reasoning(raw, param)
    if kind == "item_reference":
        return _item_reference(raw, param)
    if kind == "compaction":
        return _compaction(raw, param)
    if kind == "compaction_trigger":
        # Compaction v2: the request's answer is one `compaction` item (request.py checks it is last).
        return {"type": "compaction_trigger"}
    if kind in _MCP_ITEMS:
        return _MCP_ITEMS[kind](raw, param)
    client_tool_item = _client_tool_type_item(raw, param)
    if client_tool_item is not None:
        return client_tool_item
    if kind == "tool_search_output" and raw.get("execution") == "client":
        # A client's search result: it answers the client's call, and what it returns is loaded.
        required: dict[str, FieldType] = {"call_id": str, "tools": list}
        return _client_tool_item(raw, param, required, prefix="tso", call_field="call_id", status=True)
    if kind == "tool_search_call" and not raw.get("id"):
        return dict(raw, id=new_id("tsc"))
    if kind in HOSTED_ITEM_TYPES:
        return _hosted_tool_item(raw, param)
    if kind == "additional_tools":
        return check_additional_tools(raw, param)
    if kind in REFUSED_INPUT_ITEMS:
        raise _bad(f"Invalid '{param}.type': {kind!r} is not supported: {REFUSED_INPUT_ITEMS[kind]}.", f"{param}.type")
    raise _bad(f"Invalid '{param}.type': unsupported item type {kind!r}.", f"{param}.type")


def normalize_input(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [
            {
                "type": "message",
                "id": new_id("msg"),
                "status": "completed",
                "role": "user",
                "content": [{"type": "input_text", "text": raw}],
            }
        ]
    if not isinstance(raw, list):
        raise _bad("Invalid 'input': expected a string or an array of items.", "input")
    return [normalize_item(entry, f"input[{i}]") for i, entry in enumerate(raw)]


def item_text(item: dict[str, Any]) -> str:
    """The plain text of a message item (input_text / output_text / refusal parts)."""
    pieces = []
    for part in item.get("content") or []:
        if part.get("type") in ("input_text", "output_text", "reasoning_text", "summary_text"):
            pieces.append(part.get("text", ""))
        elif part.get("type") == "refusal":
            pieces.append(part.get("refusal", ""))
    return "".join(pieces)
