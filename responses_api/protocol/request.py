"""Validate a `POST /v1/responses` body into a typed `CreateRequest`.

Every error names the offending field in `param`, JSON-pointer style
(`input[2].content`). What each field gets is classified in protocol/surface.py: unknown
top-level fields are accepted (a newer SDK keeps working) and, with the known fields the
route does not apply, named in `x-gateway-ignored-fields`; refused ones (`messages` and the
other Chat Completions names, `stream_id`) are a 400 naming them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from .compaction import COMPACTION_INSTRUCTIONS
from .errors import InvalidRequest
from .items import normalize_input
from .mcp_tools import McpTool, normalize_mcp_tools
from .surface import REFUSED_REQUEST_FIELDS, unapplied_candidates
from .tool_search import check_deferred, search_tool
from .tools import HostedTool, Tool, hosted_tools, normalize_tool_choice, normalize_tools

KNOWN_INCLUDES = frozenset(
    {
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "code_interpreter_call.outputs",
    }
)
REASONING_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh"})
REASONING_SUMMARIES = frozenset({"auto", "concise", "detailed"})
VERBOSITIES = frozenset({"low", "medium", "high"})
# Route names (models.ModelRoute.name) are at most this long: a longer model names none.
MODEL_MAX_CHARS = 200
SERVICE_TIERS = frozenset({"auto", "default", "flex", "priority", "scale", "fast", "ultrafast"})
PROMPT_CACHE_RETENTIONS = frozenset({"in_memory", "24h"})
PROMPT_CACHE_MODES = frozenset({"implicit", "explicit"})
# `background_options.completion_window`: `soonest` is an ordinary background run; `2h` and
# `8h` are the lower-priority classes (their own worker queues and time limits:
# orchestration/windows.py). OpenAI's SDK (3.53+) lists the same three.
COMPLETION_WINDOWS = ("soonest", "2h", "8h")
# `background_options.continuation_id`: an opaque client label, stored with the response (the
# column's length).
CONTINUATION_ID_MAX_CHARS = 512


@dataclass(slots=True, frozen=True)
class CreateRequest:
    model: str
    input_items: list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | None = None  # a conversation id: its items are the context, its end is appended
    store: bool = True
    background: bool = False
    stream: bool = False
    tools: list[Tool] = field(default_factory=list)
    mcp_tools: list[McpTool] = field(default_factory=list)
    hosted_tools: list[HostedTool] = field(default_factory=list)  # web_search, ...: the route decides
    # Hosted tools sent on to a native Responses upstream that runs them itself (as the client sent them).
    upstream_hosted_tools: list[dict[str, Any]] = field(default_factory=list)
    dropped_tools: list[str] = field(default_factory=list)  # hosted tool types the route did not serve
    # Fields sent that some upstream kind does not apply, or that nothing classifies
    # (surface.unapplied_candidates); planning keeps those the route's kinds do not apply.
    unapplied_candidates: tuple[str, ...] = ()
    ignored_fields: list[str] = field(default_factory=list)  # named in x-gateway-ignored-fields
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    top_logprobs: int | None = None
    truncation: str = "disabled"
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}, "verbosity": "medium"})
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    include: list[str] = field(default_factory=list)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    # `prompt_cache_options` as an upstream may take it: mode, ttl, comparison_response_id (its
    # `prewarm` is the gateway's: `generate` below).
    prompt_cache_options: dict[str, Any] | None = None
    service_tier: str | None = None
    # `context_management: [{"type": "compaction", "compact_threshold": N}]`: compact first when a
    # model call's context passes N tokens (engine/autocompact.py). 0: at the route's window.
    compact_threshold: int | None = None
    # The input ended with a `compaction_trigger` (taken off `input_items`): the answer is one
    # `compaction` item summarising the context (compaction v2, Codex's remote compaction).
    compact: bool = False
    # False (`generate: false`, or `prompt_cache_options.prewarm: true`): prepare the context,
    # call no model; the response completes with no output (Codex's WebSocket warm-up).
    generate: bool = True
    # The reusable prompt applied (`{id, version, variables}`, echoed in the Response): set by
    # the create flow once it applied one (orchestration/prompts.py), never by the parser.
    prompt: dict[str, Any] | None = None
    # `background_options`: stored with the response, not echoed in it (no field of the Response
    # object carries them). The window picks a background run's queue and time limit.
    completion_window: str = "soonest"
    continuation_id: str | None = None


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), type(value).__name__)


T = TypeVar("T")


@overload
def expect(value: Any, kind: type[T], param: str, what: str) -> T: ...
@overload
def expect(value: Any, kind: tuple[type, ...], param: str, what: str) -> Any: ...
def expect(value: Any, kind: type | tuple[type, ...], param: str, what: str) -> Any:
    """`value`, if it is a `kind` (never a bool where a number is meant); else a 400 naming `param`."""
    # bool is an int subclass; never accept it where a number is expected.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise InvalidRequest(f"Invalid type for '{param}': expected {what}, got a boolean.", param=param)
    if not isinstance(value, kind):
        raise InvalidRequest(f"Invalid type for '{param}': expected {what}, got {_type_name(value)}.", param=param)
    return value


# The numbers a create request may set: (lowest, highest, integer only). The OpenAPI document
# states the same bounds (api/openapi.py reads this table).
NUMBER_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "max_output_tokens": (16, 10_000_000, True),  # OpenAI's floor: below 16 is a 400 there too
    "max_tool_calls": (1, 10_000, True),
    "temperature": (0, 2, False),
    "top_p": (0, 1, False),
    "presence_penalty": (-2, 2, False),
    "frequency_penalty": (-2, 2, False),
    "top_logprobs": (0, 20, True),
}
# The strings a create request may set, with their longest length (the stored columns' or the
# upstreams'); the document states them too.
STRING_BOUNDS: dict[str, int] = {
    "previous_response_id": 128,
    "user": 512,
    "safety_identifier": 512,
    "prompt_cache_key": 1024,
}


def _optional_number(body: dict[str, Any], name: str) -> Any:
    lo, hi, integer = NUMBER_BOUNDS[name]
    value = body.get(name)
    if value is None:
        return None
    if integer and isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 3.0 is the integer 3 (JSON Schema agrees)
    kind = int if integer else (int, float)
    expect(value, kind, name, "an integer" if integer else "a number")
    if not lo <= value <= hi:
        raise InvalidRequest(
            f"Invalid '{name}': {value} is out of range; expected a value between {lo:g} and {hi:g}.",
            param=name,
        )
    return value


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    max_len = STRING_BOUNDS[name]
    value = body.get(name)
    if value is None:
        return None
    text = expect(value, str, name, "a string")
    if len(text) > max_len:
        raise InvalidRequest(f"'{name}' is longer than {max_len} characters.", param=name)
    return text


def _bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    return expect(value, bool, name, "a boolean")


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    expect(value, dict, "metadata", "an object")
    if len(value) > 16:
        raise InvalidRequest("'metadata' may have at most 16 keys.", param="metadata")
    for key, item in value.items():
        if len(key) > 64:
            raise InvalidRequest("metadata keys are at most 64 characters.", param=f"metadata.{key}")
        expect(item, str, f"metadata.{key}", "a string")
        if len(item) > 512:
            raise InvalidRequest("metadata values are at most 512 characters.", param=f"metadata.{key}")
    return dict(value)


def _text(value: Any) -> dict[str, Any]:
    if value is None:
        return {"format": {"type": "text"}, "verbosity": "medium"}
    expect(value, dict, "text", "an object")
    fmt = value.get("format") or {"type": "text"}
    expect(fmt, dict, "text.format", "an object")
    kind = fmt.get("type")
    if kind in ("text", "json_object"):
        out_format: dict[str, Any] = {"type": kind}
    elif kind == "json_schema":
        name = fmt.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("Missing required parameter: 'text.format.name'.", param="text.format.name")
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest(
                "Missing required parameter: 'text.format.schema' (an object).",
                param="text.format.schema",
            )
        strict = fmt.get("strict")
        if strict is not None:
            expect(strict, bool, "text.format.strict", "a boolean")
        description = fmt.get("description")
        if description is not None:
            expect(description, str, "text.format.description", "a string")
        out_format = {
            "type": "json_schema",
            "name": name,
            "schema": schema,
            "strict": strict,
            "description": description,
        }
    else:
        raise InvalidRequest(
            f"Invalid value for 'text.format.type': {kind!r}; expected 'text', 'json_object' or 'json_schema'.",
            param="text.format.type",
        )
    verbosity = value.get("verbosity")
    if verbosity is not None and (not isinstance(verbosity, str) or verbosity not in VERBOSITIES):
        raise InvalidRequest(
            "Invalid value for 'text.verbosity'; expected 'low', 'medium' or 'high'.",
            param="text.verbosity",
        )
    return {"format": out_format, "verbosity": verbosity or "medium"}


def _reasoning(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    expect(value, dict, "reasoning", "an object")
    effort = value.get("effort")
    if effort is not None and (not isinstance(effort, str) or effort not in REASONING_EFFORTS):
        raise InvalidRequest(f"Invalid value for 'reasoning.effort': {effort!r}.", param="reasoning.effort")
    summary = value.get("summary", value.get("generate_summary"))
    if summary is not None and (not isinstance(summary, str) or summary not in REASONING_SUMMARIES):
        raise InvalidRequest(f"Invalid value for 'reasoning.summary': {summary!r}.", param="reasoning.summary")
    return {"effort": effort, "summary": summary}


def _include(value: Any) -> list[str]:
    if value is None:
        return []
    expect(value, list, "include", "an array")
    for i, entry in enumerate(value):
        if not isinstance(entry, str) or entry not in KNOWN_INCLUDES:
            raise InvalidRequest(f"Invalid value for 'include[{i}]': {entry!r}.", param=f"include[{i}]")
    return list(dict.fromkeys(value))


# Fields the gateway accepts without acting on them (announced: protocol/surface.py): their
# shape is still checked, so a wrong value is the client's 400 (as OpenAI answers it).
_SHAPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "prompt": (dict, "an object"),
    "stream_options": (dict, "an object"),
    "prompt_cache_options": (dict, "an object"),
    "prompt_cache_retention": (str, "a string"),
    "moderation": (dict, "an object"),
    "context_management": (list, "an array"),
}
_NESTED_SHAPES: dict[tuple[str, str], tuple[type | tuple[type, ...], str]] = {
    ("prompt", "id"): (str, "a string"),
    ("prompt", "version"): (str, "a string"),
    ("prompt", "variables"): (dict, "an object"),
    ("stream_options", "include_obfuscation"): (bool, "a boolean"),
}


def _check_shapes(body: dict[str, Any]) -> None:
    for name, (kind, what) in _SHAPES.items():
        value = body.get(name)
        if value is not None:
            expect(value, kind, name, what)
    for (outer, inner), (kind, what) in _NESTED_SHAPES.items():
        value = (body.get(outer) or {}).get(inner)
        if value is not None:
            expect(value, kind, f"{outer}.{inner}", what)
    prompt = body.get("prompt")
    if prompt is not None and "id" not in prompt:
        raise InvalidRequest("Missing required parameter: 'prompt.id'.", param="prompt.id")


_REFUSED_NAMES = frozenset(REFUSED_REQUEST_FIELDS)


def _conversation(value: Any) -> str | None:
    """`conversation`: an id, or `{"id": ...}`."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
        param = "conversation.id"
    else:
        param = "conversation"
    if not isinstance(value, str) or not value or len(value) > 64:
        raise InvalidRequest(f"Invalid '{param}': expected a conversation id.", param=param)
    return value


