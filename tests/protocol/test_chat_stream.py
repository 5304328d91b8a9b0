"""Upstream Chat Completions replies -> Open Responses events, through the pure protocol core.

Every recorded-style fixture of `tests.fixtures.chunks` goes through
`ChunkDecoder` then `EventBuilder`; the event stream must pass the strict
validator and end with the expected output and usage. The non-streaming body
of the same answer, through `completion_to_deltas`, must end in the same
output (one machine for both paths). Also: `<think>` splitting under every
chunking, failure mid-stream, `allowed_tools` filtering, and a tool loop
(`new_step`, `add_item`) keeping one sequence.

No database, no network: these run in every configuration.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

import pytest

from responses_api.protocol.chat import ChunkDecoder, ThinkSplitter, completion_to_deltas
from responses_api.protocol.deltas import (
    Delta,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from responses_api.protocol.errors import UpstreamError
from responses_api.protocol.events import Event, EventBuilder
from responses_api.protocol.request import CreateRequest, parse_create_request
from responses_api.protocol.response import request_params, response_object
from responses_api.protocol.tools import allowed_tool_names
from tests.fixtures.chunks import (
    FIXTURES,
    OPENAI_PARALLEL_TOOL_CALLS,
    OPENAI_TEXT,
    THINK_TAGS_IN_CONTENT,
    VLLM_REASONING_CONTENT,
    Fixture,
)
from tests.support.stream_validator import validate_events

pytestmark = pytest.mark.embedded

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather at a place.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string"}}},
    },
    {
        "type": "function",
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
    },
    {
        "type": "function",
        "name": "file_write",
        "parameters": {"type": "object", "properties": {"filePath": {"type": "string"}, "content": {"type": "string"}}},
    },
    {
        "type": "function",
        "name": "delete_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def make_request(**body: Any) -> CreateRequest:
    return parse_create_request({"model": "test-model", "input": "hi", "tools": TOOLS, **body})


def make_builder(req: CreateRequest | None = None, *, filter_tools: bool = True) -> EventBuilder:
    req = req or make_request()
    response = response_object(
        response_id="resp_test0001",
        created_at=1756166400,
        status="in_progress",
        model=req.model,
        previous_response_id=None,
        params=request_params(req),
        output=[],
    )
    allowed = allowed_tool_names(req.tool_choice, req.tools) if filter_tools else None
    return EventBuilder(response, allowed_tools=allowed)


def feed_chunks(builder: EventBuilder, chunks: Iterable[dict[str, Any]]) -> list[Event]:
    """One upstream call: every chunk through a fresh decoder, then its close()."""
    decoder = ChunkDecoder()
    events: list[Event] = []
    for chunk in chunks:
        for delta in decoder.feed(chunk):
            events += builder.feed(delta)
    for delta in decoder.close():
        events += builder.feed(delta)
    return events


def feed_deltas(builder: EventBuilder, deltas: Iterable[Delta]) -> list[Event]:
    events: list[Event] = []
    for delta in deltas:
        events += builder.feed(delta)
    return events


def run_stream(chunks: list[dict[str, Any]], req: CreateRequest | None = None) -> tuple[list[Event], EventBuilder]:
    builder = make_builder(req)
    events = builder.start()
    events += feed_chunks(builder, chunks)
    events += builder.finish()
    return events, builder


def run_completion(body: dict[str, Any], req: CreateRequest | None = None) -> tuple[list[Event], EventBuilder]:
    builder = make_builder(req)
    events = builder.start()
    events += feed_deltas(builder, completion_to_deltas(body))
    events += builder.finish()
    return events, builder


def summarize_item(item: dict[str, Any]) -> dict[str, Any]:
    """An output item without its random id, in the shape of the fixtures' `expect`."""
    kind = item["type"]
    if kind == "function_call":
        return {k: item[k] for k in ("type", "status", "call_id", "name", "arguments")}
    if kind in ("message", "reasoning"):
        parts = []
        for part in item["content"]:
            field = "refusal" if part["type"] == "refusal" else "text"
            parts.append({"type": part["type"], field: part[field]})
        return {"type": kind, "status": item["status"], "content": parts}
    return {k: v for k, v in item.items() if k != "id"}


