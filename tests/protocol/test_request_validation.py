"""Request validation and the request side of the Chat Completions mapping.

`parse_create_request` / `normalize_input` / tools: the easy input forms are
accepted, every error names the offending field in `param` (JSON-pointer style,
`input[2].content[0].type`), strict-schema normalisation, `tool_choice`,
metadata limits, `text.format`, `reasoning`. Then `items_to_messages` and
`build_chat_request`: what the gateway sends to a Chat Completions upstream.

Pure functions: no database, no network.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from responses_api.protocol.chat import ChatOptions, build_chat_request, items_to_messages
from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.items import normalize_input
from responses_api.protocol.request import CreateRequest, parse_create_request
from responses_api.protocol.tools import (
    NotStrictable,
    Tool,
    allowed_tool_names,
    normalize_tool_choice,
    normalize_tools,
    to_strict_schema,
)

pytestmark = pytest.mark.embedded

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather at a place.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
}
TIME = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
}


def parse(**body: Any) -> CreateRequest:
    return parse_create_request({"model": "m", "input": "hi", **body})


def param_of(body: Any) -> str | None:
    with pytest.raises(InvalidRequest) as info:
        parse_create_request(body)
    assert info.value.status == 400
    assert info.value.body()["error"]["type"] == "invalid_request_error"
    return info.value.param


def base(**body: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **body}


# ---------------------------------------------------------------------------------------------
# input: easy forms
# ---------------------------------------------------------------------------------------------


def test_string_input_is_one_user_message() -> None:
    [item] = parse(input="Hello").input_items
    assert item["type"] == "message" and item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "Hello"}]
    assert item["id"].startswith("msg_") and item["status"] == "completed"


def test_role_and_content_without_type() -> None:
    items = normalize_input(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Use metric."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello!", "phase": "final_answer"},
        ]
    )
    assert [(i["type"], i["role"]) for i in items] == [
        ("message", "system"),
        ("message", "developer"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[2]["content"] == [{"type": "input_text", "text": "hi"}]
    assert items[3]["content"] == [{"type": "output_text", "text": "Hello!", "annotations": [], "logprobs": []}]
    assert items[3]["phase"] == "final_answer"
    assert len({i["id"] for i in items}) == 4


def test_item_reference_with_and_without_type() -> None:
    items = normalize_input([{"id": "msg_abc"}, {"type": "item_reference", "id": "fc_def"}])
    assert items == [{"type": "item_reference", "id": "msg_abc"}, {"type": "item_reference", "id": "fc_def"}]


def test_content_part_aliases() -> None:
    [item] = normalize_input(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "input_image", "image_url": {"url": "https://x.test/i.png"}},
                    {"type": "input_image", "file_id": "file_1", "detail": "low"},
                    {"type": "input_file", "file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"},
                ],
            }
        ]
    )
    assert item["content"] == [
        {"type": "input_text", "text": "a"},
        {"type": "input_image", "image_url": "https://x.test/i.png", "file_id": None, "detail": "auto"},
        {"type": "input_image", "image_url": None, "file_id": "file_1", "detail": "low"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"},
    ]


def test_tool_items_keep_their_ids_and_fields() -> None:
    items = normalize_input(
        [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"location":"Oslo"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "cloudy"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "gAAA"},
        ]
    )
    assert items[0] == {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"location":"Oslo"}',
        "status": "completed",
    }
    assert items[1]["id"].startswith("fco_") and items[1]["output"] == "sunny"
    assert items[2]["output"] == [{"type": "input_text", "text": "cloudy"}]
    assert items[3]["summary"] == [{"type": "summary_text", "text": "s"}]
    assert items[3]["encrypted_content"] == "gAAA"


def test_unknown_top_level_fields_are_ignored() -> None:
    req = parse_create_request(
        base(future_option={"x": 1}, prompt_cache_retention="24h", stream_options={"include_obfuscation": False})
    )
    assert req.model == "m"


def test_defaults() -> None:
    req = parse()
    assert (req.store, req.background, req.stream) == (True, False, False)
    assert req.tool_choice == "auto" and req.tools == []
    assert req.truncation == "disabled" and req.parallel_tool_calls is True
    assert req.text == {"format": {"type": "text"}, "verbosity": "medium"}
    assert req.reasoning is None and req.metadata is None and req.include == []


def test_previous_response_id_without_input() -> None:
    req = parse_create_request({"model": "m", "previous_response_id": "resp_1"})
    assert req.input_items == [] and req.previous_response_id == "resp_1"


# ---------------------------------------------------------------------------------------------
# input: every error names its field
# ---------------------------------------------------------------------------------------------

INPUT_ERRORS: list[tuple[Any, str]] = [
    (
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": [{"type": "image", "url": "https://x.test/i.png"}]},
        ],
        "input[2].content[0].type",
    ),
    (42, "input"),
    (["just a string"], "input[0]"),
    ([{"content": "no role, no type"}], "input[0].type"),
    ([{"type": "web_search_call", "status": "completed"}], "input[0].id"),
    ([{"type": "holodeck_call", "id": "x_1"}], "input[0].type"),
    ([{"type": "custom_tool_call", "call_id": "c1", "name": "patch"}], "input[0].input"),
    ([{"type": "shell_call_output", "call_id": "c1", "output": "text"}], "input[0].output"),
    ([{"type": "local_shell_call_output", "output": "x"}], "input[0].id"),
    ([{"role": "tool", "content": "x"}], "input[0].role"),
    ([{"role": "user", "content": 5}], "input[0].content"),
    ([{"role": "assistant", "content": None}], "input[0].content"),
    ([{"role": "assistant", "content": "x", "phase": "draft"}], "input[0].phase"),
    ([{"role": "assistant", "content": [{"type": "input_image"}]}], "input[0].content[0].type"),
    ([{"role": "user", "content": ["text"]}], "input[0].content[0]"),
    ([{"role": "user", "content": [{"type": "input_text"}]}], "input[0].content[0].text"),
    ([{"role": "user", "content": [{"type": "input_image"}]}], "input[0].content[0].image_url"),
    (
        [{"role": "user", "content": [{"type": "input_image", "image_url": "ftp://x/i.png"}]}],
        "input[0].content[0].image_url",
    ),
    (
        [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/i.png", "detail": "ultra"}]}],
        "input[0].content[0].detail",
    ),
    ([{"role": "user", "content": [{"type": "input_file", "filename": "a.pdf"}]}], "input[0].content[0].file_data"),
    ([{"role": "user", "content": [{"type": "input_file", "file_id": 7}]}], "input[0].content[0].file_id"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
    ([{"type": "function_call", "call_id": "c", "arguments": "{}"}], "input[0].name"),
    ([{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}], "input[0].arguments"),
    ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output"),
    ([{"type": "function_call_output", "output": "x"}], "input[0].call_id"),
    ([{"type": "function_call_output", "call_id": "c", "output": [{"type": "bogus"}]}], "input[0].output[0].type"),
    ([{"type": "reasoning", "summary": "s"}], "input[0].summary"),
    ([{"type": "reasoning", "summary": ["s"]}], "input[0].summary[0]"),
    ([{"type": "item_reference"}], "input[0].id"),
    (
        [
            {"role": "user", "content": "ok"},
            {"role": "user", "content": "ok"},
            {"role": "user", "content": "ok"},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "ok"}, {"type": "input_image", "image_url": 5}],
            },
        ],
        "input[3].content[1].image_url",
    ),
]


@pytest.mark.parametrize(("raw", "param"), INPUT_ERRORS, ids=[p for _, p in INPUT_ERRORS])
def test_input_errors_name_the_field(raw: Any, param: str) -> None:
    assert param_of(base(input=raw)) == param


TOP_LEVEL_ERRORS: list[tuple[dict[str, Any], str | None]] = [
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "messages"),
    (base(messages=[]), "messages"),
    ({"input": "hi"}, "model"),
    ({"model": "", "input": "hi"}, "model"),
    ({"model": 4, "input": "hi"}, "model"),
    ({"model": "m"}, "input"),
    (base(conversation="conv_1", previous_response_id="resp_1"), "conversation"),
    (base(conversation=5), "conversation"),
    (base(conversation={"id": 5}), "conversation.id"),
    (base(background=True, store=False), "background"),
    (base(store="yes"), "store"),
    (base(stream=1), "stream"),
    (base(previous_response_id=""), "previous_response_id"),
    (base(previous_response_id=7), "previous_response_id"),
    (base(truncation="middle"), "truncation"),
    (base(service_tier="turbo"), "service_tier"),
    (base(instructions=["x"]), "instructions"),
    (base(temperature=2.5), "temperature"),
    (base(temperature=True), "temperature"),
    (base(top_p=-0.1), "top_p"),
    (base(presence_penalty=3), "presence_penalty"),
    (base(frequency_penalty="1"), "frequency_penalty"),
    (base(max_output_tokens=0), "max_output_tokens"),
    (base(max_output_tokens=15), "max_output_tokens"),  # OpenAI's floor is 16
    (base(max_output_tokens=10.5), "max_output_tokens"),
    (base(max_tool_calls=0), "max_tool_calls"),
    (base(top_logprobs=21), "top_logprobs"),
    (base(include="reasoning.encrypted_content"), "include"),
    (base(include=["reasoning.encrypted_content", "everything"]), "include[1]"),
    (base(parallel_tool_calls="no"), "parallel_tool_calls"),
    (base(user=5), "user"),
    (base(safety_identifier="x" * 513), "safety_identifier"),
    # Known fields the gateway does not act on are still type-checked.
    (base(prompt=5), "prompt"),
    (base(prompt={"version": "1"}), "prompt.id"),
    (base(prompt={"id": 7}), "prompt.id"),
    (base(prompt={"id": "pmpt_1", "variables": []}), "prompt.variables"),
    (base(stream_options=5), "stream_options"),
    (base(stream_options={"include_obfuscation": "no"}), "stream_options.include_obfuscation"),
    (base(prompt_cache_options="24h"), "prompt_cache_options"),
    (base(prompt_cache_retention=24), "prompt_cache_retention"),
    (base(moderation=True), "moderation"),
    (base(context_management={"type": "compaction"}), "context_management"),
    # Chat Completions names get a 400 with what to use instead.
    (base(max_tokens=100), "max_tokens"),
    (base(max_completion_tokens=100), "max_completion_tokens"),
    (base(response_format={"type": "json_object"}), "response_format"),
    (base(functions=[]), "functions"),
    (base(function_call="auto"), "function_call"),
    # Found by the fuzz (tests/reliability/test_openapi_fuzz.py): unhashable where a word goes.
    (base(include=[["reasoning.encrypted_content"]]), "include[0]"),
    (base(text={"verbosity": ["low"]}), "text.verbosity"),
    (base(reasoning={"effort": {}}), "reasoning.effort"),
    (base(reasoning={"summary": []}), "reasoning.summary"),
    (base(service_tier=["auto"]), "service_tier"),
    (base(input=[{"type": ["message"], "role": "user", "content": "x"}]), "input[0].type"),
    (base(input=[{"role": ["user"], "content": "x"}]), "input[0].role"),
]


def test_known_unacted_fields_of_the_right_shape_are_accepted() -> None:
    parse_create_request(
        base(
            prompt={"id": "pmpt_1", "version": None, "variables": {"a": "b"}},
            stream_options={"include_obfuscation": False},
            prompt_cache_retention="24h",
            prompt_cache_options={"ttl": "24h"},
            moderation=None,
            context_management=[{"type": "compaction", "compact_threshold": 1000}],
        )
    )


@pytest.mark.parametrize(
    ("body", "param"), TOP_LEVEL_ERRORS, ids=[f"{n}-{p}" for n, (_, p) in enumerate(TOP_LEVEL_ERRORS)]
)
def test_top_level_errors_name_the_field(body: dict[str, Any], param: str) -> None:
    assert param_of(body) == param


def test_messages_error_says_what_to_use() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_create_request({"model": "m", "messages": []})
    assert "messages" in info.value.message and "input" in info.value.message


def test_body_must_be_an_object() -> None:
    assert param_of(["not", "an", "object"]) is None


def test_include_deduplicates() -> None:
    req = parse(include=["message.output_text.logprobs", "message.output_text.logprobs"])
    assert req.include == ["message.output_text.logprobs"]


# ---------------------------------------------------------------------------------------------
# metadata, text.format, reasoning
# ---------------------------------------------------------------------------------------------


def test_metadata_limits() -> None:
    sixteen = {f"k{i}": "v" for i in range(16)}
    assert parse(metadata=sixteen).metadata == sixteen
    assert param_of(base(metadata={**sixteen, "k16": "v"})) == "metadata"
    assert parse(metadata={"k" * 64: "v" * 512}).metadata == {"k" * 64: "v" * 512}
    assert param_of(base(metadata={"k" * 65: "v"})) == "metadata." + "k" * 65
    assert param_of(base(metadata={"k": "v" * 513})) == "metadata.k"
    assert param_of(base(metadata={"n": 5})) == "metadata.n"
    assert param_of(base(metadata=["a"])) == "metadata"


def test_text_format_json_schema_is_flat() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    req = parse(
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}, "verbosity": "low"}
    )
    assert req.text == {
        "format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True, "description": None},
        "verbosity": "low",
    }
    assert parse(text={"format": {"type": "json_object"}}).text == {
        "format": {"type": "json_object"},
        "verbosity": "medium",
    }


@pytest.mark.parametrize(
    ("text", "param"),
    [
        # The Chat Completions nesting ({json_schema: {...}}) is not the Responses shape.
        ({"format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}}, "text.format.name"),
        ({"format": {"type": "json_schema", "name": "a"}}, "text.format.schema"),
        ({"format": {"type": "json_schema", "name": "a", "schema": "{}"}}, "text.format.schema"),
        ({"format": {"type": "json_schema", "name": "a", "schema": {}, "strict": "yes"}}, "text.format.strict"),
        ({"format": {"type": "json_schema", "name": "a", "schema": {}, "description": 1}}, "text.format.description"),
        ({"format": {"type": "xml"}}, "text.format.type"),
        ({"format": "json"}, "text.format"),
        ({"verbosity": "extreme"}, "text.verbosity"),
        ("json", "text"),
    ],
)
def test_text_errors(text: Any, param: str) -> None:
    assert param_of(base(text=text)) == param


def test_reasoning() -> None:
    assert parse(reasoning={"effort": "high"}).reasoning == {"effort": "high", "summary": None}
    assert parse(reasoning={"summary": "auto"}).reasoning == {"effort": None, "summary": "auto"}
    assert parse(reasoning={"generate_summary": "concise"}).reasoning == {"effort": None, "summary": "concise"}
    assert parse(reasoning={}).reasoning == {"effort": None, "summary": None}
    for effort in ("none", "minimal", "low", "medium", "high", "xhigh"):
        assert parse(reasoning={"effort": effort}).reasoning == {"effort": effort, "summary": None}
    assert param_of(base(reasoning={"effort": "max"})) == "reasoning.effort"
    assert param_of(base(reasoning={"summary": "verbose"})) == "reasoning.summary"
    assert param_of(base(reasoning="high")) == "reasoning"


# ---------------------------------------------------------------------------------------------
# Tools: strict schemas
# ---------------------------------------------------------------------------------------------


def test_strict_schema_closes_every_object_and_requires_every_property() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"],
            },
            "tags": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string"}}}},
            "target": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"id": {"type": "integer"}}}]},
            "owner": {"$ref": "#/$defs/person"},
        },
        "required": ["name"],
        "$defs": {"person": {"type": "object", "properties": {"email": {"type": "string"}}}},
    }
    before = copy.deepcopy(schema)
    strict = to_strict_schema(schema)
    assert schema == before  # the input is not modified
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["name", "address", "tags", "target", "owner"]
    assert strict["properties"]["address"]["additionalProperties"] is False
    assert strict["properties"]["address"]["required"] == ["city", "zip"]
    items = strict["properties"]["tags"]["items"]
    assert items["additionalProperties"] is False and items["required"] == ["label"]
    branch = strict["properties"]["target"]["anyOf"][1]
    assert branch["additionalProperties"] is False and branch["required"] == ["id"]
    assert strict["properties"]["target"]["anyOf"][0] == {"type": "string"}
    person = strict["$defs"]["person"]
    assert person["additionalProperties"] is False and person["required"] == ["email"]
    assert strict["properties"]["owner"] == {"$ref": "#/$defs/person"}


def test_strict_schema_object_without_properties() -> None:
    assert to_strict_schema({"type": "object"}) == {
        "type": "object",
        "additionalProperties": False,
        "properties": {},
        "required": [],
    }
    nullable = to_strict_schema({"type": ["object", "null"], "properties": {"a": {}}})
    assert nullable["required"] == ["a"] and nullable["additionalProperties"] is False


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {}, "additionalProperties": True},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"inner": {"type": "object", "additionalProperties": True}}},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        {"anyOf": [{"type": "object", "additionalProperties": True}]},
        {"type": "object", "$defs": {"d": {"type": "object", "additionalProperties": True}}},
    ],
)
def test_not_strictable(schema: dict[str, Any]) -> None:
    with pytest.raises(NotStrictable):
        to_strict_schema(schema)


def test_strict_omitted_normalises() -> None:
    [tool] = normalize_tools([WEATHER])
    assert tool.strict is True
    assert tool.parameters == {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "additionalProperties": False,
        "required": ["location"],
    }
    assert tool.as_dict() == {
        "type": "function",
        "name": "get_weather",
        "description": "Weather at a place.",
        "parameters": tool.parameters,
        "strict": True,
    }
    assert WEATHER["parameters"] == {"type": "object", "properties": {"location": {"type": "string"}}}


def test_strict_omitted_and_unstrictable_passes_through_non_strict() -> None:
    loose = {"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": True}
    for strict in (None, False):
        entry: dict[str, Any] = {"type": "function", "name": "search", "parameters": loose}
        if strict is not None:
            entry["strict"] = strict
        [tool] = normalize_tools([entry])
        assert tool.strict is False
        assert tool.parameters == loose


def test_strict_false_is_passed_as_is() -> None:
    [tool] = normalize_tools([{**WEATHER, "strict": False}])
    assert tool.strict is False and tool.parameters == WEATHER["parameters"]


def test_strict_true_and_unstrictable_is_a_400_on_parameters() -> None:
    loose = {"type": "object", "additionalProperties": True}
    with pytest.raises(InvalidRequest) as info:
        normalize_tools([WEATHER, {"type": "function", "name": "search", "parameters": loose, "strict": True}])
    assert info.value.param == "tools[1].parameters"
    assert "additionalProperties" in info.value.message
    assert (
        param_of(base(tools=[{"type": "function", "name": "s", "parameters": loose, "strict": True}]))
        == "tools[0].parameters"
    )


def test_omitted_parameters() -> None:
    [tool] = normalize_tools([{"type": "function", "name": "ping"}])
    assert tool.strict is True and tool.bare is True
    assert tool.parameters == {"type": "object", "properties": {}, "additionalProperties": False, "required": []}
    assert normalize_tools([WEATHER])[0].bare is False


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ({"type": "function", "name": "x"}, "tools"),
        (["get_weather"], "tools[0]"),
        ([{"type": "holodeck"}], "tools[0].type"),
        ([{"type": "namespace", "name": "ns", "tools": []}], "tools[0].tools"),
        ([{"type": "namespace", "name": "ns", "tools": [{"type": "shell"}]}], "tools[0].tools[0].type"),
        ([{"type": "namespace", "tools": [WEATHER]}], "tools[0].name"),
        ([{"type": "custom", "name": "has space"}], "tools[0].name"),
        ([{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf"}}], "tools[0].format"),
        ([{"type": "shell"}, {"type": "function", "name": "shell"}], "tools[1].name"),
        ([{"name": "x"}], "tools[0].type"),
        ([{"type": "function", "function": {"name": "x", "parameters": {}}}], "tools[0].name"),
        ([{"type": "function", "name": "has space"}], "tools[0].name"),
        ([{"type": "function", "name": "x" * 65}], "tools[0].name"),
        ([WEATHER, {"type": "function", "name": "get_weather"}], "tools[1].name"),
        ([{"type": "function", "name": "x", "description": 1}], "tools[0].description"),
        ([{"type": "function", "name": "x", "parameters": "{}"}], "tools[0].parameters"),
        ([{"type": "function", "name": "x", "strict": "true"}], "tools[0].strict"),
    ],
)
def test_tool_errors(tools: Any, param: str) -> None:
    assert param_of(base(tools=tools)) == param


# ---------------------------------------------------------------------------------------------
# tool_choice and allowed names
# ---------------------------------------------------------------------------------------------


def _tools() -> list[Tool]:
    return normalize_tools([WEATHER, TIME])


def test_tool_choice_forms() -> None:
    tools = _tools()
    assert normalize_tool_choice(None, tools) == "auto"
    for value in ("auto", "none", "required"):
        assert normalize_tool_choice(value, tools) == value
    assert normalize_tool_choice({"type": "function", "name": "get_time", "extra": 1}, tools) == {
        "type": "function",
        "name": "get_time",
    }
    assert normalize_tool_choice(
        {"type": "allowed_tools", "tools": [{"type": "function", "name": "get_time"}]}, tools
    ) == {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]}
    both = normalize_tool_choice(
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "get_time"}, {"type": "function", "name": "get_weather"}],
        },
        tools,
    )
    assert isinstance(both, dict) and both["mode"] == "required"
    assert normalize_tool_choice("none", []) == "none"
    assert normalize_tool_choice("auto", []) == "auto"


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ("any", "tool_choice"),
        (3, "tool_choice"),
        ({"type": "function", "name": "nope"}, "tool_choice.name"),
        ({"type": "function", "function": {"name": "get_time"}}, "tool_choice.name"),
        (
            {"type": "allowed_tools", "mode": "none", "tools": [{"type": "function", "name": "get_time"}]},
            "tool_choice.mode",
        ),
        ({"type": "allowed_tools", "tools": []}, "tool_choice.tools"),
        ({"type": "allowed_tools"}, "tool_choice.tools"),
        (
            {
                "type": "allowed_tools",
                "tools": [{"type": "function", "name": "get_time"}, {"type": "function", "name": "nope"}],
            },
            "tool_choice.tools[1].name",
        ),
        ({"type": "allowed_tools", "tools": [{"type": "custom", "name": "nope"}]}, "tool_choice.tools[0].name"),
        ({"type": "shell"}, "tool_choice.type"),
        ({"type": "mcp"}, "tool_choice.server_label"),
        ({"type": "teleport"}, "tool_choice.type"),
    ],
)
def test_tool_choice_errors(choice: Any, param: str) -> None:
    assert param_of(base(tools=[WEATHER, TIME], tool_choice=choice)) == param


def test_tool_choice_required_needs_tools() -> None:
    assert param_of(base(tool_choice="required")) == "tool_choice"
    forced = {"type": "function", "name": "get_time"}
    assert param_of(base(tool_choice=forced)) == "tool_choice.name"


def test_allowed_tool_names() -> None:
    tools = _tools()
    assert allowed_tool_names("auto", tools) == {"get_weather", "get_time"}
    assert allowed_tool_names("required", tools) == {"get_weather", "get_time"}
    assert allowed_tool_names("none", tools) == frozenset()
    assert allowed_tool_names({"type": "function", "name": "get_time"}, tools) == {"get_time"}
    assert allowed_tool_names(
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]}, tools
    ) == {"get_weather"}
    assert allowed_tool_names("auto", []) == frozenset()


# ---------------------------------------------------------------------------------------------
# items -> Chat Completions messages
# ---------------------------------------------------------------------------------------------


def msgs(raw: Any, instructions: str | None = None, options: ChatOptions | None = None) -> list[dict]:
    return items_to_messages(normalize_input(raw), instructions, options)


def test_instructions_first_as_system_and_developer_as_system() -> None:
    out = msgs(
        [
            {"role": "developer", "content": "Use metric."},
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        instructions="You are helpful.",
    )
    assert out == [
        {"role": "system", "content": "You are helpful."},
        {"role": "system", "content": "Use metric."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    dev = msgs([{"role": "developer", "content": "x"}], "i", ChatOptions(developer_role="developer"))
    assert dev == [{"role": "developer", "content": "i"}, {"role": "developer", "content": "x"}]
    assert msgs("hi", instructions="") == [{"role": "user", "content": "hi"}]


def test_assistant_text_and_following_calls_are_one_message() -> None:
    out = msgs(
        [
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {"role": "assistant", "content": "Checking both."},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"location":"Oslo"}'},
            {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"location":"Rome"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "5°C"},
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": [{"type": "input_text", "text": "21"}, {"type": "input_text", "text": "°C"}],
            },
            {"role": "assistant", "content": "Oslo 5°C, Rome 21°C."},
        ]
    )
    assert out == [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Oslo"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5°C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "21°C"},
        {"role": "assistant", "content": "Oslo 5°C, Rome 21°C."},
    ]


def test_calls_without_text_have_empty_string_content() -> None:
    out = msgs(
        [
            {"role": "user", "content": "go"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "1"},
            {"type": "function_call_output", "call_id": "c2", "output": "2"},
            {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
        ]
    )
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "assistant"]
    for message in (out[1], out[4]):
        assert message["content"] == "" and message["content"] is not None
    assert [c["id"] for c in out[1]["tool_calls"]] == ["c1", "c2"]
    assert out[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert [c["id"] for c in out[4]["tool_calls"]] == ["c3"]
    assert not any(m["role"] == "reasoning" or "reasoning" in m for m in out)


def _tool_replies_follow_their_call(messages: list[dict]) -> bool:
    """The Chat Completions rule: an assistant message with tool_calls is followed directly by
    one tool message per call id (OpenAI: "An assistant message with 'tool_calls' must be
    followed by tool messages responding to each 'tool_call_id'")."""
    for n, message in enumerate(messages):
        calls = message.get("tool_calls")
        if not calls:
            continue
        following = messages[n + 1 : n + 1 + len(calls)]
        if sorted(m.get("tool_call_id") or "" for m in following if m["role"] == "tool") != sorted(
            c["id"] for c in calls
        ):
            return False
    return True


def test_text_after_calls_does_not_separate_calls_from_their_outputs() -> None:
    out = msgs(
        [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"role": "assistant", "content": "Running it now."},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    )
    assert _tool_replies_follow_their_call(out), out


def test_calls_and_outputs_in_order_satisfy_the_chat_rule() -> None:
    out = msgs(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Running it now."},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "ok"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    )
    assert _tool_replies_follow_their_call(out)


def test_assistant_refusal_and_multi_part_text() -> None:
    out = msgs(
        [{"role": "assistant", "content": [{"type": "output_text", "text": "A"}, {"type": "refusal", "refusal": "B"}]}]
    )
    assert out == [{"role": "assistant", "content": "AB"}]


def test_user_parts_mapping() -> None:
    out = msgs(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "one"}, {"type": "input_text", "text": "two"}]},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "https://x.test/i.png", "detail": "high"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
                    {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
                    {"type": "input_file", "file_id": "file-abc"},
                    {"type": "input_file", "file_url": "https://x.test/b.pdf"},
                ],
            },
        ]
    )
    assert out[0] == {"role": "user", "content": "one\ntwo"}
    assert out[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x.test/i.png", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "auto"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_id": "file-abc"}},
            {"type": "text", "text": "[file: https://x.test/b.pdf]"},
        ],
    }