def parse_create_request(body: Any) -> CreateRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    if not _REFUSED_NAMES.isdisjoint(body):
        name = next(name for name in REFUSED_REQUEST_FIELDS if name in body)
        # Ignoring them would silently change the answer (a length limit not applied, a
        # format not enforced, a lane not kept): say why, and what this API calls them.
        raise InvalidRequest(f"Unsupported parameter: '{name}': {REFUSED_REQUEST_FIELDS[name]}.", param=name)
    conversation = _conversation(body.get("conversation"))
    _check_shapes(body)
    model = body.get("model")
    # With a prompt, the model and the input may come from its template (applied, then parsed
    # again, by the create flow: orchestration/prompts.py).
    templated = body.get("prompt") is not None
    if (model is None or model == "") and templated:
        model = ""
    elif model is None or model == "":
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    expect(model, str, "model", "a string")
    if len(model) > MODEL_MAX_CHARS:
        raise InvalidRequest(f"'model' is longer than {MODEL_MAX_CHARS} characters.", param="model")

    previous_response_id = _optional_str(body, "previous_response_id")
    if conversation is not None and previous_response_id is not None:
        raise InvalidRequest(
            "Mutually exclusive parameters: 'conversation' and 'previous_response_id'; use one.",
            param="conversation",
            code="invalid_request",
        )
    raw_input = body.get("input")
    if raw_input is None and previous_response_id is None and conversation is None and not templated:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    input_items = normalize_input(raw_input if raw_input is not None else [])
    compact = _compaction_trigger(input_items)
    if compact:
        input_items = input_items[:-1]
    generate = _generate(body)
    if compact and not generate:
        raise InvalidRequest(
            "A compaction generates its summary: 'compaction_trigger' cannot be combined with 'generate': false.",
            param="generate",
        )

    store = _bool(body, "store", True)
    background = _bool(body, "background", False)
    if background and not store:
        raise InvalidRequest(
            "Background responses must be stored: 'background': true requires 'store': true.",
            param="background",
        )
    if previous_response_id is not None and not previous_response_id:
        raise InvalidRequest("'previous_response_id' must not be empty.", param="previous_response_id")

    tools = normalize_tools(body.get("tools"))
    if body.get("tools"):
        tools = with_tool_search(tools, body.get("tools"))
    # A tool_choice may name a tool of the prompt's template: checked once the template is applied.
    pending = templated and body.get("tools") is None
    tool_choice = "auto" if pending else normalize_tool_choice(body.get("tool_choice"), tools)

    truncation = body.get("truncation") or "disabled"
    if truncation not in ("auto", "disabled"):
        raise InvalidRequest("Invalid value for 'truncation'; expected 'auto' or 'disabled'.", param="truncation")
    service_tier = body.get("service_tier")
    if service_tier is not None and (not isinstance(service_tier, str) or service_tier not in SERVICE_TIERS):
        raise InvalidRequest(f"Invalid value for 'service_tier': {service_tier!r}.", param="service_tier")
    instructions = body.get("instructions")
    if instructions is not None:
        expect(instructions, str, "instructions", "a string")

    max_output_tokens = _optional_number(body, "max_output_tokens")
    max_tool_calls = _optional_number(body, "max_tool_calls")
    stream = _bool(body, "stream", False)
    completion_window, continuation_id = _background_options(
        body.get("background_options"), background=background, stream=stream, service_tier=service_tier
    )

    return CreateRequest(
        model=model,
        input_items=input_items,
        instructions=instructions,
        previous_response_id=previous_response_id,
        conversation=conversation,
        store=store,
        background=background,
        stream=stream,
        tools=tools,
        mcp_tools=_deferred_mcp_checked(normalize_mcp_tools(body.get("tools")), tools),
        hosted_tools=hosted_tools(body.get("tools")),
        tool_choice=tool_choice,
        parallel_tool_calls=_bool(body, "parallel_tool_calls", True),
        max_output_tokens=max_output_tokens,
        max_tool_calls=max_tool_calls,
        temperature=_optional_number(body, "temperature"),
        top_p=_optional_number(body, "top_p"),
        presence_penalty=_optional_number(body, "presence_penalty"),
        frequency_penalty=_optional_number(body, "frequency_penalty"),
        top_logprobs=_optional_number(body, "top_logprobs"),
        truncation=truncation,
        text=_text(body.get("text")),
        reasoning=_reasoning(body.get("reasoning")),
        metadata=_metadata(body.get("metadata")),
        include=_include(body.get("include")),
        user=_optional_str(body, "user"),
        safety_identifier=_optional_str(body, "safety_identifier"),
        prompt_cache_key=_optional_str(body, "prompt_cache_key"),
        prompt_cache_retention=_prompt_cache_retention(body),
        prompt_cache_options=_prompt_cache_options(body),
        service_tier=service_tier,
        compact=compact,
        generate=generate,
        unapplied_candidates=unapplied_candidates(body),
        compact_threshold=_compact_threshold(body.get("context_management")),
        completion_window=completion_window,
        continuation_id=continuation_id,
    )