def summarize(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [summarize_item(item) for item in output]


def usage_numbers(usage: dict[str, Any]) -> dict[str, int]:
    return {
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "cached_tokens": usage["input_tokens_details"]["cached_tokens"],
        "reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"],
    }


def check_terminal(terminal: dict[str, Any], expect: dict[str, Any], usage: dict[str, int]) -> None:
    assert terminal["status"] == expect["status"]
    if expect["incomplete_reason"] is None:
        assert terminal["incomplete_details"] is None
    else:
        assert terminal["incomplete_details"] == {"reason": expect["incomplete_reason"]}
    assert summarize(terminal["output"]) == expect["output"]
    assert usage_numbers(terminal["usage"]) == usage
    assert terminal["usage"]["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def llamacpp_content_chunks(pieces: Iterable[str]) -> list[dict[str, Any]]:
    """`content` pieces wrapped as llama-server chunks, ending with finish_reason stop."""
    base = {"created": 1756166403, "id": "chatcmpl-x", "model": "m", "object": "chat.completion.chunk"}
    chunks = [{**base, "choices": [{"finish_reason": None, "index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({**base, "choices": [{"finish_reason": "stop", "index": 0, "delta": {}}]})
    return chunks


def split_reasoning_text(deltas: Iterable[Delta]) -> tuple[str, str]:
    reasoning, text = [], []
    for delta in deltas:
        if isinstance(delta, ReasoningDelta):
            reasoning.append(delta.text)
        elif isinstance(delta, TextDelta):
            text.append(delta.text)
    return "".join(reasoning), "".join(text)


def splitter_result(pieces: Iterable[str]) -> tuple[str, str]:
    splitter = ThinkSplitter()
    out: list[Delta] = []
    for piece in pieces:
        out += splitter.feed(piece)
    out += splitter.flush()
    return split_reasoning_text(out)


def decoder_result(pieces: Iterable[str]) -> tuple[str, str]:
    decoder = ChunkDecoder()
    out: list[Delta] = []
    for chunk in llamacpp_content_chunks(pieces):
        out += decoder.feed(chunk)
    out += decoder.close()
    return split_reasoning_text(out)


def every_split(text: str, cuts: int) -> Iterable[list[str]]:
    """`text` cut at every combination of `cuts` positions (empty pieces included)."""
    for positions in itertools.combinations_with_replacement(range(len(text) + 1), cuts):
        bounds = (0, *positions, len(text))
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


# ---------------------------------------------------------------------------------------------
# Every fixture, streamed and not
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FIXTURES))
def test_fixture_stream(name: str) -> None:
    fixture: Fixture = FIXTURES[name]
    events, builder = run_stream(fixture["chunks"])
    terminal = validate_events(events, final_response=builder.response)
    check_terminal(terminal, fixture["expect"], fixture["expect"]["usage"])
    assert builder.dropped_calls == 0


@pytest.mark.parametrize("name", list(FIXTURES))
def test_fixture_completion(name: str) -> None:
    """The non-streaming body of the same answer gives the expected output."""
    fixture = FIXTURES[name]
    events, builder = run_completion(fixture["completion"])
    terminal = validate_events(events, final_response=builder.response)
    usage = fixture.get("completion_usage", fixture["expect"]["usage"])
    check_terminal(terminal, fixture["expect"], usage)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_same_machine(name: str) -> None:
    """Streamed and non-streamed, one answer ends in one output: same items, same statuses."""
    fixture = FIXTURES[name]
    stream_events, stream_builder = run_stream(fixture["chunks"])
    body_events, body_builder = run_completion(fixture["completion"])
    assert summarize(stream_builder.response["output"]) == summarize(body_builder.response["output"])
    assert stream_builder.response["status"] == body_builder.response["status"]
    assert stream_builder.response["incomplete_details"] == body_builder.response["incomplete_details"]

    # The event grammar is the same too, only the number of deltas differs.
    def shape(events: list[Event]) -> list[str]:
        return [e["type"] for e in events if not e["type"].endswith(".delta")]

    assert shape(stream_events) == shape(body_events)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_decoder_sees_usage_and_finish(name: str) -> None:
    fixture = FIXTURES[name]
    decoder = ChunkDecoder()
    deltas = [d for chunk in fixture["chunks"] for d in decoder.feed(chunk)]
    deltas += list(decoder.close())
    assert isinstance(deltas[-1], Finish)
    assert sum(isinstance(d, Finish) for d in deltas) == 1
    usages = [d for d in deltas if isinstance(d, Usage)]
    expected = fixture["expect"]["usage"]
    has_usage = expected["input_tokens"] > 0
    assert decoder.saw_usage is has_usage
    assert len(usages) == (1 if has_usage else 0)
    assert not any(isinstance(d, (TextDelta, ReasoningDelta)) and not d.text for d in deltas)


def test_finish_reason_mapping() -> None:
    by_name = {name: completion_to_deltas(f["completion"])[-1] for name, f in FIXTURES.items()}
    assert by_name["openai_text"] == Finish("stop")
    assert by_name["openai_length"] == Finish("length")
    assert by_name["azure_content_filter"] == Finish("content_filter")
    assert by_name["openai_parallel_tool_calls"] == Finish("tool_calls")
    legacy = {"choices": [{"message": {"content": "x"}, "finish_reason": "function_call"}]}
    assert completion_to_deltas(legacy)[-1] == Finish("tool_calls")
    unknown = {"choices": [{"message": {"content": "x"}, "finish_reason": "something_new"}]}
    assert completion_to_deltas(unknown)[-1] == Finish("stop")


def test_stream_without_finish_reason_closes_as_stop() -> None:
    """close() still yields one Finish; the caller decides whether a missing one is an error."""
    chunks = OPENAI_TEXT["chunks"][:3]
    decoder = ChunkDecoder()
    deltas = [d for c in chunks for d in decoder.feed(c)]
    assert decoder.finish is None
    assert list(decoder.close()) == [Finish("stop")]
    assert split_reasoning_text(deltas) == ("", "Hello!")


def test_choices_other_than_zero_are_ignored() -> None:
    chunk = {
        "choices": [
            {"index": 1, "delta": {"content": "other"}, "finish_reason": None},
            {"index": 0, "delta": {"content": "mine"}, "finish_reason": None},
        ]
    }
    assert list(ChunkDecoder().feed(chunk)) == [TextDelta("mine")]


def test_error_chunk_mid_stream_raises() -> None:
    decoder = ChunkDecoder()
    with pytest.raises(UpstreamError, match="overloaded"):
        list(decoder.feed({"error": {"message": "Model is overloaded", "type": "server_error"}}))
    with pytest.raises(UpstreamError):
        list(decoder.feed("not a chunk"))


def test_completion_without_choices_raises() -> None:
    with pytest.raises(UpstreamError):
        completion_to_deltas({"object": "chat.completion", "choices": []})
    with pytest.raises(UpstreamError):
        completion_to_deltas({"choices": [{"finish_reason": "stop"}]})


def test_completion_object_arguments_are_serialised() -> None:
    """Some servers return `arguments` as an object; it becomes a JSON string."""
    body = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": {"location": "Oslo"}},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    calls = [d for d in completion_to_deltas(body) if isinstance(d, ToolCallDelta)]
    assert calls == [ToolCallDelta(0, "call_1", "get_weather", '{"location": "Oslo"}')]


def test_reasoning_content_wins_over_reasoning_when_both_are_sent() -> None:
    """vLLM in transition sends both names with the same text: it must not be doubled."""
    chunk = {
        "choices": [{"index": 0, "delta": {"reasoning_content": "abc", "reasoning": "abc"}, "finish_reason": None}]
    }
    assert list(ChunkDecoder().feed(chunk)) == [ReasoningDelta("abc")]


# ---------------------------------------------------------------------------------------------
# <think> tags under every chunking
# ---------------------------------------------------------------------------------------------

THINK_NO_BLANK_LINE = "<think>\nOkay, 2+2 is 4.\n</think>The answer is 4."
THINK_CASES: dict[str, tuple[str, tuple[str, str]]] = {
    "closed": (THINK_NO_BLANK_LINE, ("\nOkay, 2+2 is 4.\n", "The answer is 4.")),
    "leading_whitespace": ("\n <think>why</think>Because.", ("why", "Because.")),
    "never_closed": ("<think>still thinking </thi", ("still thinking </thi", "")),
    "no_think": ("<b>bold</b> <think> later is text", ("", "<b>bold</b> <think> later is text")),
    "look_alike": ("<thinking>not a tag</thinking>", ("", "<thinking>not a tag</thinking>")),
    "empty_think": ("<think></think>Just text.", ("", "Just text.")),
    "lone_open_prefix": ("<thi", ("", "<thi")),
    "close_lookalike_inside": ("<think>a </thinker> b</think>c", ("a </thinker> b", "c")),
}


@pytest.mark.parametrize("case", list(THINK_CASES))
def test_think_splitter_every_two_and_three_way_split(case: str) -> None:
    text, expected = THINK_CASES[case]
    assert splitter_result([text]) == expected
    for pieces in itertools.chain(every_split(text, 1), every_split(text, 2)):
        assert splitter_result(pieces) == expected, pieces


@pytest.mark.parametrize("case", list(THINK_CASES))
def test_think_splitter_one_character_chunks(case: str) -> None:
    text, expected = THINK_CASES[case]
    assert splitter_result(list(text)) == expected
    assert decoder_result(list(text)) == expected


def test_think_fixture_chunking_as_recorded() -> None:
    pieces = [
        c["choices"][0]["delta"].get("content") or ""
        for c in THINK_TAGS_IN_CONTENT["chunks"]
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]
    assert "".join(pieces) == THINK_TAGS_IN_CONTENT["content"]
    assert decoder_result(pieces) == ("\nOkay, 2+2 is 4.\n", "The answer is 4.")


def test_think_fixture_text_every_split() -> None:
    """The fixture's whole content re-chunked at every position: same reasoning/text."""
    text = THINK_TAGS_IN_CONTENT["content"]
    expected = ("\nOkay, 2+2 is 4.\n", "The answer is 4.")
    assert splitter_result([text]) == expected
    failures = [pieces for pieces in every_split(text, 1) if decoder_result(pieces) != expected]
    assert failures == []


def test_think_blank_line_in_its_own_chunk() -> None:
    pieces = ["<think>", "\nOkay, 2+2 is 4.\n", "</think>", "\n\n", "The answer is 4."]
    assert decoder_result(pieces) == ("\nOkay, 2+2 is 4.\n", "The answer is 4.")


def test_think_stream_events_are_valid_at_every_tag_boundary_cut() -> None:
    """Chunkings through the whole machine: always one reasoning item then one message."""
    text = THINK_NO_BLANK_LINE
    close = text.index("</think>")
    # Cuts inside and next to both tags (the interesting ones); the validator is the slow part.
    cuts = sorted({*range(9), *range(close - 1, close + 10), len(text)})
    for pieces in ([text[:n], text[n:]] for n in cuts):
        events, _ = run_stream(llamacpp_content_chunks(pieces))
        terminal = validate_events(events)
        assert summarize(terminal["output"]) == [
            {
                "type": "reasoning",
                "status": "completed",
                "content": [{"type": "reasoning_text", "text": "\nOkay, 2+2 is 4.\n"}],
            },
            {
                "type": "message",
                "status": "completed",
                "content": [{"type": "output_text", "text": "The answer is 4."}],
            },
        ], pieces


# ---------------------------------------------------------------------------------------------
# Failure mid-stream
# ---------------------------------------------------------------------------------------------


def _fail_after(chunks: list[dict[str, Any]], n: int) -> tuple[list[Event], dict[str, Any]]:
    builder = make_builder()
    events = builder.start()
    decoder = ChunkDecoder()
    for chunk in chunks[:n]:
        for delta in decoder.feed(chunk):
            events += builder.feed(delta)
    events += builder.fail(UpstreamError("The upstream closed the connection.", code="upstream_truncated"))
    terminal = validate_events(events, final_response=builder.response)
    return events, terminal


def test_fail_mid_message_keeps_partial_output() -> None:
    events, terminal = _fail_after(OPENAI_TEXT["chunks"], 3)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    error = events[-2]
    assert error["code"] == "upstream_truncated"
    assert error["message"] == "The upstream closed the connection."
    assert error["param"] is None
    assert error["error"]["code"] == "upstream_truncated"
    assert terminal["status"] == "failed"
    assert terminal["error"] == {"code": "upstream_truncated", "message": "The upstream closed the connection."}
    assert terminal["completed_at"] is None
    assert summarize(terminal["output"]) == [
        {"type": "message", "status": "incomplete", "content": [{"type": "output_text", "text": "Hello!"}]}
    ]
    assert terminal["usage"]["total_tokens"] == 0
    assert not any(e["type"] in ("response.completed", "response.incomplete") for e in events)
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(len(events)))


def test_fail_mid_reasoning_keeps_partial_reasoning() -> None:
    _, terminal = _fail_after(VLLM_REASONING_CONTENT["chunks"], 3)
    assert summarize(terminal["output"]) == [
        {
            "type": "reasoning",
            "status": "incomplete",
            "content": [{"type": "reasoning_text", "text": "The user asks for 17*3."}],
        }
    ]


def test_fail_mid_tool_call_keeps_partial_arguments() -> None:
    _, terminal = _fail_after(OPENAI_PARALLEL_TOOL_CALLS["chunks"], 10)
    assert summarize(terminal["output"]) == [
        {
            "type": "function_call",
            "status": "incomplete",
            "call_id": "call_Rb4pZ1XqGm0Q7eYt3vKc8wNs",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France","unit":"celsius"}',
        },
        {
            "type": "function_call",
            "status": "incomplete",
            "call_id": "call_7hJ2mWq9XcV4tLp0sDf6Gy1B",
            "name": "get_weather",
            "arguments": '{"lo',
        },
    ]


def test_fail_after_items_closed() -> None:
    """All items already done (e.g. failure while persisting): output kept, still a valid stream."""
    builder = make_builder()
    events = builder.start() + feed_chunks(builder, OPENAI_TEXT["chunks"]) + builder.end_step()
    events += builder.fail(UpstreamError("late failure"))
    terminal = validate_events(events)
    assert terminal["output"][0]["status"] == "completed"
    assert terminal["usage"]["input_tokens"] == 19


def test_fail_before_any_output() -> None:
    builder = make_builder()
    events = builder.start() + builder.fail(UpstreamError("no upstream"))
    terminal = validate_events(events)
    assert terminal["output"] == []
    assert terminal["error"]["code"] == "upstream_error"


# ---------------------------------------------------------------------------------------------
# allowed_tools
# ---------------------------------------------------------------------------------------------


def _tool_head(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]
                },
                "finish_reason": None,
            }
        ]
    }