def test_file_url_with_filename_keeps_the_url() -> None:
    out = msgs(
        [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x.test/b.pdf", "filename": "b.pdf"}]}]
    )
    assert "https://x.test/b.pdf" in str(out[0]["content"])


# ---------------------------------------------------------------------------------------------
# build_chat_request
# ---------------------------------------------------------------------------------------------


def chat(
    body: dict[str, Any], *, stream: bool = False, options: ChatOptions | None = None, tools: list[Tool] | None = None
) -> dict[str, Any]:
    req = parse_create_request({"model": "alias", "input": "hi", **body})
    return build_chat_request(
        req, req.input_items, upstream_model="upstream-7b", stream=stream, tools=tools, options=options
    )


def test_minimal_body() -> None:
    body = chat({})
    assert body == {"model": "upstream-7b", "messages": [{"role": "user", "content": "hi"}], "stream": False}


def test_stream_options_only_when_streaming() -> None:
    assert chat({}, stream=True)["stream_options"] == {"include_usage": True}
    assert chat({}, stream=True)["stream"] is True
    assert "stream_options" not in chat({}, stream=False)


def test_max_tokens_param_name() -> None:
    assert chat({"max_output_tokens": 100})["max_tokens"] == 100
    body = chat({"max_output_tokens": 100}, options=ChatOptions(max_tokens_param="max_completion_tokens"))
    assert body["max_completion_tokens"] == 100 and "max_tokens" not in body
    assert "max_tokens" not in chat({})


def test_tools_in_chat_shape() -> None:
    loose = {"type": "object", "additionalProperties": True}
    body = chat({"tools": [WEATHER, {"type": "function", "name": "search", "parameters": loose}]})
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather at a place.",
                "strict": True,
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}},
                    "additionalProperties": False,
                    "required": ["location"],
                },
            },
        },
        {"type": "function", "function": {"name": "search", "parameters": loose}},
    ]
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True
    no_strict = chat({"tools": [WEATHER]}, options=ChatOptions(send_strict=False))
    assert "strict" not in no_strict["tools"][0]["function"]


