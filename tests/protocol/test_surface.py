"""The surface classification (responses_api/protocol/surface.py): the installed `openai` SDK
has nothing it does not classify, and each entry says what the code really does.

The coverage tests walk the SDK's own types (the create params' TypedDicts, the tool, input item
and output item unions, the WebSocket client and server event unions, the SSE event union) by
typing introspection, so a release that adds a type fails here. `scripts/sdk-coverage-newest`
runs them against the newest `openai` release (GATEWAY_SDK_PATH names where it was installed).
The behaviour tests build each dialect's upstream body with and without each field and check
that the difference is the one the table claims.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import openai
import pytest
import typing_extensions
from openai.types.chat import completion_create_params
from openai.types.responses import (
    response_create_params,
    response_input_content_param,
    response_input_item_param,
    response_output_item,
    response_stream_event,
    responses_client_event_param,
    responses_server_event,
    tool_param,
)

from responses_api.protocol import anthropic, chat, surface
from responses_api.protocol.anthropic import build_messages_request
from responses_api.protocol.chat import ChatOptions, build_chat_request
from responses_api.protocol.chat_translation import chat_to_responses_body
from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.items import normalize_item
from responses_api.protocol.mcp_tools import normalize_mcp_tools
from responses_api.protocol.native import EventDecoder, build_responses_request
from responses_api.protocol.request import parse_create_request
from responses_api.protocol.surface import Handling, Treatment
from responses_api.protocol.tools import hosted_tools, normalize_tools

PINNED_SDK = "3.57.0"


def test_the_sdk_walked_is_the_one_asked_for() -> None:
    path = os.environ.get("GATEWAY_SDK_PATH")
    if path:  # scripts/sdk-coverage-newest: the newest release, not the project's pinned one
        assert os.path.realpath(openai.__file__).startswith(os.path.realpath(path)), openai.__file__
    else:
        assert openai.__version__ == PINNED_SDK, f"pyproject.toml pins openai=={PINNED_SDK}"


# -- typing introspection ----------------------------------------------------------------------

_WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing_extensions.Annotated}
_WRAPPERS |= {getattr(typing, name) for name in ("Required", "NotRequired", "Annotated") if hasattr(typing, name)}


def _members(union: Any) -> list[Any]:
    """The classes of a (possibly Annotated, possibly nested) Union."""
    origin = get_origin(union)
    if origin in _WRAPPERS or origin is typing.Annotated:
        return _members(get_args(union)[0])
    if origin is Union:
        return [member for arg in get_args(union) for member in _members(arg)]
    return [union]


def _literals(hint: Any) -> list[str]:
    """The string values a field's annotation allows (Literal, through Optional/Required)."""
    origin = get_origin(hint)
    if origin in (Literal, typing_extensions.Literal):
        return [value for value in get_args(hint) if isinstance(value, str)]
    if origin is Union or origin in _WRAPPERS or origin is typing.Annotated:
        return [value for arg in get_args(hint) for value in _literals(arg)]
    return []


def _type_values(cls: Any) -> list[str]:
    """The `type` discriminator of a TypedDict or a pydantic model."""
    fields = getattr(cls, "model_fields", None)
    hint = fields["type"].annotation if fields is not None else get_type_hints(cls)["type"]
    values = _literals(hint)
    assert values, f"{cls.__name__} has no literal 'type'"
    return values


def _unclassified(union: Any, table: dict[str, Any]) -> list[str]:
    return sorted(
        f"{cls.__name__}: {value!r}" for cls in _members(union) for value in _type_values(cls) if value not in table
    )


def _field_names(*typed_dicts: Any) -> set[str]:
    return {name for cls in typed_dicts for name in get_type_hints(cls)}


# -- coverage: every type and field of the SDK has an entry ---------------------------------------


def test_every_create_request_field_is_classified() -> None:
    names = _field_names(
        response_create_params.ResponseCreateParamsStreaming,
        response_create_params.ResponseCreateParamsNonStreaming,
        responses_client_event_param.ResponseCreate,
    )
    names.discard("type")  # the WebSocket frame's own discriminator (CLIENT_EVENTS)
    assert sorted(names - set(surface.REQUEST_FIELDS)) == []