def _tool_args(index: int, fragment: str) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]},
                "finish_reason": None,
            }
        ]
    }


_FINISH_TOOL_CALLS = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
MIXED_CALLS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "On it."}, "finish_reason": None}]},
    _tool_head(0, "call_del", "delete_file"),
    _tool_args(0, '{"path":'),
    _tool_head(1, "call_w1", "get_weather"),
    _tool_args(1, '{"location":"Oslo"}'),
    _tool_args(0, '"/etc/passwd"}'),  # a late fragment of the dropped call
    _tool_head(2, "call_t2", "get_time"),
    _tool_args(2, '{"timezone":"UTC"}'),
    _FINISH_TOOL_CALLS,
]


def test_allowed_tools_drops_disallowed_call_entirely() -> None:
    req = make_request(
        tool_choice={
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "get_weather"}, {"type": "function", "name": "get_time"}],
        }
    )
    events, builder = run_stream(MIXED_CALLS, req)
    terminal = validate_events(events, final_response=builder.response)
    # Only the Response's `tools` may name the dropped tool; no event or item does.
    wire = json.dumps([{k: v for k, v in e.items() if k != "response"} for e in events])
    wire += json.dumps([e["response"]["output"] for e in events if "response" in e])
    assert "delete_file" not in wire
    assert "call_del" not in wire and "passwd" not in wire
    assert builder.dropped_calls == 1
    assert summarize(terminal["output"]) == [
        {"type": "message", "status": "completed", "content": [{"type": "output_text", "text": "On it."}]},
        {
            "type": "function_call",
            "status": "completed",
            "call_id": "call_w1",
            "name": "get_weather",
            "arguments": '{"location":"Oslo"}',
        },
        {
            "type": "function_call",
            "status": "completed",
            "call_id": "call_t2",
            "name": "get_time",
            "arguments": '{"timezone":"UTC"}',
        },
    ]
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2]
    used = {e["output_index"] for e in events if "output_index" in e}
    assert used == {0, 1, 2}
    assert [c["call_id"] for c in builder.step_calls] == ["call_w1", "call_t2"]
    # Every tool stays visible in the Response.
    assert [t["name"] for t in terminal["tools"]] == [t["name"] for t in TOOLS]