# The service tiers that are OpenAI's Standard processing, which the 2h and 8h windows require.
_STANDARD_TIERS = frozenset({"auto", "default"})


def _background_options(
    value: Any, *, background: bool, stream: bool, service_tier: str | None
) -> tuple[str, str | None]:
    """`background_options`: its completion window (`soonest` when not given) and continuation id.
    As OpenAI answers: `2h` and `8h` need `background: true`, Standard processing and no
    `stream: true`; anything else is a 400 naming the window."""
    if value is None:
        return "soonest", None
    expect(value, dict, "background_options", "an object")
    window = value.get("completion_window")
    if window is None:
        window = "soonest"
    param = "background_options.completion_window"
    expect(window, str, param, "a string")
    if window not in COMPLETION_WINDOWS:
        raise InvalidRequest(
            f"Invalid value for '{param}': {window[:40]!r}; expected 'soonest', '2h' or '8h'.", param=param
        )
    continuation_id = value.get("continuation_id")
    if continuation_id is not None:
        expect(continuation_id, str, "background_options.continuation_id", "a string")
        if len(continuation_id) > CONTINUATION_ID_MAX_CHARS:
            raise InvalidRequest(
                f"'background_options.continuation_id' is longer than {CONTINUATION_ID_MAX_CHARS} characters.",
                param="background_options.continuation_id",
            )
    if window != "soonest":
        if not background:
            raise InvalidRequest(
                f"The '{window}' completion window is for background responses: it requires 'background': true "
                "(over HTTP; WebSocket responses are not background ones).",
                param=param,
            )
        if stream:
            raise InvalidRequest(
                f"The '{window}' completion window cannot be streamed: it requires 'stream': false or omitted "
                "(poll the response, or stream it with GET once it runs).",
                param=param,
            )
        if service_tier is not None and service_tier not in _STANDARD_TIERS:
            raise InvalidRequest(
                f"The '{window}' completion window requires Standard processing: 'service_tier' "
                f"{service_tier!r} cannot be combined with it (use 'auto' or 'default').",
                param=param,
            )
    return window, continuation_id or None


