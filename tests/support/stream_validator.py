"""Strict checker for the `/v1/responses` streaming wire format (see /work/shared/PROTOCOL.md).

Tests feed it a raw SSE body (or the decoded event list, e.g. from a WebSocket) and it
raises `StreamViolation` on the first broken rule: SSE framing, per-event JSON Schema
(Open Responses spec), sequence numbers, event grammar, text/argument accumulation,
and the terminal Response. Pure Python plus `jsonschema`; no Django.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from responses_api.protocol.surface import SERVER_EVENTS, Treatment

# The event types the surface classification says the gateway sends (served, or relayed for a
# hosted call a responses upstream ran).
_SENT_BY_THE_GATEWAY = frozenset(
    name for name, entry in SERVER_EVENTS.items() if entry.treatment in (Treatment.SERVED, Treatment.PASSED_THROUGH)
)

__all__ = [
    "OPENAI_SPEC_PATH",
    "SPEC_PATH",
    "StreamViolation",
    "event_schema_names",
    "parse_sse",
    "validate_events",
    "validate_response_object",
    "validate_sse",
]

# A copy of ../shared/spec lives in tests/spec, so a bare clone can run the suite.
SPEC_PATH = Path(__file__).resolve().parents[1] / "spec" / "openresponses-2026-04-24.openapi.json"
OPENAI_SPEC_PATH = SPEC_PATH.with_name("openai-responses.openapi.json")

# ---------------------------------------------------------------------------------------------
# Contract constants (PROTOCOL.md). Kept as data so a protocol change is a one-line edit here.
# ---------------------------------------------------------------------------------------------

RESPONSE_FIELDS: tuple[str, ...] = (
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "error",
    "incomplete_details",
    "model",
    "previous_response_id",
    "instructions",
    "output",
    "tools",
    "tool_choice",
    "truncation",
    "parallel_tool_calls",
    "text",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "temperature",
    "reasoning",
    "usage",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
    "conversation",
    "user",
)
OPEN_STATUSES = frozenset({"queued", "in_progress"})
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "incomplete"})
# "steered": a WebSocket response stopped for steering input (openai SDK 3.57, Response.incomplete_details).
INCOMPLETE_REASONS = frozenset({"max_output_tokens", "content_filter", "max_tool_calls", "steered"})
TOOL_FIELDS: tuple[str, ...] = ("type", "name", "description", "parameters", "strict")

# Which Response.status each terminal event may carry. Neither spec has a `response.cancelled`
# event, so a cancelled (background) response is allowed to end its stream with
# `response.failed` carrying status "cancelled"; this is a project choice, not spec text.
TERMINAL_EVENT_STATUSES: dict[str, frozenset[str]] = {
    "response.completed": frozenset({"completed"}),
    "response.incomplete": frozenset({"incomplete"}),
    "response.failed": frozenset({"failed", "cancelled"}),
}
LIFECYCLE_HEAD = ("response.created", "response.queued", "response.in_progress")
_RESPONSE_EVENTS = frozenset(LIFECYCLE_HEAD) | TERMINAL_EVENT_STATUSES.keys()

# Reasoning text: Open Responses names the events `response.reasoning.delta/.done`, OpenAI (and
# PROTOCOL.md) `response.reasoning_text.delta/.done`. Both are accepted; the OpenAI names are
# validated against OpenAI's schema because the Open Responses spec does not define them.
OPENAI_ONLY_EVENTS: dict[str, str] = {
    "response.reasoning_text.delta": "ResponseReasoningTextDeltaEvent",
    "response.reasoning_text.done": "ResponseReasoningTextDoneEvent",
    # MCP tools: OpenAI defines them, Open Responses does not (yet); OpenAI's schemas apply.
    "response.mcp_list_tools.in_progress": "ResponseMCPListToolsInProgressEvent",
    "response.mcp_list_tools.completed": "ResponseMCPListToolsCompletedEvent",
    "response.mcp_list_tools.failed": "ResponseMCPListToolsFailedEvent",
    "response.mcp_call.in_progress": "ResponseMCPCallInProgressEvent",
    "response.mcp_call_arguments.delta": "ResponseMCPCallArgumentsDeltaEvent",
    "response.mcp_call_arguments.done": "ResponseMCPCallArgumentsDoneEvent",
    "response.mcp_call.completed": "ResponseMCPCallCompletedEvent",
    "response.mcp_call.failed": "ResponseMCPCallFailedEvent",
    # Custom tools' freeform input.
    "response.custom_tool_call_input.delta": "ResponseCustomToolCallInputDeltaEvent",
    "response.custom_tool_call_input.done": "ResponseCustomToolCallInputDoneEvent",
    # Hosted tools a route serves with a registry tool.
    "response.web_search_call.in_progress": "ResponseWebSearchCallInProgressEvent",
    "response.web_search_call.searching": "ResponseWebSearchCallSearchingEvent",
    "response.web_search_call.completed": "ResponseWebSearchCallCompletedEvent",
    "response.file_search_call.in_progress": "ResponseFileSearchCallInProgressEvent",
    "response.file_search_call.searching": "ResponseFileSearchCallSearchingEvent",
    "response.file_search_call.completed": "ResponseFileSearchCallCompletedEvent",
}
# Events of the newest openai SDK that neither spec has yet: checked against the SDK's own type
# (openai.types.responses.<name>, its JSON schema with no extra fields).
SDK_ONLY_EVENTS: dict[str, str] = {
    "response.compaction.compacting": "ResponseCompactionCompactingEvent",
}
# OpenAI's MCP and client-tool items, and its tool types, join the Open Responses unions (see
# _add_openai_mcp): Open Responses has only functions; the gateway serves OpenAI's superset.
OPENAI_ITEM_SCHEMAS = (
    "MCPListTools",
    "MCPToolCall",
    "MCPApprovalRequest",
    "CustomToolCall",
    "LocalShellToolCall",
    "FunctionShellCall",
    "ApplyPatchToolCall",
    "ComputerToolCall",
    "WebSearchToolCall",
    "FileSearchToolCall",
    "ToolSearchCall",
    "ToolSearchOutput",
    "AdditionalTools",
)
OPENAI_TOOL_SCHEMAS = (
    "MCPTool",
    "NamespaceToolParam",
    "CustomToolParam",
    "LocalShellToolParam",
    "FunctionShellToolParam",
    "ApplyPatchToolParam",
    "ComputerUsePreviewTool",
    "WebSearchTool",
    "WebSearchPreviewTool",
    "FileSearchTool",
    "ToolSearchToolParam",
)
# OpenAI's file citations join the Open Responses annotation union (url_citation only): the
# gateway's file_search cites the files it found (issue 59).
OPENAI_ANNOTATION_SCHEMAS = ("FileCitationBody",)
# Hosted-tool call items: in_progress -> searching -> completed, each an event of its own.
_HOSTED_CALL_STAGES = ("in_progress", "searching", "completed")
# Client-tool calls arrive whole in output_item.done (a custom tool's input also streams).
_CLIENT_CALL_ITEMS = frozenset(
    {"custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call", "computer_call"}
)
# "Serve the superset": events that embed no Response are also checked against OpenAI's schema
# for the same type. That is what demands the flat code/message/param on `error` (beside the
# Open Responses nested `error`), `logprobs` on output_text deltas/done/parts, and `name` on
# function_call_arguments.done: fields OpenAI's schema requires and its SDK types expose.
# Response-carrying events are exempt: OpenAI's spec types usage/user as non-null, while the
# protocol says unknown values are null. Set to False to check the Open Responses spec only.
CHECK_OPENAI_EVENT_SCHEMAS = True

# delta event type -> (part type it writes to, field of the *.done event holding the full text)
_TEXT_DELTAS: dict[str, str] = {
    "response.output_text.delta": "output_text",
    "response.refusal.delta": "refusal",
    "response.reasoning.delta": "reasoning_text",
    "response.reasoning_text.delta": "reasoning_text",
}
_TEXT_DONES: dict[str, tuple[str, str]] = {
    "response.output_text.done": ("output_text", "text"),
    "response.refusal.done": ("refusal", "refusal"),
    "response.reasoning.done": ("reasoning_text", "text"),
    "response.reasoning_text.done": ("reasoning_text", "text"),
}
# Field of a content part that holds its text.
_PART_TEXT_FIELD = {"output_text": "text", "refusal": "refusal", "reasoning_text": "text", "summary_text": "text"}
# Content part types each item type may stream.
_ITEM_PART_TYPES = {"message": frozenset({"output_text", "refusal"}), "reasoning": frozenset({"reasoning_text"})}
# Item types without a status field (the compaction item is emitted whole; OpenAI's
# mcp_list_tools and mcp_approval_request items have none).
_STATUSLESS_ITEMS = frozenset({"compaction", "mcp_list_tools", "mcp_approval_request"})


class StreamViolation(AssertionError):
    """A broken wire rule. `rule` is a short stable tag tests can match on."""

    def __init__(self, rule: str, detail: str, *, index: int | None = None, sequence_number: Any = None) -> None:
        self.rule = rule
        self.detail = detail
        self.index = index
        self.sequence_number = sequence_number
        where = "stream" if index is None else f"event #{index} (sequence_number={sequence_number!r})"
        super().__init__(f"[{rule}] {where}: {detail}")


# ---------------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------------


def _spec_path() -> Path:
    return Path(os.environ.get("OPENRESPONSES_SPEC") or SPEC_PATH)


def _openai_spec_path() -> Path:
    return Path(os.environ.get("OPENAI_RESPONSES_SPEC") or OPENAI_SPEC_PATH)


def _patch_openresponses(doc: dict[str, Any]) -> dict[str, Any]:
    # Spec bug: the Response-side JsonSchemaResponseFormat types `schema` as null-only, while the
    # request side (JsonSchemaResponseFormatParam) takes an object and PROTOCOL.md says the
    # format is echoed with its schema. Accept an object too, or every json_schema response fails.
    fmt = doc.get("components", {}).get("schemas", {}).get("JsonSchemaResponseFormat", {})
    prop = fmt.get("properties", {}).get("schema")
    if prop == {"anyOf": [{"type": "null"}]} or (isinstance(prop, dict) and prop.get("anyOf") == [{"type": "null"}]):
        fmt["properties"]["schema"] = {"anyOf": [{"type": "object"}, {"type": "null"}]}
    return doc


def _add_openai_mcp(doc: dict[str, Any]) -> dict[str, Any]:
    """Open Responses has no MCP items or tool (nor file citations); take OpenAI's definitions into its unions."""
    comps = doc.setdefault("components", {}).setdefault("schemas", {})
    openai = _load(str(_openai_spec_path()), False)["components"]["schemas"]

    def copy_refs(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[-1]
                if name not in comps:
                    comps[name] = copy.deepcopy(openai[name])
                    copy_refs(comps[name])
            for v in node.values():
                copy_refs(v)
        elif isinstance(node, list):
            for v in node:
                copy_refs(v)

    for union, names in (
        ("ItemField", OPENAI_ITEM_SCHEMAS),
        ("Tool", OPENAI_TOOL_SCHEMAS),
        ("Annotation", OPENAI_ANNOTATION_SCHEMAS),
    ):
        branches = comps[union]["oneOf"]
        for name in names:
            ref = {"$ref": f"#/components/schemas/{name}"}
            if ref not in branches:
                branches.append(ref)
                copy_refs(ref)
    return doc


@lru_cache(maxsize=4)
def _load(path: str, openresponses: bool) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    return _add_openai_mcp(_patch_openresponses(doc)) if openresponses else doc


class _Cycle(Exception):
    pass


def _inline(node: Any, comps: Mapping[str, Any], stack: tuple[str, ...]) -> Any:
    """Copy of `node` with local $refs inlined and type-discriminated oneOfs turned into
    if/then dispatch. Same meaning, but jsonschema no longer resolves refs or builds errors for
    every losing oneOf branch: about 3x faster here, with errors from the branch that applies."""
    if isinstance(node, list):
        return [_inline(x, comps, stack) for x in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[-1]
        if name in stack:
            raise _Cycle(name)
        target = _inline(comps[name], comps, (*stack, name))
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return {"allOf": [target, _inline(rest, comps, stack)]} if rest else target
    out = {k: _inline(v, comps, stack) for k, v in node.items()}
    branches = out.get("oneOf")
    if isinstance(branches, list) and branches:
        dispatch = _dispatch_on_type(branches)
        if dispatch is not None:
            rest = {k: v for k, v in out.items() if k not in ("oneOf", "discriminator")}
            return {"allOf": [rest, dispatch]} if rest else dispatch
    return out


def _dispatch_on_type(branches: list[Any]) -> dict[str, Any] | None:
    # Only exact when every branch requires `type` and pins it to a distinct single value: then
    # at most one branch can match, so "oneOf" == "type is known and its branch matches".
    consts: list[str] = []
    for b in branches:
        c = _type_const(b) if isinstance(b, dict) else None
        if c is None or "type" not in b.get("required", []) or c in consts:
            return None
        consts.append(c)
    return {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": consts}},
        "allOf": [
            {"if": {"properties": {"type": {"const": c}}, "required": ["type"]}, "then": b}
            for c, b in zip(consts, branches, strict=True)
        ],
    }


@lru_cache(maxsize=256)
def _validator_cached(path: str, openresponses: bool, name: str, skip_response: bool = False) -> Draft202012Validator:
    doc = _load(path, openresponses)
    comps = doc["components"]["schemas"]
    if name not in comps:
        raise KeyError(f"component {name!r} not in {path}")
    try:
        schema = _inline(comps[name], comps, (name,))
    except _Cycle:  # recursive schema: let jsonschema resolve refs lazily
        schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    if skip_response and isinstance(schema.get("properties", {}).get("response"), dict):
        # The embedded Response is validated on its own (validate_response_object) first.
        schema = {**schema, "properties": {**schema["properties"], "response": {"type": "object"}}}
    return Draft202012Validator(schema)


def _validator(name: str, *, openai: bool = False, skip_response: bool = False) -> Draft202012Validator:
    if openai:
        return _validator_cached(str(_openai_spec_path()), False, name, skip_response)
    return _validator_cached(str(_spec_path()), True, name, skip_response)


def _type_const(schema: Mapping[str, Any]) -> str | None:
    t = schema.get("properties", {}).get("type", {})
    if "const" in t:
        return str(t["const"])
    enum = t.get("enum")
    return str(enum[0]) if isinstance(enum, list) and len(enum) == 1 else None


@lru_cache(maxsize=4)
def _event_schema_map(path: str) -> dict[str, str]:
    # The authoritative list is the text/event-stream oneOf of POST /responses; fall back to
    # every *StreamingEvent component if the path layout ever changes.
    doc = _load(path, True)
    comps = doc["components"]["schemas"]
    names: list[str] = []
    try:
        sse = doc["paths"]["/responses"]["post"]["responses"]["200"]["content"]["text/event-stream"]
        names = [ref["$ref"].rsplit("/", 1)[-1] for ref in sse["schema"]["oneOf"]]
    except (KeyError, TypeError):
        names = [n for n in comps if n.endswith("StreamingEvent")]
    out: dict[str, str] = {}
    for name in names:
        t = _type_const(comps[name])
        if t is not None:
            out[t] = name
    return out


@lru_cache(maxsize=4)
def _openai_event_schema_map(path: str) -> dict[str, str]:
    comps = _load(path, False)["components"]["schemas"]
    out: dict[str, str] = {}
    for ref in comps["ResponseStreamEvent"]["anyOf"]:
        name = ref["$ref"].rsplit("/", 1)[-1]
        t = _type_const(comps[name])
        if t is not None:
            out[t] = name
    return out


def event_schema_names() -> dict[str, str]:
    """Event `type` -> schema component name (Open Responses spec, plus OpenAI-only names)."""
    out = dict(_event_schema_map(str(_spec_path())))
    out.update({k: f"openai:{v}" for k, v in OPENAI_ONLY_EVENTS.items()})
    out.update({k: f"sdk:{v}" for k, v in SDK_ONLY_EVENTS.items()})
    return out


@cache
def _sdk_validator(name: str) -> Draft202012Validator:
    import openai.types.responses as sdk_types

    schema = getattr(sdk_types, name).model_json_schema()
    return Draft202012Validator({**schema, "additionalProperties": False})


def _sdk_schema_errors(instance: Any, name: str) -> str | None:
    err = best_match(_sdk_validator(name).iter_errors(instance))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "<root>"
    return f"not valid against the openai SDK's {name} at {where}: {err.message[:300]}"


def _schema_errors(instance: Any, name: str, *, openai: bool = False, skip_response: bool = False) -> str | None:
    v = _validator(name, openai=openai, skip_response=skip_response)
    err = best_match(v.iter_errors(instance))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "<root>"
    spec = "OpenAI" if openai else "Open Responses"
    return f"not valid against {spec} {name} at {where}: {err.message[:300]}"


# ---------------------------------------------------------------------------------------------
# SSE framing
# ---------------------------------------------------------------------------------------------


def _has_loose_whitespace(text: str) -> bool:
    """True if JSON text has whitespace outside string literals (i.e. is not compact)."""
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in " \t\n\r":
            return True
    return False


def _join_chunks(raw: Iterable[bytes | str]) -> str:
    # A frame split across writes can be dropped by some clients (PROTOCOL.md: one write per
    # event), so every chunk must end on a frame boundary.
    parts: list[str] = []
    for n, chunk in enumerate(raw):
        text = _decode(chunk)
        if text and not text.endswith("\n\n"):
            raise StreamViolation("sse-chunk", f"chunk #{n} does not end on a frame boundary: {text[-60:]!r}")
        parts.append(text)
    return "".join(parts)


def _decode(raw: bytes | str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StreamViolation("sse-encoding", f"body is not UTF-8: {exc}") from None


def parse_sse(raw: bytes | str | Iterable[bytes | str]) -> list[dict[str, Any]]:
    """Parse a raw SSE body strictly and return the event dicts (comments skipped).

    Frames are separated by a blank line, lines end in "\\n" only, and each frame is either a
    comment (every line starts with ':') or exactly `event: <type>\\ndata: <compact json>` with
    `<type>` equal to the JSON `type`. The body ends with `data: [DONE]\\n\\n`, nothing after.
    `raw` may also be the sequence of chunks the server wrote; each must end on a frame boundary.
    """
    if isinstance(raw, (bytes, bytearray, memoryview, str)):
        body = _decode(raw if isinstance(raw, str) else bytes(raw))
    else:
        body = _join_chunks(raw)

    if "\r" in body:
        pos = body.index("\r")
        raise StreamViolation(
            "sse-crlf", f"carriage return at offset {pos}: {body[max(0, pos - 40) : pos + 2]!r} (only \\n line endings)"
        )
    if not body.endswith("\n\n"):
        raise StreamViolation("sse-done", f"body does not end with a blank line: {body[-60:]!r}")
    frames = body[:-2].split("\n\n")
    events: list[dict[str, Any]] = []
    done_seen = False
    for n, frame in enumerate(frames):
        if done_seen:
            raise StreamViolation("sse-done", f"frame #{n} after data: [DONE]: {frame[:80]!r}")
        if frame == "":
            raise StreamViolation("sse-framing", f"frame #{n} is empty (extra blank line)")
        lines = frame.split("\n")
        if any(line == "" for line in lines):
            raise StreamViolation("sse-framing", f"frame #{n} contains an empty line: {frame[:80]!r}")
        if all(line.startswith(":") for line in lines):
            continue  # keep-alive / comment
        if lines == ["data: [DONE]"]:
            done_seen = True
            continue
        if len(lines) != 2 or not lines[0].startswith("event: ") or not lines[1].startswith("data: "):
            # Also catches a bare `event: ping` (no data), which crashes the OpenAI SDK.
            raise StreamViolation(
                "sse-framing", f"frame #{n} is not exactly 'event: <type>\\ndata: <json>': {frame[:120]!r}"
            )
        name = lines[0][len("event: ") :]
        data = lines[1][len("data: ") :]
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise StreamViolation("sse-json", f"frame #{n} data is not JSON ({exc}): {data[:120]!r}") from None
        if not isinstance(obj, dict):
            raise StreamViolation("sse-json", f"frame #{n} data is not a JSON object: {data[:80]!r}")
        if _has_loose_whitespace(data):
            raise StreamViolation("sse-compact", f"frame #{n} data is not compact JSON: {data[:120]!r}")
        if name != obj.get("type"):
            raise StreamViolation("sse-event-name", f"frame #{n} 'event: {name}' but JSON type is {obj.get('type')!r}")
        events.append(obj)
    if not done_seen:
        raise StreamViolation("sse-done", "stream does not end with 'data: [DONE]\\n\\n'")
    return events


# ---------------------------------------------------------------------------------------------
# JSON comparison
# ---------------------------------------------------------------------------------------------


def _json_diff(a: Any, b: Any, path: str = "$", limit: int = 5) -> list[str]:
    """Paths where two JSON values differ. bool is never equal to a number (Python's == says
    True == 1); int and float compare numerically."""
    out: list[str] = []

    def walk(x: Any, y: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(x.keys() | y.keys(), key=str):
                if k not in x:
                    out.append(f"{p}.{k}: missing on left")
                elif k not in y:
                    out.append(f"{p}.{k}: missing on right")
                else:
                    walk(x[k], y[k], f"{p}.{k}")
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                out.append(f"{p}: length {len(x)} != {len(y)}")
            for i, (xi, yi) in enumerate(zip(x, y, strict=False)):  # length reported above
                walk(xi, yi, f"{p}[{i}]")
        elif isinstance(x, bool) or isinstance(y, bool):
            if type(x) is not type(y) or x != y:
                out.append(f"{p}: {x!r} != {y!r}")
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if x != y:
                out.append(f"{p}: {x!r} != {y!r}")
        elif type(x) is not type(y) or x != y:
            out.append(f"{p}: {_short(x)} != {_short(y)}")

    walk(a, b, path)
    return out


def _short(v: Any) -> str:
    s = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ---------------------------------------------------------------------------------------------
# Response object
# ---------------------------------------------------------------------------------------------


def validate_response_object(resp: dict[str, Any]) -> None:
    """Validate a Response object against ResponseResource and the PROTOCOL.md extras.

    Extras: every PROTOCOL field present (null allowed, never missing), `text` carries format and
    verbosity, `reasoning` null or both keys, usage shape (and presence on terminal statuses),
    every tool carries type/name/description/parameters/strict, status-dependent fields coherent.
    """
    if not isinstance(resp, dict):
        raise StreamViolation("response-shape", f"Response is not an object: {_short(resp)}")
    missing = [f for f in RESPONSE_FIELDS if f not in resp]
    if missing:
        raise StreamViolation(
            "response-field", f"Response {resp.get('id')!r} lacks {missing} (unknown values are null, never missing)"
        )
    # PROTOCOL-only shape rules first: their messages say more than a oneOf failure does.
    text = resp["text"]
    if not isinstance(text, dict) or "format" not in text or "verbosity" not in text:
        raise StreamViolation("response-field", f"text must carry format and verbosity: {_short(text)}")
    reasoning = resp["reasoning"]
    if reasoning is not None and (not isinstance(reasoning, dict) or not {"effort", "summary"} <= reasoning.keys()):
        raise StreamViolation(
            "response-field", f"reasoning must be null or carry effort and summary: {_short(reasoning)}"
        )
    tools = resp["tools"] if isinstance(resp["tools"], list) else []  # non-list: schema reports
    for n, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") != "function":
            continue  # OpenAI's MCP/namespace/custom/built-in tool shapes, checked by the schema
        absent = [f for f in TOOL_FIELDS if not isinstance(tool, dict) or f not in tool]
        if absent:
            raise StreamViolation("response-field", f"tools[{n}] lacks {absent}")

    err = _schema_errors(resp, "ResponseResource")
    if err:
        raise StreamViolation("schema", f"Response {resp.get('id')!r} {err}")

    status = resp["status"]
    if status not in OPEN_STATUSES | TERMINAL_STATUSES:
        raise StreamViolation("response-status", f"unknown status {status!r}")

    usage = resp["usage"]
    if usage is None:
        if status in TERMINAL_STATUSES:
            raise StreamViolation("usage", f"usage is null on terminal status {status!r}")
    else:
        _check_usage(usage)

    error = resp["error"]
    if status == "failed":
        if not isinstance(error, dict) or not error.get("code") or not error.get("message"):
            raise StreamViolation(
                "response-error", f"failed Response needs error {{code, message}}, got {_short(error)}"
            )
    elif status != "cancelled" and error is not None:
        raise StreamViolation("response-error", f"status {status!r} but error is {_short(error)}")

    details = resp["incomplete_details"]
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason not in INCOMPLETE_REASONS:
            raise StreamViolation(
                "incomplete-details",
                f"incomplete Response needs "
                f"incomplete_details.reason in {sorted(INCOMPLETE_REASONS)}, "
                f"got {_short(details)}",
            )
    elif details is not None:
        raise StreamViolation("incomplete-details", f"status {status!r} but incomplete_details is {_short(details)}")

    # completed_at is known exactly when the response completed; open responses cannot have it.
    if status == "completed" and not _is_int(resp["completed_at"]):
        raise StreamViolation("response-field", "completed Response needs integer completed_at")
    if status in OPEN_STATUSES and resp["completed_at"] is not None:
        raise StreamViolation("response-field", f"status {status!r} but completed_at is set")
    if resp["background"] and not resp["store"]:
        raise StreamViolation("response-field", "background: true requires store: true")

    ids = [item.get("id") for item in resp["output"] if isinstance(item, dict)]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise StreamViolation("item-id", f"duplicate output item ids {sorted(map(str, dupes))}")


def _check_usage(usage: Any) -> None:
    def need_int(obj: Any, key: str, where: str) -> int:
        v = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise StreamViolation("usage", f"usage{where}.{key} must be a non-negative integer, got {_short(v)}")
        return v

    inp = need_int(usage, "input_tokens", "")
    out = need_int(usage, "output_tokens", "")
    total = need_int(usage, "total_tokens", "")
    need_int(usage.get("input_tokens_details"), "cached_tokens", ".input_tokens_details")
    need_int(usage.get("input_tokens_details"), "cache_write_tokens", ".input_tokens_details")
    need_int(usage.get("output_tokens_details"), "reasoning_tokens", ".output_tokens_details")
    # Chat Completions and Responses both define total = input + output; a mismatch is a
    # mapping bug (e.g. reasoning tokens added twice).
    if total != inp + out:
        raise StreamViolation("usage", f"total_tokens {total} != input_tokens {inp} + output_tokens {out}")


# ---------------------------------------------------------------------------------------------
# Event grammar
# ---------------------------------------------------------------------------------------------


@dataclass
class _Part:
    """A content part or a reasoning summary part being streamed."""

    index: int
    type: str | None
    known: bool  # its `added` event was seen (not only a resumed tail)
    added: dict[str, Any] | None = None
    deltas: list[str] = field(default_factory=list)
    annotations: list[Any] = field(default_factory=list)
    text_done: str | None = None
    done_part: dict[str, Any] | None = None

    @property
    def closed(self) -> bool:
        return self.done_part is not None


@dataclass
class _Item:
    index: int
    id: str | None
    type: str | None
    known: bool
    added: dict[str, Any] | None = None
    parts: dict[int, _Part] = field(default_factory=dict)
    next_part: int | None = 0
    summaries: dict[int, _Part] = field(default_factory=dict)
    next_summary: int | None = 0
    args_deltas: list[str] = field(default_factory=list)
    args_done: str | None = None
    done_item: dict[str, Any] | None = None
    mcp_started: bool = False
    mcp_end: str | None = None  # response.mcp_call.completed / .failed, mcp_list_tools.*

    @property
    def closed(self) -> bool:
        return self.done_item is not None


class _Checker:
    def __init__(self, *, background: bool, starting_after: int | None, surface: bool = True) -> None:
        self.background = background
        self.surface = surface
        self.tail = starting_after is not None and starting_after >= 0
        self.next_seq = (starting_after + 1) if starting_after is not None else 0
        self.head = LIFECYCLE_HEAD if background else tuple(t for t in LIFECYCLE_HEAD if t != "response.queued")
        self.items: dict[int, _Item] = {}
        # Index the next output_item.added must use; unknown at the start of a resumed tail.
        self.next_output: int | None = None if self.tail else 0
        self.identity: dict[str, Any] | None = None
        self.pending_error: tuple[int, dict[str, Any]] | None = None
        self.incomplete_item: int | None = None
        self.terminal: dict[str, Any] | None = None
        self.terminal_index: int | None = None
        self.i = -1
        self.seq: Any = None

    # -- helpers ---------------------------------------------------------------------------

    def fail(self, rule: str, detail: str) -> StreamViolation:
        return StreamViolation(rule, detail, index=self.i, sequence_number=self.seq)

    def item_for(self, ev: dict[str, Any]) -> _Item:
        idx = ev["output_index"]
        item = self.items.get(idx)
        if item is None:
            # In a resumed tail the item may have been added before the first event we see;
            # it must then sit below any index added inside the tail.
            first_added = min((k for k, v in self.items.items() if v.known), default=None)
            if self.tail and idx >= 0 and (first_added is None or idx < first_added):
                item = _Item(index=idx, id=ev.get("item_id"), type=None, known=False, next_part=None, next_summary=None)
                self.items[idx] = item
            else:
                raise self.fail(
                    "output-index", f"{ev['type']} uses output_index {idx} before its response.output_item.added"
                )
        if item.closed:
            raise self.fail("output-index", f"{ev['type']} uses output_index {idx} after its response.output_item.done")
        if "item_id" in ev:
            if item.id is None:
                item.id = ev["item_id"]
            elif ev["item_id"] != item.id:
                raise self.fail("item-id", f"item_id {ev['item_id']!r} but output_index {idx} is item {item.id!r}")
        return item

    def part_for(self, item: _Item, ev: dict[str, Any], *, summary: bool = False) -> _Part:
        key = "summary_index" if summary else "content_index"
        table = item.summaries if summary else item.parts
        idx = ev[key]
        part = table.get(idx)
        if part is None:
            nxt = item.next_summary if summary else item.next_part
            if not item.known and (nxt is None or idx < nxt):
                # Part opened before a resumed tail began: history unknown, check what we can.
                part = _Part(index=idx, type=None, known=False)
                table[idx] = part
            else:
                added = "response.reasoning_summary_part.added" if summary else "response.content_part.added"
                raise self.fail("delta-order", f"{ev['type']} for {key} {idx} of item {item.id!r} before its {added}")
        return part

    # -- entry points ----------------------------------------------------------------------

    def feed(self, i: int, ev: Any) -> None:
        self.i = i
        self.seq = ev.get("sequence_number") if isinstance(ev, dict) else None
        if not isinstance(ev, dict):
            raise self.fail("event-shape", f"event is not an object: {_short(ev)}")
        etype = ev.get("type")
        if not isinstance(etype, str):
            raise self.fail("event-shape", f"event has no string type: {_short(ev)}")
        if not _is_int(self.seq):
            raise self.fail("sequence", f"{etype} has no integer sequence_number")
        if self.seq != self.next_seq:
            raise self.fail("sequence", f"expected sequence_number {self.next_seq}, got {self.seq}")
        self.next_seq += 1
        if self.terminal is not None:
            raise self.fail("terminal-last", f"{etype} after the terminal event (event #{self.terminal_index})")
        if etype.startswith("gateway:"):
            return  # custom events: clients ignore them; only their numbering matters
        if self.pending_error is not None and etype != "response.failed":
            raise self.fail("error-placement", f"{etype} after an error event; only response.failed may follow it")

        if etype in _RESPONSE_EVENTS and isinstance(ev.get("response"), dict):
            # Checked before the event schema so a bad Response is reported by its own rule
            # rather than as an opaque failure of the wrapping event.
            try:
                validate_response_object(ev["response"])
            except StreamViolation as exc:
                raise self.fail(exc.rule, f"{etype}.response: {exc.detail}") from None
        self.check_schema(etype, ev)
        if self.surface and etype not in _SENT_BY_THE_GATEWAY:
            # responses_api/protocol/surface.py says which events the gateway sends: every
            # stream a test validates checks the claim (after the schema: an event no
            # specification knows is reported as such first).
            entry = SERVER_EVENTS.get(etype)
            said = f"classified '{entry.treatment}' ({entry.note})" if entry else "not classified"
            raise self.fail("surface", f"{etype} is {said} in protocol/surface.py, yet the gateway sent it")

        pos = self.seq
        if pos < len(self.head):
            if etype != self.head[pos]:
                raise self.fail("order", f"sequence_number {pos} must be {self.head[pos]}, got {etype}")
        elif etype in LIFECYCLE_HEAD:
            raise self.fail(
                "order",
                f"{etype} out of place (lifecycle head is "
                f"{list(self.head)} at sequence_numbers 0..{len(self.head) - 1})",
            )

        handler = _HANDLERS.get(etype)
        if handler is not None:
            handler(self, ev)

    def check_schema(self, etype: str, ev: dict[str, Any]) -> None:
        name = _event_schema_map(str(_spec_path())).get(etype)
        if name is not None:
            err = _schema_errors(ev, name, skip_response=etype in _RESPONSE_EVENTS)
        elif etype in OPENAI_ONLY_EVENTS:
            err = _schema_errors(ev, OPENAI_ONLY_EVENTS[etype], openai=True)
        elif etype in SDK_ONLY_EVENTS:
            err = _sdk_schema_errors(ev, SDK_ONLY_EVENTS[etype])
        else:
            raise self.fail("unknown-type", f"unknown event type {etype!r} (custom events need the 'gateway:' prefix)")
        if err:
            raise self.fail("schema", f"{etype} {err}")
        if CHECK_OPENAI_EVENT_SCHEMAS and etype not in _RESPONSE_EVENTS:
            oname = _openai_event_schema_map(str(_openai_spec_path())).get(etype)
            err = _schema_errors(ev, oname, openai=True) if oname else None
            if err:
                raise self.fail("schema-openai", f"{etype} {err}")

    def check_response(self, ev: dict[str, Any]) -> dict[str, Any]:
        resp: dict[str, Any] = ev["response"]  # already through validate_response_object
        if resp["background"] is not self.background:
            raise self.fail(
                "background", f"response.background is {resp['background']!r}, expected {self.background!r}"
            )
        # Fields fixed at creation must not drift between lifecycle snapshots (the OpenAI SDK
        # raises on a changed id).
        identity = {k: resp[k] for k in ("id", "created_at", "previous_response_id", "background")}
        if self.identity is None:
            self.identity = identity
        else:
            diff = _json_diff(self.identity, identity, "response")
            if diff:
                raise self.fail("response-identity", f"lifecycle snapshot changed: {diff}")
        return resp

    # -- lifecycle -------------------------------------------------------------------------

    def on_head(self, ev: dict[str, Any]) -> None:
        resp = self.check_response(ev)
        etype = ev["type"]
        if etype == "response.created":
            want = "queued" if self.background else "in_progress"
        elif etype == "response.queued":
            want = "queued"
        else:
            want = "in_progress"
        if resp["status"] != want:
            raise self.fail("lifecycle-status", f"{etype} with response.status {resp['status']!r}, expected {want!r}")
        # All head events precede the first item, so their snapshots have nothing to show.
        if resp["output"] != []:
            raise self.fail(
                "lifecycle-output", f"{etype} response.output must be [], got {len(resp['output'])} item(s)"
            )

    def on_terminal(self, ev: dict[str, Any]) -> None:
        etype = ev["type"]
        resp = self.check_response(ev)
        status = resp["status"]
        if status not in TERMINAL_EVENT_STATUSES[etype]:
            raise self.fail("terminal-status", f"{etype} with response.status {status!r}")
        if self.incomplete_item is not None and etype != "response.incomplete":
            raise self.fail(
                "incomplete-item",
                f"item at output_index {self.incomplete_item} ended incomplete but the response ends with {etype}",
            )
        strict = etype != "response.failed"  # failed/cancelled may cut items short
        if strict:
            open_items = [k for k, it in sorted(self.items.items()) if not it.closed]
            if open_items:
                raise self.fail(
                    "item-open", f"{etype} while output_index {open_items} not closed by response.output_item.done"
                )
        output = resp["output"]
        done = {k: it.done_item for k, it in self.items.items() if it.done_item is not None}
        if self.tail:
            top = max(self.items, default=-1)
            if strict and len(output) <= top:
                raise self.fail(
                    "terminal-output", f"response.output has {len(output)} items but the stream used output_index {top}"
                )
        else:
            want_len = len(self.items)
            if strict and len(output) != want_len:
                raise self.fail("terminal-output", f"response.output has {len(output)} items, {want_len} were streamed")
            if not strict and not len(done) <= len(output) <= want_len:
                raise self.fail(
                    "terminal-output",
                    f"response.output has {len(output)} items; {len(done)} closed and {want_len} added",
                )
        for k, item in sorted(done.items()):
            if k < len(output):
                diff = _json_diff(item, output[k], f"output[{k}]")
                if diff:
                    raise self.fail(
                        "terminal-output", f"response.output differs from response.output_item.done: {diff}"
                    )
            elif strict:
                raise self.fail("terminal-output", f"response.output lacks item {k}")
        self.pending_error = None
        self.terminal = resp
        self.terminal_index = self.i

    def on_error(self, ev: dict[str, Any]) -> None:
        nested = ev["error"]
        for key in ("code", "message", "param"):
            if nested.get(key) != ev.get(key):
                raise self.fail(
                    "error-event",
                    f"error.{key} {nested.get(key)!r} != flat {key} {ev.get(key)!r} (both shapes must agree)",
                )
        self.pending_error = (self.i, ev)

    # -- items -----------------------------------------------------------------------------

    def on_item_added(self, ev: dict[str, Any]) -> None:
        idx = ev["output_index"]
        item = ev["item"]
        if not isinstance(item, dict):
            raise self.fail("item-added", "response.output_item.added without an item")
        if self.incomplete_item is not None:
            raise self.fail(
                "incomplete-item",
                f"item added after output_index {self.incomplete_item} ended incomplete (it must be the last)",
            )
        if self.next_output is None:
            # First item of a resumed tail: must come after every item the tail already touched.
            floor = max(self.items, default=-1) + 1
            if idx < floor:
                raise self.fail(
                    "output-index", f"output_item.added at {idx}, but output_index {floor - 1} is already in use"
                )
            self.next_output = idx
        if idx != self.next_output:
            raise self.fail(
                "output-index",
                f"output_item.added at output_index {idx}, expected "
                f"{self.next_output} (dense from 0 in order of addition)",
            )
        self.next_output += 1
        itype, iid = item.get("type"), item.get("id")
        if any(it.id == iid for it in self.items.values()):
            raise self.fail("item-id", f"item id {iid!r} reused")
        if itype not in _STATUSLESS_ITEMS and item.get("status") != "in_progress":
            raise self.fail("item-added", f"added {itype} item status {item.get('status')!r}, expected 'in_progress'")
        if itype == "message":
            if item.get("role") != "assistant" or item.get("content") != []:
                raise self.fail(
                    "item-added",
                    "added message must have role 'assistant' and "
                    f"content [], got role {item.get('role')!r}, content "
                    f"{_short(item.get('content'))}",
                )
        elif itype == "function_call":
            if item.get("arguments") != "":
                raise self.fail(
                    "item-added",
                    'added function_call must have arguments "" (they '
                    f"stream as deltas), got {_short(item.get('arguments'))}",
                )
        elif itype == "mcp_call" and (
            item.get("arguments") != "" or item.get("output") is not None or item.get("error") is not None
        ):
            raise self.fail("item-added", 'added mcp_call must have arguments "" and no output or error yet')
        elif itype == "mcp_list_tools" and item.get("tools") != []:
            raise self.fail("item-added", "added mcp_list_tools must have tools [] (they arrive with output_item.done)")
        elif itype == "custom_tool_call" and item.get("input") != "":
            raise self.fail(
                "item-added", 'added custom_tool_call must have input "" (it streams as custom_tool_call_input deltas)'
            )
        elif itype == "reasoning" and (item.get("summary") != [] or item.get("content", []) != []):
            raise self.fail(
                "item-added", "added reasoning item must have summary [] and no content (they stream as parts)"
            )
        self.items[idx] = _Item(index=idx, id=iid, type=itype, known=True, added=copy.deepcopy(item))

    def on_item_done(self, ev: dict[str, Any]) -> None:
        item = ev["item"]
        if not isinstance(item, dict):
            raise self.fail("item-done", "response.output_item.done without an item")
        st = self.item_for({**ev, "item_id": item.get("id")})
        itype = item.get("type")
        if st.type is not None and itype != st.type:
            raise self.fail("item-done", f"item type changed from {st.type!r} to {itype!r}")
        status = item.get("status")
        final_statuses = (
            ("completed", "incomplete", "failed")
            if itype in ("mcp_call", "web_search_call", "file_search_call")
            else ("completed", "incomplete")
        )
        if itype not in _STATUSLESS_ITEMS and status not in final_statuses:
            raise self.fail("item-done", f"done item status {status!r}, expected one of {list(final_statuses)}")
        if st.added is not None:
            keep = {
                "message": ("role",),
                "function_call": ("name", "call_id"),
                "mcp_call": ("name", "server_label"),
                "mcp_list_tools": ("server_label",),
                "mcp_approval_request": ("name", "server_label"),
            }.get(itype or "", ())
            for key in keep:
                if item.get(key) != st.added.get(key):
                    raise self.fail(
                        "item-done", f"{itype}.{key} changed from {st.added.get(key)!r} to {item.get(key)!r}"
                    )
        for table, what in ((st.parts, "content part"), (st.summaries, "summary part")):
            still_open = [k for k, p in sorted(table.items()) if not p.closed]
            if still_open:
                raise self.fail("part-open", f"output_item.done while {what} {still_open} of item {st.id!r} not done")
        if itype in _ITEM_PART_TYPES:
            self.compare_parts(st, st.parts, item.get("content", []), "content")
        else:
            if st.parts:
                raise self.fail("content-part", f"{itype} item had content parts")
        if itype == "reasoning":
            self.compare_parts(st, st.summaries, item.get("summary"), "summary")
        if itype == "function_call":
            if st.known and st.args_done is None:
                raise self.fail(
                    "function-args", "output_item.done for a function_call before response.function_call_arguments.done"
                )
            if st.args_done is not None and item.get("arguments") != st.args_done:
                raise self.fail(
                    "function-args",
                    f"final arguments {_short(item.get('arguments'))} "
                    f"!= function_call_arguments.done {_short(st.args_done)}",
                )
        if itype == "custom_tool_call" and st.known:
            if st.args_done is None:
                raise self.fail(
                    "custom-input",
                    "output_item.done for a custom_tool_call before response.custom_tool_call_input.done",
                )
            if item.get("input") != st.args_done:
                raise self.fail(
                    "custom-input",
                    f"final input {_short(item.get('input'))} != custom_tool_call_input.done {_short(st.args_done)}",
                )
        if itype in _CLIENT_CALL_ITEMS and st.added is not None and item.get("call_id") != st.added.get("call_id"):
            raise self.fail("item-done", f"{itype}.call_id changed")
        if (
            itype in ("web_search_call", "file_search_call")
            and st.known
            and status == "completed"
            and st.mcp_end != f"response.{itype}.completed"
        ):
            raise self.fail(
                "hosted-call", f"{itype} done completed after {st.mcp_end!r}, expected response.{itype}.completed"
            )
        if itype == "mcp_call" and st.known:
            if st.args_done is None:
                raise self.fail("mcp-call", "output_item.done for an mcp_call before response.mcp_call_arguments.done")
            if item.get("arguments") != st.args_done:
                raise self.fail(
                    "mcp-call",
                    f"final arguments {_short(item.get('arguments'))} "
                    f"!= mcp_call_arguments.done {_short(st.args_done)}",
                )
            want = {"completed": "response.mcp_call.completed", "failed": "response.mcp_call.failed"}.get(status or "")
            if want is not None and st.mcp_end != want:
                raise self.fail(
                    "mcp-call", f"mcp_call done with status {status!r} after {st.mcp_end!r}, expected {want}"
                )
            if status == "completed" and (item.get("output") is None or item.get("error")):
                raise self.fail("mcp-call", "completed mcp_call needs output and no error")
            if status == "failed" and not item.get("error"):
                raise self.fail("mcp-call", "failed mcp_call needs an error")
        if itype == "compaction" and not item.get("encrypted_content"):
            raise self.fail("compaction", "compaction item done without its encrypted_content")
        if itype == "mcp_list_tools" and st.known:
            want = "response.mcp_list_tools.failed" if item.get("error") else ("response.mcp_list_tools.completed")
            if st.mcp_end != want:
                raise self.fail("mcp-list", f"mcp_list_tools done after {st.mcp_end!r}, expected {want}")
        if status == "incomplete":
            top = max(self.items)
            if st.index != top:
                raise self.fail(
                    "incomplete-item", f"incomplete item at output_index {st.index} is not the last item ({top})"
                )
            self.incomplete_item = st.index
        st.type = itype
        st.done_item = copy.deepcopy(item)

    def compare_parts(self, st: _Item, parts: dict[int, _Part], final: Any, key: str) -> None:
        final = final if isinstance(final, list) else []
        if st.known and len(final) != len(parts):
            raise self.fail("item-content", f"done item {key} has {len(final)} part(s), {len(parts)} were streamed")
        for k, part in sorted(parts.items()):
            if k >= len(final):
                raise self.fail("item-content", f"done item {key} lacks part {k}")
            diff = _json_diff(part.done_part, final[k], f"item.{key}[{k}]")
            if diff:
                raise self.fail("item-content", f"done item {key} differs from the done part: {diff}")

    # -- content parts ---------------------------------------------------------------------

    def on_part_added(self, ev: dict[str, Any], *, summary: bool = False) -> None:
        st = self.item_for(ev)
        key = "summary_index" if summary else "content_index"
        part = ev["part"]
        ptype = part.get("type")
        if summary:
            if st.type not in (None, "reasoning") or ptype != "summary_text":
                raise self.fail("summary", f"summary part {ptype!r} on {st.type!r} item")
            table, nxt = st.summaries, st.next_summary
        else:
            allowed = _ITEM_PART_TYPES.get(st.type or "", frozenset()) if st.type else None
            if allowed is not None and ptype not in allowed:
                raise self.fail("content-part", f"{ptype!r} content part on a {st.type!r} item")
            table, nxt = st.parts, st.next_part
        idx = ev[key]
        if nxt is None:  # item from before a resumed tail: density is checkable from here on
            nxt = max(table, default=-1) + 1 if table else idx
        if idx != nxt:
            raise self.fail(
                "content-index" if not summary else "summary", f"{key} {idx}, expected {nxt} (dense from 0)"
            )
        open_parts = [k for k, p in table.items() if not p.closed]
        if open_parts:
            raise self.fail("part-open", f"new part {idx} while part {open_parts} still open")
        text_field = _PART_TEXT_FIELD.get(ptype or "")
        if text_field and part.get(text_field) != "":
            raise self.fail(
                "part-added",
                f"added {ptype} part must start empty (its text streams as deltas), got {_short(part.get(text_field))}",
            )
        if ptype == "output_text" and part.get("annotations") != []:
            raise self.fail("part-added", "added output_text part must have annotations []")
        table[idx] = _Part(index=idx, type=ptype, known=True, added=copy.deepcopy(part))
        if summary:
            st.next_summary = idx + 1
        else:
            st.next_part = idx + 1

    def open_part(
        self, ev: dict[str, Any], *, summary: bool = False, want_type: str | None = None
    ) -> tuple[_Item, _Part]:
        st = self.item_for(ev)
        if summary and st.type not in (None, "reasoning"):
            raise self.fail("summary", f"{ev['type']} on a {st.type!r} item")
        if not summary and st.type is not None and st.type not in _ITEM_PART_TYPES:
            raise self.fail("content-part", f"{ev['type']} on a {st.type!r} item (no content parts)")
        part = self.part_for(st, ev, summary=summary)
        if part.closed:
            raise self.fail("delta-order", f"{ev['type']} after its part was done")
        if want_type is not None:
            if part.type is None:
                part.type = want_type
            elif part.type != want_type:
                raise self.fail("content-part", f"{ev['type']} on a {part.type!r} part")
        return st, part

    def on_text_delta(self, ev: dict[str, Any], *, summary: bool = False) -> None:
        want = "summary_text" if summary else _TEXT_DELTAS[ev["type"]]
        _, part = self.open_part(ev, summary=summary, want_type=want)
        if part.text_done is not None:
            raise self.fail("delta-order", f"{ev['type']} after the part's text was done")
        part.deltas.append(ev["delta"])

    def on_text_done(self, ev: dict[str, Any], *, summary: bool = False) -> None:
        want, fld = ("summary_text", "text") if summary else _TEXT_DONES[ev["type"]]
        _, part = self.open_part(ev, summary=summary, want_type=want)
        if part.text_done is not None:
            raise self.fail("delta-order", f"second {ev['type']} for the same part")
        text = ev[fld]
        joined = "".join(part.deltas)
        ok = text == joined if part.known else text.endswith(joined)
        if not ok:
            raise self.fail(
                "text-mismatch", f"{ev['type']}.{fld} {_short(text)} != concatenated deltas {_short(joined)}"
            )
        part.text_done = text

    def on_annotation(self, ev: dict[str, Any]) -> None:
        # Allowed until content_part.done (citations may arrive after the text is complete).
        _, part = self.open_part(ev, want_type="output_text")
        if part.known and ev["annotation_index"] != len(part.annotations):
            raise self.fail(
                "content-index", f"annotation_index {ev['annotation_index']}, expected {len(part.annotations)}"
            )
        part.annotations.append(ev["annotation"])

    def on_part_done(self, ev: dict[str, Any], *, summary: bool = False) -> None:
        ptype = ev["part"].get("type")
        _, part = self.open_part(ev, summary=summary)
        if part.type is not None and ptype != part.type:
            raise self.fail("part-mismatch", f"done part type {ptype!r}, added as {part.type!r}")
        part.type = ptype
        saw_stream = part.known or bool(part.deltas)
        if part.text_done is None and saw_stream:
            done_name = (
                "response.reasoning_summary_text.done"
                if summary
                else {"output_text": "response.output_text.done", "refusal": "response.refusal.done"}.get(
                    ptype or "", "reasoning text done"
                )
            )
            raise self.fail("delta-order", f"part done before its {done_name}")
        fld = _PART_TEXT_FIELD.get(ptype or "")
        if fld and part.text_done is not None and ev["part"].get(fld) != part.text_done:
            raise self.fail(
                "part-mismatch",
                f"done part {fld} {_short(ev['part'].get(fld))} != streamed text {_short(part.text_done)}",
            )
        if ptype == "output_text" and part.known:
            diff = _json_diff(ev["part"].get("annotations"), part.annotations, "part.annotations")
            if diff:
                raise self.fail("part-mismatch", f"done part annotations differ from the added ones: {diff}")
        part.done_part = copy.deepcopy(ev["part"])

    # -- function calls ---------------------------------------------------------------------

    def on_args_delta(self, ev: dict[str, Any]) -> None:
        st = self.item_for(ev)
        if st.type not in (None, "function_call"):
            raise self.fail("function-args", f"arguments delta on a {st.type!r} item")
        if st.args_done is not None:
            raise self.fail("function-args", "arguments delta after function_call_arguments.done")
        st.args_deltas.append(ev["delta"])

    def on_args_done(self, ev: dict[str, Any]) -> None:
        st = self.item_for(ev)
        if st.type not in (None, "function_call"):
            raise self.fail("function-args", f"arguments done on a {st.type!r} item")
        if st.args_done is not None:
            raise self.fail("function-args", "second function_call_arguments.done")
        joined = "".join(st.args_deltas)
        args = ev["arguments"]
        if not (args == joined if st.known else args.endswith(joined)):
            raise self.fail("function-args", f"arguments {_short(args)} != concatenated deltas {_short(joined)}")
        st.args_done = args

    def on_custom_input_delta(self, ev: dict[str, Any]) -> None:
        st = self.item_for(ev)
        if st.type not in (None, "custom_tool_call"):
            raise self.fail("custom-input", f"custom input delta on a {st.type!r} item")
        if st.args_done is not None:
            raise self.fail("custom-input", "input delta after custom_tool_call_input.done")
        st.args_deltas.append(ev["delta"])

    def on_custom_input_done(self, ev: dict[str, Any]) -> None:
        st = self.item_for(ev)
        if st.type not in (None, "custom_tool_call"):
            raise self.fail("custom-input", f"custom input done on a {st.type!r} item")
        if st.args_done is not None:
            raise self.fail("custom-input", "second custom_tool_call_input.done")
        joined = "".join(st.args_deltas)
        if not (ev["input"] == joined if st.known else ev["input"].endswith(joined)):
            raise self.fail("custom-input", f"input {_short(ev['input'])} != concatenated deltas {_short(joined)}")
        st.args_done = ev["input"]

    def on_compacting(self, ev: dict[str, Any]) -> None:
        """`response.compaction.compacting`: on an added compaction item, before its done."""
        st = self.item_for(ev)
        if st.type not in (None, "compaction"):
            raise self.fail("compaction", f"response.compaction.compacting on a {st.type!r} item")
        st.mcp_started = True

    def on_hosted_stage(self, ev: dict[str, Any]) -> None:
        itype, stage = ev["type"].removeprefix("response.").rsplit(".", 1)
        st = self.item_for(ev)
        if st.type not in (None, itype):
            raise self.fail("hosted-call", f"{ev['type']} on a {st.type!r} item")
        if st.closed:
            raise self.fail("hosted-call", f"{ev['type']} after the item's output_item.done")
        order = _HOSTED_CALL_STAGES
        last = st.mcp_end.rsplit(".", 1)[1] if st.mcp_end else None
        if st.known and order.index(stage) != (order.index(last) + 1 if last else 0):
            raise self.fail("hosted-call", f"{ev['type']} after {st.mcp_end!r}")
        st.mcp_end = ev["type"]

    # -- MCP ---------------------------------------------------------------------------------

    def mcp_item(self, ev: dict[str, Any], itype: str) -> _Item:
        st = self.item_for(ev)
        if st.type not in (None, itype):
            raise self.fail("mcp-event", f"{ev['type']} on a {st.type!r} item")
        if st.mcp_end is not None:
            raise self.fail("mcp-event", f"{ev['type']} after {st.mcp_end}")
        return st

    def on_mcp_in_progress(self, ev: dict[str, Any]) -> None:
        itype = "mcp_list_tools" if "mcp_list_tools" in ev["type"] else "mcp_call"
        st = self.mcp_item(ev, itype)
        if st.mcp_started:
            raise self.fail("mcp-event", f"second {ev['type']}")
        st.mcp_started = True

    def on_mcp_end(self, ev: dict[str, Any]) -> None:
        itype = "mcp_list_tools" if "mcp_list_tools" in ev["type"] else "mcp_call"
        st = self.mcp_item(ev, itype)
        if st.known and not st.mcp_started:
            raise self.fail("mcp-event", f"{ev['type']} before its .in_progress")
        if itype == "mcp_call" and st.known and st.args_done is None:
            raise self.fail("mcp-event", f"{ev['type']} before response.mcp_call_arguments.done")
        st.mcp_end = ev["type"]

    def on_mcp_args_delta(self, ev: dict[str, Any]) -> None:
        st = self.mcp_item(ev, "mcp_call")
        if st.args_done is not None:
            raise self.fail("mcp-call", "arguments delta after mcp_call_arguments.done")
        st.args_deltas.append(ev["delta"])

    def on_mcp_args_done(self, ev: dict[str, Any]) -> None:
        st = self.mcp_item(ev, "mcp_call")
        if st.args_done is not None:
            raise self.fail("mcp-call", "second mcp_call_arguments.done")
        joined = "".join(st.args_deltas)
        if not (ev["arguments"] == joined if st.known else ev["arguments"].endswith(joined)):
            raise self.fail("mcp-call", f"arguments {_short(ev['arguments'])} != concatenated deltas {_short(joined)}")
        st.args_done = ev["arguments"]

    # -- end -------------------------------------------------------------------------------

    def finish(self, final_response: dict[str, Any] | None) -> dict[str, Any]:
        self.i, self.seq = None, None  # type: ignore[assignment]  # spent: a later use fails loudly
        if self.pending_error is not None:
            self.i, ev = self.pending_error
            self.seq = ev.get("sequence_number")
            raise self.fail("error-placement", "error event not followed by response.failed")
        if self.terminal is None:
            raise StreamViolation(
                "terminal-missing", "no response.completed / response.incomplete / response.failed event"
            )
        if final_response is not None:
            try:
                validate_response_object(final_response)
            except StreamViolation as exc:
                raise StreamViolation(exc.rule, f"final_response: {exc.detail}") from None
            diff = _json_diff(self.terminal, final_response, "response")
            if diff:
                raise StreamViolation("final-response", f"retrieved Response differs from the terminal event's: {diff}")
        return self.terminal


_HANDLERS: dict[str, Any] = {
    "response.created": _Checker.on_head,
    "response.queued": _Checker.on_head,
    "response.in_progress": _Checker.on_head,
    "response.completed": _Checker.on_terminal,
    "response.incomplete": _Checker.on_terminal,
    "response.failed": _Checker.on_terminal,
    "error": _Checker.on_error,
    "response.output_item.added": _Checker.on_item_added,
    "response.output_item.done": _Checker.on_item_done,
    "response.content_part.added": _Checker.on_part_added,
    "response.content_part.done": _Checker.on_part_done,
    "response.reasoning_summary_part.added": lambda c, ev: c.on_part_added(ev, summary=True),
    "response.reasoning_summary_part.done": lambda c, ev: c.on_part_done(ev, summary=True),
    "response.reasoning_summary_text.delta": lambda c, ev: c.on_text_delta(ev, summary=True),
    "response.reasoning_summary_text.done": lambda c, ev: c.on_text_done(ev, summary=True),
    "response.output_text.annotation.added": _Checker.on_annotation,
    "response.function_call_arguments.delta": _Checker.on_args_delta,
    "response.function_call_arguments.done": _Checker.on_args_done,
    "response.mcp_list_tools.in_progress": _Checker.on_mcp_in_progress,
    "response.mcp_list_tools.completed": _Checker.on_mcp_end,
    "response.mcp_list_tools.failed": _Checker.on_mcp_end,
    "response.mcp_call.in_progress": _Checker.on_mcp_in_progress,
    "response.mcp_call_arguments.delta": _Checker.on_mcp_args_delta,
    "response.mcp_call_arguments.done": _Checker.on_mcp_args_done,
    "response.mcp_call.completed": _Checker.on_mcp_end,
    "response.mcp_call.failed": _Checker.on_mcp_end,
    **{
        f"response.{kind}.{stage}": _Checker.on_hosted_stage
        for kind in ("web_search_call", "file_search_call")
        for stage in _HOSTED_CALL_STAGES
    },
    "response.compaction.compacting": _Checker.on_compacting,
    "response.custom_tool_call_input.delta": _Checker.on_custom_input_delta,
    "response.custom_tool_call_input.done": _Checker.on_custom_input_done,
    **{t: _Checker.on_text_delta for t in _TEXT_DELTAS},
    **{t: _Checker.on_text_done for t in _TEXT_DONES},
}


def validate_events(
    events: list[dict[str, Any]],
    *,
    background: bool = False,
    final_response: dict[str, Any] | None = None,
    starting_after: int | None = None,
    surface: bool = True,
) -> dict[str, Any]:
    """Check one response's event sequence strictly; return the terminal event's Response.

    `background`: expect `response.queued` between created and in_progress, created `queued`.
    `final_response`: a Response fetched afterwards (GET /v1/responses/{id}); must equal the
    terminal one exactly. `starting_after`: `events` is a resumed tail whose first
    sequence_number is starting_after + 1; history before it is unknown, so only what the
    tail itself shows is checked (it must still end with the terminal event). `surface`: also
    check each event is one protocol/surface.py says the gateway sends (off only for streams
    that are the specification's, not the gateway's).
    """
    checker = _Checker(background=background, starting_after=starting_after, surface=surface)
    for i, ev in enumerate(events):
        checker.feed(i, ev)
    return checker.finish(final_response)


def validate_sse(raw: bytes | str | Iterable[bytes | str], **kw: Any) -> dict[str, Any]:
    """`parse_sse` then `validate_events(**kw)`; returns the terminal Response."""
    return validate_events(parse_sse(raw), **kw)