def test_tool_choice_none_drops_every_call() -> None:
    events, builder = run_stream(MIXED_CALLS, make_request(tool_choice="none"))
    terminal = validate_events(events)
    assert [i["type"] for i in terminal["output"]] == ["message"]
    assert builder.dropped_calls == 3
    assert terminal["status"] == "completed"


def test_forced_function_keeps_only_that_function() -> None:
    req = make_request(tool_choice={"type": "function", "name": "get_time"})
    events, builder = run_stream(MIXED_CALLS, req)
    terminal = validate_events(events)
    assert [(i["type"], i.get("name")) for i in terminal["output"]] == [
        ("message", None),
        ("function_call", "get_time"),
    ]
    assert builder.dropped_calls == 2


def test_no_filter_without_allowed_set() -> None:
    builder = make_builder(filter_tools=False)
    events = builder.start() + feed_chunks(builder, MIXED_CALLS) + builder.finish()
    terminal = validate_events(events)
    assert [i.get("name") for i in terminal["output"]] == [None, "delete_file", "get_weather", "get_time"]
    assert terminal["output"][1]["arguments"] == '{"path":"/etc/passwd"}'


# ---------------------------------------------------------------------------------------------
# Tool loop: several upstream calls, one sequence
# ---------------------------------------------------------------------------------------------