def test_no_tools_means_no_tool_fields() -> None:
    body = chat({"parallel_tool_calls": False})
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & body.keys()
    # An explicit empty tool list (e.g. all registry tools filtered) overrides the request's.
    assert "tools" not in chat({"tools": [WEATHER]}, tools=[])


@pytest.mark.parametrize(
    ("choice", "options", "expected"),
    [
        ("none", ChatOptions(), "none"),
        ("required", ChatOptions(), "required"),
        (
            {"type": "function", "name": "get_time"},
            ChatOptions(),
            {"type": "function", "function": {"name": "get_time"}},
        ),
        ({"type": "function", "name": "get_time"}, ChatOptions(object_tool_choice=False), "required"),
        (
            {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]},
            ChatOptions(),
            "required",
        ),
        ({"type": "allowed_tools", "tools": [{"type": "function", "name": "get_time"}]}, ChatOptions(), "auto"),
    ],
)
def test_tool_choice_to_chat(choice: Any, options: ChatOptions, expected: Any) -> None:
    body = chat({"tools": [WEATHER, TIME], "tool_choice": choice, "parallel_tool_calls": False}, options=options)
    assert body["tool_choice"] == expected
    assert body["parallel_tool_calls"] is False
    # allowed_tools: every tool stays visible upstream.
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]