def _compact_threshold(entries: Any) -> int | None:
    """The token threshold of `context_management`'s compaction entry: None without one, 0 when
    it sets none (the gateway picks one from the route's context window)."""
    threshold: int | None = None
    for i, entry in enumerate(entries or []):
        param = f"context_management[{i}]"
        expect(entry, dict, param, "an object")
        if entry.get("type") != "compaction":
            raise InvalidRequest(
                f"Invalid value for '{param}.type': {entry.get('type')!r}; the only context management is 'compaction'.",
                param=f"{param}.type",
            )
        value = entry.get("compact_threshold")
        if value is None:
            threshold = 0
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON has one number type: 3.0 is the integer 3
        expect(value, int, f"{param}.compact_threshold", "an integer")
        if value < 1:
            raise InvalidRequest(
                f"Invalid '{param}.compact_threshold': {value}; expected a positive number of tokens.",
                param=f"{param}.compact_threshold",
            )
        threshold = value
    return threshold


def _prompt_cache_retention(body: dict[str, Any]) -> str | None:
    value = body.get("prompt_cache_retention")
    if value is not None and (not isinstance(value, str) or value not in PROMPT_CACHE_RETENTIONS):
        raise InvalidRequest(
            f"Invalid value for 'prompt_cache_retention': {value!r}; expected 'in_memory' or '24h'.",
            param="prompt_cache_retention",
        )
    return value