def _output_item(call: dict[str, Any], output: str) -> dict[str, Any]:
    return {
        "id": f"fco_{call['call_id']}",
        "type": "function_call_output",
        "call_id": call["call_id"],
        "output": output,
        "status": "completed",
    }


def test_sequence_numbers_continue_across_steps() -> None:
    builder = make_builder()
    events = builder.start()
    events += feed_chunks(builder, OPENAI_PARALLEL_TOOL_CALLS["chunks"])
    events += builder.end_step()
    calls = list(builder.step_calls)
    assert [c["call_id"] for c in calls] == ["call_Rb4pZ1XqGm0Q7eYt3vKc8wNs", "call_7hJ2mWq9XcV4tLp0sDf6Gy1B"]
    for call, text in zip(calls, ("18°C, cloudy", "24°C, clear"), strict=True):
        added = builder.add_item(_output_item(call, text))
        assert [e["type"] for e in added] == ["response.output_item.added", "response.output_item.done"]
        assert added[0]["item"]["status"] == "in_progress"
        events += added
    builder.new_step()
    assert builder.step_calls == [] and builder.finish_reason is None
    events += feed_chunks(builder, OPENAI_TEXT["chunks"])
    events += builder.finish()

    terminal = validate_events(events, final_response=builder.response)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [i["type"] for i in terminal["output"]] == [
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3, 4]
    assert terminal["status"] == "completed"
    assert usage_numbers(terminal["usage"]) == {
        "input_tokens": 88 + 19,
        "output_tokens": 57 + 9,
        "cached_tokens": 64,
        "reasoning_tokens": 0,
    }
    assert sum(e["type"] == "response.created" for e in events) == 1
    assert sum(e["type"] == "response.completed" for e in events) == 1