def test_every_chat_completions_field_is_classified() -> None:
    names = _field_names(
        completion_create_params.CompletionCreateParamsStreaming,
        completion_create_params.CompletionCreateParamsNonStreaming,
    )
    assert sorted(names - set(surface.CHAT_FIELDS)) == []


def test_every_tool_type_is_classified() -> None:
    assert _unclassified(tool_param.ToolParam, surface.TOOL_TYPES) == []


def test_every_input_item_type_is_classified() -> None:
    assert _unclassified(response_input_item_param.ResponseInputItemParam, surface.INPUT_ITEM_TYPES) == []


def test_every_input_content_part_is_classified() -> None:
    assert _unclassified(response_input_content_param.ResponseInputContentParam, surface.INPUT_CONTENT_TYPES) == []


def test_every_output_item_type_is_classified() -> None:
    assert _unclassified(response_output_item.ResponseOutputItem, surface.OUTPUT_ITEM_TYPES) == []


def test_every_websocket_client_event_is_classified() -> None:
    assert _unclassified(responses_client_event_param.ResponsesClientEventParam, surface.CLIENT_EVENTS) == []


def test_every_server_event_is_classified() -> None:
    assert _unclassified(responses_server_event.ResponsesServerEvent, surface.SERVER_EVENTS) == []
    assert _unclassified(response_stream_event.ResponseStreamEvent, surface.SERVER_EVENTS) == []


def test_the_walk_sees_what_it_should() -> None:
    """The introspection finds the SDK's types (a walk that finds nothing would pass anything)."""
    tools = {value for cls in _members(tool_param.ToolParam) for value in _type_values(cls)}
    assert {"function", "tool_search", "programmatic_tool_calling", "web_search"} <= tools
    items = {value for cls in _members(response_input_item_param.ResponseInputItemParam) for value in _type_values(cls)}
    assert {"message", "program_output", "item_reference", "configuration_update"} <= items
    events = {value for cls in _members(responses_server_event.ResponsesServerEvent) for value in _type_values(cls)}
    assert {"response.created", "response.steer.failed", "error"} <= events
    assert {"prompt_cache_options", "context_management"} <= _field_names(
        response_create_params.ResponseCreateParamsBase
    )


# -- the request fields: each dialect's body does what the table says ------------------------------

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
LOGPROBS = ["message.output_text.logprobs"]

# Field -> (the value sent, what both the body with it and the body without it also carry).
SAMPLES: dict[str, tuple[Any, dict[str, Any]]] = {
    "input": ("bye", {}),
    "instructions": ("Be brief.", {}),
    "previous_response_id": ("resp_1", {}),
    "conversation": ("conv_1", {}),
    "store": (False, {}),
    "background": (True, {}),
    "stream": (True, {}),
    "generate": (False, {}),
    "metadata": ({"a": "b"}, {}),
    "max_tool_calls": (3, {}),
    "truncation": ("auto", {}),
    "include": (["reasoning.encrypted_content"], {}),
    "include.message.output_text.logprobs": (LOGPROBS, {}),
    "tools": (TOOLS, {}),
    "tool_choice": ("required", {"tools": TOOLS}),
    "parallel_tool_calls": (False, {"tools": TOOLS}),
    "max_output_tokens": (77, {}),
    "temperature": (0.5, {}),
    "top_p": (0.5, {}),
    "presence_penalty": (0.5, {}),
    "frequency_penalty": (0.5, {}),
    "top_logprobs": (3, {"include": LOGPROBS}),
    "reasoning": ({"effort": "high"}, {}),
    "text": ({"format": {"type": "json_object"}}, {}),
    "text.format": ({"type": "json_object"}, {}),
    "text.verbosity": ("low", {}),
    "user": ("u1", {}),
    "safety_identifier": ("s1", {}),
    "prompt_cache_key": ("k1", {}),
    "service_tier": ("priority", {}),
    "prompt_cache_retention": ("24h", {}),
    "prompt_cache_options": ({"mode": "implicit", "ttl": "30m"}, {}),
    "prompt_cache_options.prewarm": (True, {}),
    "context_management": ([{"type": "compaction", "compact_threshold": 1000}], {}),
    "prompt": ({"id": "pmpt_1"}, {}),
    "moderation": ({"model": "omni-moderation-latest"}, {}),
    "stream_options": ({"include_obfuscation": False}, {}),
    "background_options": ({"completion_window": "2h", "continuation_id": "c1"}, {"background": True}),
    "access_programs": ({"cyber": "standard"}, {}),
    "image": ({"context_compression": "auto"}, {}),
    "client_metadata": ({"x-codex-turn": "1"}, {}),
    "request_country": ("US", {}),
    "stream_id": ("lane-1", {}),
    "messages": ([{"role": "user", "content": "hi"}], {}),
    "max_tokens": (77, {}),
    "max_completion_tokens": (77, {}),
    "response_format": ({"type": "json_object"}, {}),
    "functions": ([{"name": "f"}], {}),
    "function_call": ("auto", {}),
}