def _prompt_cache_options(body: dict[str, Any]) -> dict[str, Any] | None:
    options = body.get("prompt_cache_options")
    if options is None:
        return None
    out: dict[str, Any] = {}
    mode = options.get("mode")
    if mode is not None:
        if not isinstance(mode, str) or mode not in PROMPT_CACHE_MODES:
            raise InvalidRequest(
                f"Invalid value for 'prompt_cache_options.mode': {mode!r}; expected 'implicit' or 'explicit'.",
                param="prompt_cache_options.mode",
            )
        out["mode"] = mode
    ttl = options.get("ttl")
    if ttl is not None:
        # A string, not only today's '30m' and '12h': the lifetimes on offer change with the
        # API, and the upstream that applies it is the judge.
        out["ttl"] = expect(ttl, str, "prompt_cache_options.ttl", "a string")
    comparison = options.get("comparison_response_id")
    if comparison is not None:
        out["comparison_response_id"] = expect(
            comparison, str, "prompt_cache_options.comparison_response_id", "a string"
        )
    return out or None


def _compaction_trigger(items: list[dict[str, Any]]) -> bool:
    """Whether the input ends with a `compaction_trigger`; anywhere else it is a 400."""
    for index, item in enumerate(items):
        if item["type"] == "compaction_trigger" and index != len(items) - 1:
            raise InvalidRequest(
                "A 'compaction_trigger' item must be the last item of 'input'.",
                param=f"input[{index}]",
            )
    return bool(items) and items[-1]["type"] == "compaction_trigger"