def test_next_step_reuses_upstream_indexes_and_resets_suppression() -> None:
    """Step 2's call at index 0 is a new item, even though index 0 was dropped in step 1."""
    req = make_request(
        tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]}
    )
    builder = make_builder(req)
    events = builder.start()
    events += feed_chunks(
        builder,
        [
            _tool_head(0, "call_x", "delete_file"),
            _tool_args(0, "{}"),
            _tool_head(1, "call_a", "get_weather"),
            _tool_args(1, "{}"),
            _FINISH_TOOL_CALLS,
        ],
    )
    events += builder.end_step()
    events += builder.add_item(_output_item(builder.step_calls[0], "sunny"))
    builder.new_step()
    events += feed_chunks(
        builder, [_tool_head(0, "call_b", "get_weather"), _tool_args(0, '{"location":"Bergen"}'), _FINISH_TOOL_CALLS]
    )
    events += builder.finish()
    terminal = validate_events(events, final_response=builder.response)
    assert [(i["type"], i.get("call_id")) for i in terminal["output"]] == [
        ("function_call", "call_a"),
        ("function_call_output", "call_a"),
        ("function_call", "call_b"),
    ]
    assert terminal["output"][2]["arguments"] == '{"location":"Bergen"}'
    assert builder.dropped_calls == 1