def _with(body: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, list) and "." in name:  # a value of an array field, e.g. an include
        return {**body, name.split(".", 1)[0]: value}
    if "." in name:
        outer, inner = name.split(".", 1)
        return {**body, outer: {**body.get(outer, {}), inner: value}}
    return {**body, name: value}


def _build(kind: str, body: dict[str, Any], options: ChatOptions | None = None) -> dict[str, Any]:
    req = parse_create_request(body)
    if kind == "chat_completions":
        return build_chat_request(req, req.input_items, upstream_model="upstream-model", stream=False, options=options)
    builders: dict[str, Callable[..., dict[str, Any]]] = {
        "responses": build_responses_request,
        "anthropic": build_messages_request,
    }
    return builders[kind](req, req.input_items, upstream_model="upstream-model", stream=False)


def _ignored(kind: str, body: dict[str, Any], options: ChatOptions | None = None) -> list[str]:
    """x-gateway-ignored-fields of a one-target route of this kind (toolplan.plan_tools): the
    table, and for the fields whose use depends on the request or provider, the translation's report."""
    req = parse_create_request(body)
    applied: frozenset[str] = frozenset()
    if kind == "chat_completions":
        applied = chat.applied_fields(req, options or ChatOptions())
    elif kind == "anthropic":
        applied = anthropic.applied_fields(req)
    return surface.ignored_fields(req.unapplied_candidates, [(kind, applied)])


def test_every_request_field_has_a_sample() -> None:
    assert sorted(set(surface.REQUEST_FIELDS) - set(SAMPLES) - {"model"}) == []


def _check_difference(dialect: Any, name: str, value: Any, without: dict[str, Any], with_: dict[str, Any]) -> None:
    top = name.split(".")[0]
    if dialect.handling is Handling.SENT:
        assert with_.get(top) == value != without.get(top), (with_.get(top), without.get(top))
    elif dialect.handling is Handling.TRANSLATED:
        assert with_.get(dialect.to) != without.get(dialect.to), f"'{dialect.to}' unchanged"
    else:  # applied by the gateway or announced: the upstream is told nothing
        assert with_ == without


@pytest.mark.parametrize("kind", surface.UPSTREAM_KINDS)
@pytest.mark.parametrize("name", [n for n in surface.REQUEST_FIELDS if n != "model"])
def test_each_request_field_does_on_each_upstream_kind_what_the_table_says(kind: str, name: str) -> None:
    field = surface.REQUEST_FIELDS[name]
    dialect = field.on(kind)
    value, context = SAMPLES[name]
    base = {"model": "route", "input": "hi", **context}
    sent = _with(base, name, value)
    if field.treatment is Treatment.REFUSED:  # by every kind: the parser refuses it
        with pytest.raises(InvalidRequest) as refused:
            parse_create_request(sent)
        assert refused.value.param == name
        assert surface.REFUSED_REQUEST_FIELDS[name] in refused.value.message
        return
    candidates = parse_create_request(sent).unapplied_candidates
    refused_here = surface.refused_on_route(candidates, {kind})  # toolplan.plan_tools refuses it
    assert refused_here == ((name, field.why) if dialect.handling is Handling.REFUSED else None)
    if refused_here is not None:
        return
    _check_difference(dialect, name, value, _build(kind, base), _build(kind, sent))
    announced = _ignored(kind, sent)
    named = any(a == name or a.startswith(name + ".") for a in announced)
    assert named is (dialect.handling is Handling.ANNOUNCED), announced