def test_sampling_and_reasoning_fields() -> None:
    body = chat(
        {
            "temperature": 0.2,
            "top_p": 0.9,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "reasoning": {"effort": "low", "summary": "auto"},
        }
    )
    assert (body["temperature"], body["top_p"], body["presence_penalty"], body["frequency_penalty"]) == (
        0.2,
        0.9,
        0.5,
        -0.5,
    )
    assert body["reasoning_effort"] == "low"
    assert "reasoning_effort" not in chat({"reasoning": {"summary": "auto"}})
    assert not {"temperature", "top_p", "logprobs", "response_format"} & chat({}).keys()


def test_logprobs_include() -> None:
    body = chat({"include": ["message.output_text.logprobs"], "top_logprobs": 3})
    assert body["logprobs"] is True and body["top_logprobs"] == 3


def test_text_format_to_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = chat(
        {
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "out",
                    "schema": schema,
                    "strict": True,
                    "description": "The answer.",
                }
            }
        }
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": schema, "strict": True, "description": "The answer."},
    }
    loose = chat({"text": {"format": {"type": "json_schema", "name": "out", "schema": schema}}})
    assert loose["response_format"] == {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    assert chat({"text": {"format": {"type": "json_object"}}})["response_format"] == {"type": "json_object"}


def test_extra_body_and_instructions() -> None:
    extra = {"chat_template_kwargs": {"enable_thinking": False}}
    body = chat({"instructions": "Be brief."}, options=ChatOptions(extra_body=extra))
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


# -- background_options (issue 55): the completion window and the continuation id ------------------

BG = {"model": "m", "input": "hi", "background": True}


@pytest.mark.parametrize(
    ("options", "extra"),
    [
        ({"completion_window": "2h", "continuation_id": "batch-7"}, {}),
        ({"completion_window": "8h"}, {"stream": False}),
        ({"completion_window": "soonest"}, {"stream": True}),  # today's background run: may stream
        ({"completion_window": "2h"}, {"service_tier": "default"}),
        ({"continuation_id": "c"}, {}),  # no window: soonest
    ],
)
def test_background_options_accepted(options: dict[str, Any], extra: dict[str, Any]) -> None:
    req = parse_create_request({**BG, **extra, "background_options": options})
    assert req.completion_window == options.get("completion_window", "soonest")
    assert req.continuation_id == options.get("continuation_id")


def test_soonest_needs_no_background() -> None:
    """`soonest` is every response's window: a foreground create may name it."""
    req = parse_create_request({"model": "m", "input": "hi", "background_options": {"completion_window": "soonest"}})
    assert req.completion_window == "soonest" and not req.background
    assert parse_create_request({"model": "m", "input": "hi"}).completion_window == "soonest"


WINDOW = "background_options.completion_window"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**BG, "background_options": "2h"}, "background_options"),
        ({**BG, "background_options": ["2h"]}, "background_options"),
        ({**BG, "background_options": {"completion_window": "4h"}}, WINDOW),
        ({**BG, "background_options": {"completion_window": 2}}, WINDOW),
        ({**BG, "background_options": {"completion_window": True}}, WINDOW),
        ({**BG, "background_options": {"continuation_id": 7}}, "background_options.continuation_id"),
        ({**BG, "background_options": {"continuation_id": "x" * 513}}, "background_options.continuation_id"),
        # As OpenAI requires: the 2h and 8h windows are background, not streamed, Standard processing.
        ({"model": "m", "input": "hi", "background_options": {"completion_window": "2h"}}, WINDOW),
        ({**BG, "background": False, "background_options": {"completion_window": "8h"}}, WINDOW),
        ({**BG, "stream": True, "background_options": {"completion_window": "2h"}}, WINDOW),
        ({**BG, "stream": True, "background_options": {"completion_window": "8h"}}, WINDOW),
        ({**BG, "service_tier": "priority", "background_options": {"completion_window": "2h"}}, WINDOW),
    ],
)
def test_background_options_refused_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_create_request(body)
    assert refused.value.param == param, refused.value.message