def test_incomplete_in_a_later_step() -> None:
    """finish_reason length in step 2: the last item ends incomplete, and so does the response."""
    builder = make_builder()
    events = builder.start()
    events += feed_chunks(builder, [_tool_head(0, "call_a", "get_weather"), _tool_args(0, "{}"), _FINISH_TOOL_CALLS])
    events += builder.end_step()
    events += builder.add_item(_output_item(builder.step_calls[0], "sunny"))
    builder.new_step()
    events += feed_chunks(builder, FIXTURES["openai_length"]["chunks"])
    events += builder.finish()
    terminal = validate_events(events)
    assert terminal["status"] == "incomplete"
    assert terminal["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["status"] for i in terminal["output"]] == ["completed", "completed", "incomplete"]


def test_max_tool_calls_reason_after_step() -> None:
    builder = make_builder()
    events = builder.start()
    events += feed_chunks(builder, [_tool_head(0, "call_a", "get_weather"), _tool_args(0, "{}"), _FINISH_TOOL_CALLS])
    events += builder.end_step()
    events += builder.add_item(_output_item(builder.step_calls[0], "sunny"))
    events += builder.finish(incomplete_reason="max_tool_calls")
    terminal = validate_events(events)
    assert terminal["status"] == "incomplete"
    assert terminal["incomplete_details"] == {"reason": "max_tool_calls"}


def test_background_start_then_begin() -> None:
    builder = make_builder(make_request(background=True))
    events = builder.start(queued=True) + builder.begin()
    events += feed_chunks(builder, OPENAI_TEXT["chunks"]) + builder.finish()
    terminal = validate_events(events, background=True)
    assert [e["type"] for e in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert terminal["background"] is True


def test_sequence_number_can_start_later() -> None:
    """A builder resumed with `sequence_number` continues from there (a resumed stream)."""
    builder = EventBuilder(make_builder().response, sequence_number=7)
    events = builder.start()
    assert [e["sequence_number"] for e in events] == [7, 8]


# ---------------------------------------------------------------------------------------------
# Tool-call fragments in unusual orders
# ---------------------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_tool_call_name_in_a_later_fragment() -> None:
    """Nothing is opened before the name is known; arguments that came first are kept."""
    chunks = [
        _chunk(
            {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"arguments": '{"location"'}}]}
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": ':"Oslo"'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
        _chunk({}, "tool_calls"),
    ]
    events, _ = run_stream(chunks)
    terminal = validate_events(events)
    assert summarize(terminal["output"]) == [
        {
            "type": "function_call",
            "status": "completed",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"location":"Oslo"}',
        }
    ]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["name"] == "get_weather"