# Values and provider options under which a field's use depends on the request or the provider.
VARIANTS: list[tuple[str, Any]] = [
    *(("service_tier", tier) for tier in ("auto", "default", "flex", "scale", "priority", "fast")),
    ("prompt_cache_key", "k1"),
    ("prompt_cache_retention", "24h"),
    *(("prompt_cache_options", o) for o in ({"mode": "implicit"}, {"mode": "explicit"}, {"ttl": "12h"})),
]
CHAT_PROVIDERS = [ChatOptions(), ChatOptions(send_prompt_cache=True, send_service_tier=True)]


@pytest.mark.parametrize("kind", surface.UPSTREAM_KINDS)
@pytest.mark.parametrize(("name", "value"), VARIANTS)
def test_a_field_named_ignored_leaves_the_upstream_body_unchanged(kind: str, name: str, value: Any) -> None:
    """x-gateway-ignored-fields says what the translation did: a field it names changes nothing in
    the upstream body; one whose use the translation reports (surface.REPORTED_FIELDS) is named
    exactly when it changes nothing. Anthropic sends `service_tier` where it has a counterpart and
    shapes its cache marks by `prompt_cache_options`; a Chat Completions provider takes the cache
    fields and the tier where its options say so."""
    for input_ in ("hi", [{"role": "user", "content": [MARKED, {"type": "input_text", "text": "q"}]}]):
        base = {"model": "route", "input": input_}
        for options in CHAT_PROVIDERS if kind == "chat_completions" else [None]:
            sent = {**base, name: value}
            changed = _build(kind, sent, options) != _build(kind, base, options)
            ignored = name in _ignored(kind, sent, options)
            if ignored:
                assert not changed, (input_, options)
            if name in surface.REPORTED_FIELDS[kind]:
                assert ignored is not changed, (input_, options)


MARKED = {"type": "input_text", "text": "prefix", "prompt_cache_breakpoint": {"mode": "explicit"}}


@pytest.mark.parametrize("kind", surface.UPSTREAM_KINDS)
def test_the_model_is_the_routes_upstream_model(kind: str) -> None:
    assert _build(kind, {"model": "route", "input": "hi"})["model"] == "upstream-model"


def test_a_field_nothing_classifies_is_accepted_and_announced_on_every_kind() -> None:
    candidates = parse_create_request({"model": "m", "input": "hi", "sent_by_a_newer_sdk": 1}).unapplied_candidates
    for kind in surface.UPSTREAM_KINDS:
        assert surface.unapplied_fields(candidates, {kind}) == ["sent_by_a_newer_sdk"]