def _generate(body: dict[str, Any]) -> bool:
    """`generate: false`, or a cache prewarm (`prompt_cache_options.prewarm: true`, which the SDK
    documents as implying it): no model call."""
    generate = _bool(body, "generate", True)
    options = body.get("prompt_cache_options")
    prewarm = options.get("prewarm") if isinstance(options, dict) else None
    if prewarm is not None:
        expect(prewarm, bool, "prompt_cache_options.prewarm", "a boolean")
    if prewarm and body.get("generate") is True:
        raise InvalidRequest(
            "'prompt_cache_options.prewarm': true prepares the cache without generating; it cannot be "
            "combined with 'generate': true.",
            param="generate",
        )
    return generate and not prewarm


def parse_compact_request(body: Any) -> CreateRequest:
    """The body of `POST /v1/responses/compact` as the summary run's request: its model,
    input, chain and prompt cache key; the summariser's instructions after the client's."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("Invalid type for 'instructions': expected a string.", param="instructions")
    return parse_create_request(
        {
            "model": body.get("model"),
            "input": body.get("input"),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "instructions": f"{instructions}\n\n{COMPACTION_INSTRUCTIONS}" if instructions else COMPACTION_INSTRUCTIONS,
            "store": True,
        }
    )


def parse_input_tokens_request(body: Any) -> CreateRequest:
    """The body of `POST /v1/responses/input_tokens`: a create's body, whose delivery fields
    (stream, background, store, background_options) do not change what is counted."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    delivery = ("stream", "background", "store", "background_options")
    return parse_create_request({k: v for k, v in body.items() if k not in delivery})


def _deferred_mcp_checked(mcp_tools: list[McpTool], tools: list[Tool]) -> list[McpTool]:
    deferred = next((m for m in mcp_tools if m.deferred), None)
    if deferred is not None and not any(t.kind == "tool_search" for t in tools):
        raise InvalidRequest(
            f"MCP server {deferred.server_label!r} has 'defer_loading': true, which needs a 'tool_search' tool "
            "in 'tools'.",
            param=f"{deferred.param}.defer_loading",
        )
    return mcp_tools


def with_tool_search(tools: list[Tool], raw: Any) -> list[Tool]:
    """The request's `tool_search` tool joins its tools (server-executed ones are the gateway's to
    run, client-executed ones the client's); a deferred tool needs one."""
    searches = [(i, e) for i, e in enumerate(raw) if isinstance(e, dict) and e.get("type") == "tool_search"]
    if len(searches) > 1:
        raise InvalidRequest(
            "Duplicate tool name 'tool_search': only one 'tool_search' tool may be given.",
            param=f"tools[{searches[1][0]}]",
        )
    if searches:
        if any(t.name == "tool_search" for t in tools):
            raise InvalidRequest("Duplicate tool name 'tool_search'.", param=f"tools[{searches[0][0]}]")
        tools = [*tools, search_tool(searches[0][1], f"tools[{searches[0][0]}]")]
    check_deferred(tools)
    return tools