def test_tool_call_that_never_gets_a_name_is_dropped() -> None:
    chunks = [
        _chunk({"content": "Checking."}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"arguments": "{}"}}]}),
        _chunk({}, "tool_calls"),
    ]
    events, builder = run_stream(chunks)
    terminal = validate_events(events)
    assert [i["type"] for i in terminal["output"]] == ["message"]
    assert builder.dropped_calls == 1


def test_text_after_tool_calls_opens_a_new_message() -> None:
    chunks = [
        _chunk({"content": "First."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({"content": "Then."}),
        _chunk({"reasoning_content": "hmm"}),
        _chunk({"content": "Done."}),
        _chunk({}, "stop"),
    ]
    events, _ = run_stream(chunks)
    terminal = validate_events(events)
    assert [(i["type"], i["status"]) for i in terminal["output"]] == [
        ("message", "completed"),
        ("function_call", "completed"),
        ("message", "completed"),
        ("reasoning", "completed"),
        ("message", "completed"),
    ]


def test_length_while_a_tool_call_is_open() -> None:
    """Cut off mid-arguments: the call is the last item and ends incomplete."""
    chunks = [
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"loc'},
                    }
                ]
            }
        ),
        _chunk({}, "length"),
    ]
    events, _ = run_stream(chunks)
    terminal = validate_events(events)
    assert terminal["status"] == "incomplete"
    assert summarize(terminal["output"]) == [
        {
            "type": "function_call",
            "status": "incomplete",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"loc',
        }
    ]


def test_refusal_then_text_in_one_message() -> None:
    chunks = [_chunk({"refusal": "No."}), _chunk({"content": "But here is why."}), _chunk({}, "stop")]
    events, _ = run_stream(chunks)
    terminal = validate_events(events)
    assert summarize(terminal["output"]) == [
        {
            "type": "message",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": "No."}, {"type": "output_text", "text": "But here is why."}],
        }
    ]


WHITESPACE_BEFORE_CALL = [
    _chunk({"role": "assistant", "content": "\n\n"}),
    _chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ]
        }
    ),
    _chunk({}, "tool_calls"),
]


def test_whitespace_content_before_tool_call_keeps_its_place() -> None:
    _, stream_builder = run_stream(WHITESPACE_BEFORE_CALL)
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "\n\n",
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                    ],
                },
            }
        ]
    }
    _, body_builder = run_completion(body)
    assert summarize(stream_builder.response["output"]) == summarize(body_builder.response["output"])


def test_whitespace_content_before_tool_call_is_a_valid_stream() -> None:
    events, _ = run_stream(WHITESPACE_BEFORE_CALL)
    terminal = validate_events(events)
    assert terminal["status"] == "completed"
    assert "function_call" in [i["type"] for i in terminal["output"]]


def test_streamed_object_arguments_are_serialised_like_the_non_stream_path() -> None:
    chunks = [
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"location": "Oslo"}},
                    }
                ]
            }
        ),
        _chunk({}, "tool_calls"),
    ]
    events, builder = run_stream(chunks)
    validate_events(events)
    assert json.loads(builder.response["output"][0]["arguments"]) == {"location": "Oslo"}