def test_what_a_codex_turn_sends_stays_accepted() -> None:
    body = {
        "model": "m",
        "instructions": "You are a coding agent.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": [*TOOLS, {"type": "web_search"}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "5f0c",
        "service_tier": "fast",
        "text": {"verbosity": "low"},
        "client_metadata": {"x-codex-turn": "1"},
    }
    req = parse_create_request(body)
    assert surface.unapplied_fields(req.unapplied_candidates, {"chat_completions"}) == [
        "prompt_cache_key",
        "service_tier",
        "text.verbosity",
        "client_metadata",
    ]


# -- /v1/chat/completions on a non-Chat upstream ------------------------------------------------

CHAT_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
CHAT_SAMPLES: dict[str, tuple[Any, dict[str, Any]]] = {
    "messages": ([{"role": "user", "content": "bye"}], {}),
    "stream": (True, {}),
    "stream_options": ({"include_usage": True}, {}),
    "tools": (CHAT_TOOLS, {}),
    "tool_choice": ("required", {"tools": CHAT_TOOLS}),
    "parallel_tool_calls": (False, {"tools": CHAT_TOOLS}),
    "max_tokens": (77, {}),
    "max_completion_tokens": (77, {}),
    "temperature": (0.5, {}),
    "top_p": (0.5, {}),
    "reasoning_effort": ("high", {}),
    "response_format": ({"type": "json_object"}, {}),
    "n": (2, {}),
    "logit_bias": ({"1": 1}, {}),
    "audio": ({"voice": "alloy", "format": "mp3"}, {}),
    "modalities": (["text", "audio"], {}),
    "prediction": ({"type": "content", "content": "x"}, {}),
    "web_search_options": ({}, {}),
    "functions": ([{"name": "f"}], {}),
    "function_call": ("auto", {}),
    "frequency_penalty": (0.5, {}),
    "presence_penalty": (0.5, {}),
    "stop": (["x"], {}),
    "seed": (1, {}),
    "logprobs": (True, {}),
    "top_logprobs": (2, {}),
    "user": ("u1", {}),
    "safety_identifier": ("s1", {}),
    "metadata": ({"a": "b"}, {}),
    "store": (True, {}),
    "service_tier": ("priority", {}),
    "verbosity": ("low", {}),
    "prompt_cache_key": ("k1", {}),
    "prompt_cache_options": ({"mode": "implicit", "ttl": "30m"}, {}),
    "prompt_cache_retention": ("24h", {}),
    "moderation": ({"model": "omni-moderation-latest"}, {}),
}


def test_every_chat_field_has_a_sample() -> None:
    assert sorted(set(surface.CHAT_FIELDS) - set(CHAT_SAMPLES) - {"model"}) == []


def test_a_chat_completions_upstream_gets_the_body_as_sent() -> None:
    # upstreams/passthrough.forward sends the body with only the model replaced
    # (tests/responses_api/test_passthrough.py sends it through a scripted upstream).
    for name, field in surface.CHAT_FIELDS.items():
        assert field.chat_completions.handling is (Handling.TRANSLATED if name == "model" else Handling.SENT), name


@pytest.mark.parametrize("kind", ["responses", "anthropic"])
@pytest.mark.parametrize("name", [n for n in surface.CHAT_FIELDS if n != "model"])
def test_each_chat_field_does_on_each_translated_kind_what_the_table_says(kind: str, name: str) -> None:
    dialect = surface.CHAT_FIELDS[name].on(kind)
    value, context = CHAT_SAMPLES[name]
    base = {"model": "route", "messages": [{"role": "user", "content": "hi"}], **context}
    sent = {**base, name: value}
    if dialect.handling is Handling.REFUSED:
        with pytest.raises(InvalidRequest) as refused:
            chat_to_responses_body(sent)
        assert refused.value.param == name
        return
    without, with_ = _build(kind, chat_to_responses_body(base)), _build(kind, chat_to_responses_body(sent))
    _check_difference(dialect, name, value, without, with_)
    assert (name in surface.unapplied_chat_fields(sent, kind)) is (dialect.handling is Handling.ANNOUNCED)


@pytest.mark.parametrize("tier", ["auto", "default", "flex", "scale", "priority"])
def test_a_chat_requests_service_tier_on_anthropic_is_named_ignored_only_when_not_sent(tier: str) -> None:
    """/v1/chat/completions on an Anthropic route: `service_tier` is sent where Anthropic has a
    counterpart, and named in x-gateway-ignored-fields exactly when it is not."""
    base = {"model": "route", "messages": [{"role": "user", "content": "hi"}]}
    sent = {**base, "service_tier": tier}
    req = parse_create_request(chat_to_responses_body(sent))
    changed = _build("anthropic", chat_to_responses_body(sent)) != _build("anthropic", chat_to_responses_body(base))
    ignored = surface.unapplied_chat_fields(sent, "anthropic", anthropic.applied_fields(req))
    assert ("service_tier" in ignored) is not changed


# -- tools, items, events ------------------------------------------------------------------------

TOOL_SAMPLES: dict[str, dict[str, Any]] = {
    "function": TOOLS[0],
    "custom": {"type": "custom", "name": "c"},
    "namespace": {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "g"}]},
    "mcp": {"type": "mcp", "server_label": "s", "server_url": "https://mcp.example.com"},
}


@pytest.mark.parametrize("kind", sorted(surface.TOOL_TYPES))
def test_each_tool_type_is_treated_as_classified(kind: str) -> None:
    entry = surface.TOOL_TYPES[kind]
    tool = TOOL_SAMPLES.get(kind, {"type": kind})
    if kind == "tool_search":  # the gateway's own search, added to the tools by the request parser
        req = parse_create_request({"model": "m", "input": "x", "tools": [tool]})
        assert [t.kind for t in req.tools] == ["tool_search"] and not hosted_tools([tool])
        return
    if kind == "file_search":  # the gateway's own, parsed apart and planned per route (toolplan.file_search_tool)
        assert entry.treatment is Treatment.SERVED
        assert normalize_tools([tool]) == [] and [h.type for h in hosted_tools([tool])] == [kind]
        return
    if entry.treatment is Treatment.SERVED:
        served = normalize_mcp_tools([tool]) if kind == "mcp" else normalize_tools([tool])
        assert served and not hosted_tools([tool])
    else:  # passed through, or dropped and announced: toolplan.serve_hosted_tools decides per route
        assert entry.treatment is Treatment.PASSED_THROUGH
        assert normalize_tools([tool]) == [] and [h.type for h in hosted_tools([tool])] == [kind]


# One item carrying every field some item type requires: a served type must not be refused by type.
ANY_ITEM = {
    "id": "item_1",
    "call_id": "call_1",
    "role": "user",
    "content": "hi",
    "output": "out",
    "name": "n",
    "arguments": "{}",
    "input": "in",
    "action": {},
    "operation": {},
    "server_label": "s",
    "tools": [],
    "approve": True,
    "approval_request_id": "a",
    "encrypted_content": "sealed",
}


@pytest.mark.parametrize("kind", sorted(surface.INPUT_ITEM_TYPES))
def test_each_input_item_type_is_treated_as_classified(kind: str) -> None:
    entry = surface.INPUT_ITEM_TYPES[kind]
    try:
        normalize_item({**ANY_ITEM, "type": kind}, "input[0]")
    except InvalidRequest as error:
        refused_by_type = error.param == "input[0].type"
    else:
        refused_by_type = False
    assert refused_by_type is (entry.treatment is Treatment.REFUSED)
    if entry.treatment is Treatment.REFUSED:
        with pytest.raises(InvalidRequest, match=entry.note.split(":")[0]):
            normalize_item({**ANY_ITEM, "type": kind}, "input[0]")


@pytest.mark.parametrize("kind", sorted(surface.OUTPUT_ITEM_TYPES))
def test_a_responses_upstreams_items_are_relayed_as_classified(kind: str) -> None:
    """Relayed: the passed-through types and the hosted search calls; never the others (the
    gateway builds messages, calls and reasoning from the upstream's deltas)."""
    item = {"type": kind, "id": "x", "call_id": "c", "status": "completed"}
    relayed = bool(EventDecoder().feed({"type": "response.output_item.done", "output_index": 0, "item": item}))
    expected = kind in surface.HOSTED_ITEM_TYPES
    assert relayed is expected
    if surface.OUTPUT_ITEM_TYPES[kind].treatment is Treatment.PASSED_THROUGH:
        assert relayed


def test_what_is_not_emitted_is_nowhere_in_the_code() -> None:
    from pathlib import Path

    import responses_api

    source = "\n".join(
        p.read_text() for p in Path(responses_api.__file__).parent.rglob("*.py") if p.name != "surface.py"
    )
    for name, entry in surface.SERVER_EVENTS.items():
        if entry.treatment is Treatment.NOT_EMITTED:
            assert f'"{name}"' not in source, name
    for name, entry in surface.OUTPUT_ITEM_TYPES.items():
        if entry.treatment is Treatment.NOT_EMITTED:
            assert f'"{name}"' not in source, name


def test_the_beta_surface_is_recognised() -> None:
    assert surface.beta_requested("beta=true", None)
    assert surface.beta_requested("", "responses_multi_agent=v1")
    assert not surface.beta_requested("", "responses_websockets=2026-02-06")  # Codex's WebSocket beta
    assert not surface.beta_requested("stream=true", None)
