"""Self-tests of tests/support/stream_validator.py: realistic valid streams pass, and each
targeted mutation of one fails with the intended rule (so the validator cannot silently rot)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any, cast

import pytest

from tests.support.stream_validator import (
    StreamViolation,
    event_schema_names,
    parse_sse,
    validate_events,
    validate_response_object,
    validate_sse,
)

Event = dict[str, Any]


@pytest.fixture(autouse=True)
def _fresh_caches() -> None:
    """Shadow tests/conftest.py's autouse cache reset: it imports Django models, and these
    self-tests are pure (they run with `-p no:django`, no settings configured)."""


USAGE: dict[str, Any] = {
    "input_tokens": 12,
    "output_tokens": 7,
    "total_tokens": 19,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def make_response(**overrides: Any) -> dict[str, Any]:
    """A complete Response object: every PROTOCOL.md field present, schema-valid."""
    resp: dict[str, Any] = {
        "id": "resp_0123456789abcdef",
        "object": "response",
        "created_at": 1_760_000_000,
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": "test-model",
        "previous_response_id": None,
        "instructions": None,
        "output": [],
        "tools": [],
        "tool_choice": "auto",
        "truncation": "disabled",
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "temperature": 1.0,
        "reasoning": None,
        "usage": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "store": True,
        "background": False,
        "service_tier": "default",
        "metadata": {},
        "safety_identifier": None,
        "prompt_cache_key": None,
        "conversation": None,
        "user": None,
    }
    resp.update(overrides)
    return resp


class StreamBuilder:
    """Emits events the way a correct gateway would, numbering them and tracking items so the
    terminal Response carries exactly the items closed by output_item.done."""

    def __init__(self, *, background: bool = False, **resp: Any) -> None:
        self.background = background
        self.events: list[Event] = []
        self.items: dict[int, dict[str, Any]] = {}
        self.done: dict[int, dict[str, Any]] = {}
        self.resp = make_response(background=background, **resp)
        self._n = 0

    # -- low level --------------------------------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> Event:
        ev = {"type": type_, "sequence_number": len(self.events), **fields}
        self.events.append(ev)
        return ev

    def snapshot(self, status: str, **extra: Any) -> dict[str, Any]:
        resp = copy.deepcopy(self.resp)
        resp.update(status=status, **copy.deepcopy(extra))
        return resp

    def new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n:04d}"

    def start(self) -> StreamBuilder:
        if self.background:
            self.emit("response.created", response=self.snapshot("queued"))
            self.emit("response.queued", response=self.snapshot("queued"))
        else:
            self.emit("response.created", response=self.snapshot("in_progress"))
        self.emit("response.in_progress", response=self.snapshot("in_progress"))
        return self

    def add(self, item: dict[str, Any]) -> int:
        idx = len(self.items)
        self.items[idx] = item
        self.emit("response.output_item.added", output_index=idx, item=copy.deepcopy(item))
        return idx

    def close(self, idx: int, status: str = "completed") -> None:
        item = self.items[idx]
        item["status"] = status
        self.done[idx] = copy.deepcopy(item)
        self.emit("response.output_item.done", output_index=idx, item=copy.deepcopy(item))

    def text_part(self, idx: int, chunks: list[str], kind: str = "output_text") -> None:
        item = self.items[idx]
        ci = len(item["content"])
        key = {"output_text": "text", "refusal": "refusal", "reasoning_text": "text"}[kind]
        part: dict[str, Any] = {"type": kind, key: ""}
        if kind == "output_text":
            part.update(annotations=[], logprobs=[])
        common = {"item_id": item["id"], "output_index": idx, "content_index": ci}
        self.emit("response.content_part.added", **common, part=copy.deepcopy(part))
        family = {
            "output_text": "response.output_text",
            "refusal": "response.refusal",
            "reasoning_text": "response.reasoning_text",
        }[kind]
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        for chunk in chunks:
            self.emit(f"{family}.delta", **common, delta=chunk, **extra)
        full = "".join(chunks)
        self.emit(f"{family}.done", **common, **{key: full}, **extra)
        part[key] = full
        self.emit("response.content_part.done", **common, part=copy.deepcopy(part))
        item["content"].append(part)

    # -- items ------------------------------------------------------------------------------

    def message(self, chunks: list[str], *, kind: str = "output_text", status: str = "completed") -> int:
        idx = self.add(
            {"id": self.new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        )
        self.text_part(idx, chunks, kind)
        self.close(idx, status)
        return idx

    def open_call(self, name: str) -> int:
        return self.add(
            {
                "id": self.new_id("fc"),
                "type": "function_call",
                "status": "in_progress",
                "call_id": self.new_id("call"),
                "name": name,
                "arguments": "",
            }
        )

    def args(self, idx: int, chunk: str) -> None:
        item = self.items[idx]
        item["arguments"] += chunk
        self.emit("response.function_call_arguments.delta", item_id=item["id"], output_index=idx, delta=chunk)

    def args_done(self, idx: int) -> None:
        item = self.items[idx]
        self.emit(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=idx,
            name=item["name"],
            arguments=item["arguments"],
        )

    def reasoning(self, text: list[str], summary: list[list[str]]) -> int:
        idx = self.add(
            {"id": self.new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": [], "content": []}
        )
        item = self.items[idx]
        for si, chunks in enumerate(summary):
            common = {"item_id": item["id"], "output_index": idx, "summary_index": si}
            self.emit("response.reasoning_summary_part.added", **common, part={"type": "summary_text", "text": ""})
            for chunk in chunks:
                self.emit("response.reasoning_summary_text.delta", **common, delta=chunk)
            full = "".join(chunks)
            self.emit("response.reasoning_summary_text.done", **common, text=full)
            self.emit("response.reasoning_summary_part.done", **common, part={"type": "summary_text", "text": full})
            item["summary"].append({"type": "summary_text", "text": full})
        self.text_part(idx, text, "reasoning_text")
        self.close(idx)
        return idx

    # -- terminal ---------------------------------------------------------------------------

    def output(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.done[k]) for k in sorted(self.done)]

    def complete(self, usage: dict[str, Any] | None = None) -> list[Event]:
        self.emit(
            "response.completed",
            response=self.snapshot("completed", output=self.output(), usage=usage or USAGE, completed_at=1_760_000_003),
        )
        return self.events

    def incomplete(self, reason: str = "max_output_tokens") -> list[Event]:
        self.emit(
            "response.incomplete",
            response=self.snapshot(
                "incomplete", output=self.output(), usage=USAGE, incomplete_details={"reason": reason}
            ),
        )
        return self.events

    def error(self, code: str = "server_error", message: str = "upstream failed") -> None:
        self.emit(
            "error",
            code=code,
            message=message,
            param=None,
            error={"type": "server_error", "code": code, "message": message, "param": None},
        )

    def fail(self, code: str = "server_error", message: str = "upstream failed") -> list[Event]:
        self.emit(
            "response.failed",
            response=self.snapshot(
                "failed", output=self.output(), usage=USAGE, error={"code": code, "message": message}
            ),
        )
        return self.events


def render(events: list[Event], *, keepalive: bool = True) -> str:
    frames = [": keep-alive\n\n"] if keepalive else []
    for ev in events:
        frames.append(f"event: {ev['type']}\ndata: {json.dumps(ev, separators=(',', ':'))}\n\n")
    return "".join(frames) + "data: [DONE]\n\n"


def renumber(events: list[Event]) -> list[Event]:
    for n, ev in enumerate(events):
        ev["sequence_number"] = n
    return events


# ---------------------------------------------------------------------------------------------
# Valid fixtures
# ---------------------------------------------------------------------------------------------


def text_stream() -> list[Event]:
    b = StreamBuilder().start()
    b.message(["Hel", "lo, ", "wörld", "!"])
    return b.complete()


def parallel_calls_stream() -> list[Event]:
    b = StreamBuilder(tools=[WEATHER_TOOL]).start()
    a, c = b.open_call("get_weather"), b.open_call("get_weather")
    # Upstreams interleave tool-call fragments by index; the events follow that interleaving.
    b.args(a, '{"city":')
    b.args(c, '{"city":"Oslo"}')
    b.args(a, '"Paris"}')
    b.args_done(c)
    b.args_done(a)
    b.close(c)
    b.close(a)
    return b.complete()


def reasoning_stream() -> list[Event]:
    b = StreamBuilder(reasoning={"effort": "medium", "summary": "auto"}).start()
    b.reasoning(["Let me think", " about it."], [["User wants", " a greeting."], ["Be brief."]])
    b.message(["Hi!"])
    usage = copy.deepcopy(USAGE)
    usage["output_tokens_details"] = {"reasoning_tokens": 4}
    return b.complete(usage)


def refusal_stream() -> list[Event]:
    b = StreamBuilder().start()
    b.message(["I can't ", "help with that."], kind="refusal")
    return b.complete()


def incomplete_stream() -> list[Event]:
    b = StreamBuilder(max_output_tokens=5).start()
    b.message(["Once upon", " a time"], status="incomplete")
    return b.incomplete("max_output_tokens")


def failed_stream() -> list[Event]:
    b = StreamBuilder().start()
    idx = b.add({"id": "msg_fail", "type": "message", "role": "assistant", "status": "in_progress", "content": []})
    b.emit(
        "response.content_part.added",
        item_id="msg_fail",
        output_index=idx,
        content_index=0,
        part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
    )
    b.emit(
        "response.output_text.delta",
        item_id="msg_fail",
        output_index=idx,
        content_index=0,
        delta="Partial",
        logprobs=[],
    )
    b.error()
    return b.fail()


def background_stream() -> list[Event]:
    b = StreamBuilder(background=True).start()
    b.message(["Done in the background."])
    return b.complete()


VALID: dict[str, tuple[Callable[[], list[Event]], dict[str, Any]]] = {
    "text": (text_stream, {}),
    "parallel_calls": (parallel_calls_stream, {}),
    "reasoning": (reasoning_stream, {}),
    "refusal": (refusal_stream, {}),
    "incomplete": (incomplete_stream, {}),
    "failed": (failed_stream, {}),
    "background": (background_stream, {"background": True}),
}


@pytest.mark.parametrize("name", VALID)
def test_valid_stream_passes_as_events_and_as_sse(name: str) -> None:
    build, kw = VALID[name]
    events = build()
    final = validate_events(events, **kw)
    assert final == events[-1]["response"]
    assert validate_sse(render(events), **kw) == final
    assert validate_sse(render(events).encode(), final_response=copy.deepcopy(final), **kw) == final


@pytest.mark.parametrize("name", VALID)
def test_every_resumed_tail_passes(name: str) -> None:
    build, kw = VALID[name]
    events = build()
    for k in range(-1, len(events) - 1):
        validate_events(events[k + 1 :], starting_after=k, **kw)


# A failed response may end without an error event and with a half-streamed item, so in the
# failed fixture losing or repeating these events still leaves a legal stream.
LEGAL_DROPS = {"failed": {"error", "response.output_text.delta"}}


@pytest.mark.parametrize("name", VALID)
def test_dropping_or_duplicating_any_event_is_caught(name: str) -> None:
    build, kw = VALID[name]
    events = build()
    for k, ev in enumerate(events):
        if ev["type"] in LEGAL_DROPS.get(name, ()):
            continue
        with pytest.raises(StreamViolation):
            validate_events(renumber(copy.deepcopy(events[:k] + events[k + 1 :])), **kw)
        with pytest.raises(StreamViolation):
            validate_events(renumber(copy.deepcopy(events[: k + 1] + events[k:])), **kw)


def test_fixture_shapes() -> None:
    # Guards against the builder degenerating into trivial streams.
    types = [e["type"] for e in reasoning_stream()]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert "response.reasoning_summary_part.added" in types
    assert "response.reasoning_text.delta" in types
    assert [e["type"] for e in background_stream()][:3] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert len(parallel_calls_stream()[-1]["response"]["output"]) == 2


def test_sse_comments_chunks_and_gateway_events_are_accepted() -> None:
    events = text_stream()
    events.insert(3, {"type": "gateway:upstream", "sequence_number": 0, "upstream": "a"})
    renumber(events)
    raw = render(events)
    frames = [f + "\n\n" for f in raw[:-2].split("\n\n")]
    frames.insert(5, ": keep-alive\n\n")
    assert validate_sse([f.encode() for f in frames]) == events[-1]["response"]
    assert [e["type"] for e in parse_sse(raw)] == [e["type"] for e in events]
    # A gateway event still takes part in the numbering.
    del events[3]
    with pytest.raises(StreamViolation, match="sequence"):
        validate_events([*events[:3], {"type": "gateway:x", "sequence_number": 7}, *events[3:]])


def test_cancelled_background_response_may_end_with_failed() -> None:
    b = StreamBuilder(background=True).start()
    b.add({"id": "msg_c", "type": "message", "role": "assistant", "status": "in_progress", "content": []})
    b.emit("response.failed", response=b.snapshot("cancelled", usage=USAGE))
    assert validate_events(b.events, background=True)["status"] == "cancelled"


def test_compiled_schemas_agree_with_the_spec() -> None:
    # The validator inlines $refs and rewrites discriminated oneOfs for speed; check that this
    # accepts and rejects exactly what the plain spec does, on perturbed real events.
    from jsonschema import Draft202012Validator

    from tests.support import stream_validator as sv

    doc = json.loads(sv.SPEC_PATH.read_text(encoding="utf-8"))
    sv._patch_openresponses(doc)
    names = event_schema_names()
    samples: dict[str, Event] = {}
    for build, _ in VALID.values():
        for ev in build():
            samples.setdefault(ev["type"], ev)

    def perturbed(node: Any) -> Any:
        # Yield copies of node with one key deleted or one `type` renamed, at any depth.
        if isinstance(node, dict):
            for k in node:
                yield {key: v for key, v in node.items() if key != k}
                if k == "type":
                    yield {**node, "type": "bogus"}
                for sub in perturbed(node[k]):
                    yield {**node, k: sub}
        elif isinstance(node, list):
            for i, x in enumerate(node):
                for sub in perturbed(x):
                    yield [*node[:i], sub, *node[i + 1 :]]

    checked = 0
    for etype, ev in samples.items():
        name = names[etype]
        if name.startswith(("openai:", "sdk:")):
            continue
        plain = Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": doc["components"]})
        fast = sv._validator(name)
        for inst in [ev, *perturbed(ev)]:
            assert plain.is_valid(inst) == fast.is_valid(inst), (etype, inst)
            checked += 1
    assert checked > 300


def test_open_responses_reasoning_event_names_are_accepted() -> None:
    events = reasoning_stream()
    for ev in events:
        ev["type"] = ev["type"].replace("response.reasoning_text.", "response.reasoning.")
    # The Open Responses names, which the gateway itself never sends (it sends OpenAI's).
    validate_events(events, surface=False)


def test_event_schema_map_covers_the_spec() -> None:
    names = event_schema_names()
    assert names["response.output_text.delta"] == "ResponseOutputTextDeltaStreamingEvent"
    assert names["error"] == "ErrorStreamingEvent"
    assert names["response.reasoning.delta"] == "ResponseReasoningDeltaStreamingEvent"
    assert names["response.reasoning_text.delta"].startswith("openai:")
    assert len(names) >= 26


def test_json_schema_text_format_is_accepted() -> None:
    fmt = {
        "type": "json_schema",
        "name": "w",
        "description": None,
        "strict": True,
        "schema": {"type": "object", "properties": {}, "additionalProperties": False},
    }
    validate_response_object(make_response(text={"format": fmt, "verbosity": "medium"}))


# ---------------------------------------------------------------------------------------------
# Mutations: each must fail, and for the intended reason.
# ---------------------------------------------------------------------------------------------


def _find(events: list[Event], type_: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["type"] == type_][nth]


def _delete(type_: str) -> Callable[[list[Event]], list[Event]]:
    def mut(ev: list[Event]) -> list[Event]:
        del ev[_find(ev, type_)]
        return renumber(ev)

    return mut


def _gap(ev: list[Event]) -> list[Event]:
    for e in ev[3:]:
        e["sequence_number"] += 1
    return ev


def _start_at_one(ev: list[Event]) -> list[Event]:
    for e in ev:
        e["sequence_number"] += 1
    return ev


def _delta_before_part(ev: list[Event]) -> list[Event]:
    i = _find(ev, "response.content_part.added")
    ev[i], ev[i + 1] = ev[i + 1], ev[i]
    return renumber(ev)


def _wrong_output_index(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.output_text.delta")]["output_index"] = 1
    return ev


def _created_with_output(ev: list[Event]) -> list[Event]:
    ev[0]["response"]["output"] = [copy.deepcopy(ev[-1]["response"]["output"][0])]
    return ev


def _no_usage(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["usage"] = None
    return ev


def _completed_after_error(ev: list[Event]) -> list[Event]:
    ev.insert(
        len(ev) - 1,
        {
            "type": "error",
            "sequence_number": 0,
            "code": "server_error",
            "message": "boom",
            "param": None,
            "error": {"type": "server_error", "code": "server_error", "message": "boom", "param": None},
        },
    )
    return renumber(ev)


def _done_text_differs(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.output_text.done")]["text"] = "Hello, world!"
    return ev


def _missing_response_field(ev: list[Event]) -> list[Event]:
    del ev[-1]["response"]["conversation"]
    return ev


def _missing_item_id(ev: list[Event]) -> list[Event]:
    del ev[_find(ev, "response.output_item.added")]["item"]["id"]
    return ev


def _in_progress_first(ev: list[Event]) -> list[Event]:
    ev[0], ev[1] = ev[1], ev[0]
    return renumber(ev)


def _two_terminals(ev: list[Event]) -> list[Event]:
    ev.append(copy.deepcopy(ev[-1]))
    return renumber(ev)


def _unknown_type(ev: list[Event]) -> list[Event]:
    ev.insert(3, {"type": "response.heartbeat", "sequence_number": 0})
    return renumber(ev)


def _item_content_differs(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.output_item.done")]["item"]["content"][0]["text"] = "Hello"
    return ev


def _terminal_output_differs(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["output"][0]["content"][0]["text"] = "Hello"
    return ev


def _item_left_open(ev: list[Event]) -> list[Event]:
    del ev[_find(ev, "response.output_item.done")]
    ev[-1]["response"]["output"] = []
    return renumber(ev)


def _wrong_item_id(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.output_text.delta", 1)]["item_id"] = "msg_other"
    return ev


def _added_message_with_content(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.output_item.added")]["item"]["content"] = [
        {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    ]
    return ev


def _added_part_with_text(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.content_part.added")]["part"]["text"] = "Hel"
    return ev


def _part_done_differs(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.content_part.done")]["part"]["text"] = "Hello"
    return ev


def _usage_total_wrong(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["usage"]["total_tokens"] = 20
    return ev


def _text_without_verbosity(ev: list[Event]) -> list[Event]:
    del ev[-1]["response"]["text"]["verbosity"]
    return ev


def _incomplete_reason_missing(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["incomplete_details"] = None
    return ev


def _incomplete_item_but_completed(ev: list[Event]) -> list[Event]:
    last = ev[-1]
    last["type"] = "response.completed"
    last["response"].update(status="completed", incomplete_details=None, completed_at=1_760_000_003)
    return ev


def _failed_without_error(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["error"] = None
    return ev


def _error_shapes_disagree(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "error")]["error"]["message"] = "something else"
    return ev


def _error_without_flat_fields(ev: list[Event]) -> list[Event]:
    e = ev[_find(ev, "error")]
    for key in ("code", "message", "param"):
        del e[key]
    return ev


def _error_not_before_failed(ev: list[Event]) -> list[Event]:
    i = _find(ev, "error")
    ev.insert(i + 1, copy.deepcopy(ev[i - 1]))  # another delta after the error
    return renumber(ev)


def _delta_without_logprobs(ev: list[Event]) -> list[Event]:
    del ev[_find(ev, "response.output_text.delta")]["logprobs"]
    return ev


def _args_done_without_name(ev: list[Event]) -> list[Event]:
    del ev[_find(ev, "response.function_call_arguments.done")]["name"]
    return ev


def _args_done_differs(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.function_call_arguments.done")]["arguments"] = '{"city":"Rome"}'
    return ev


def _content_part_on_call(ev: list[Event]) -> list[Event]:
    i = _find(ev, "response.function_call_arguments.delta")
    ev.insert(
        i,
        {
            "type": "response.content_part.added",
            "sequence_number": 0,
            "item_id": ev[i]["item_id"],
            "output_index": ev[i]["output_index"],
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        },
    )
    return renumber(ev)


def _args_on_message(ev: list[Event]) -> list[Event]:
    i = _find(ev, "response.output_text.delta")
    ev.insert(
        i,
        {
            "type": "response.function_call_arguments.delta",
            "sequence_number": 0,
            "item_id": ev[i]["item_id"],
            "output_index": ev[i]["output_index"],
            "delta": "{}",
        },
    )
    return renumber(ev)


def _call_added_with_args(ev: list[Event]) -> list[Event]:
    ev[_find(ev, "response.output_item.added")]["item"]["arguments"] = "{"
    return ev


def _summary_index_skips(ev: list[Event]) -> list[Event]:
    for e in ev:
        if e.get("summary_index") == 1:
            e["summary_index"] = 2
    return ev


def _summary_done_before_text_done(ev: list[Event]) -> list[Event]:
    del ev[_find(ev, "response.reasoning_summary_text.done")]
    return renumber(ev)


def _item_done_status_in_progress(ev: list[Event]) -> list[Event]:
    i = _find(ev, "response.output_item.done")
    ev[i]["item"]["status"] = "in_progress"
    return ev


def _sequence_as_string(ev: list[Event]) -> list[Event]:
    ev[2]["sequence_number"] = "2"
    return ev


def _lifecycle_id_changes(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["id"] = "resp_other"
    return ev


def _created_completed_status(ev: list[Event]) -> list[Event]:
    ev[0]["response"]["status"] = "completed"
    ev[0]["response"]["completed_at"] = 1_760_000_003
    ev[0]["response"]["usage"] = USAGE
    return ev


def _missing_tool_description(ev: list[Event]) -> list[Event]:
    del ev[-1]["response"]["tools"][0]["description"]
    return ev


def _reasoning_one_key(ev: list[Event]) -> list[Event]:
    ev[-1]["response"]["reasoning"] = {"effort": "low"}
    return ev


EVENT_MUTATIONS: list[
    tuple[str, Callable[[], list[Event]], Callable[[list[Event]], list[Event]], str, dict[str, Any]]
] = [
    ("sequence gap", text_stream, _gap, "sequence", {}),
    ("sequence starts at 1", text_stream, _start_at_one, "sequence", {}),
    ("sequence_number not int", text_stream, _sequence_as_string, "sequence", {}),
    ("missing output_text.done", text_stream, _delete("response.output_text.done"), "delta-order", {}),
    ("delta before content_part.added", text_stream, _delta_before_part, "delta-order", {}),
    ("wrong output_index", text_stream, _wrong_output_index, "output-index", {}),
    ("created with output", text_stream, _created_with_output, "lifecycle-output", {}),
    ("created already completed", text_stream, _created_completed_status, "lifecycle-status", {}),
    ("in_progress before created", text_stream, _in_progress_first, "order", {}),
    ("completed without usage", text_stream, _no_usage, "usage", {}),
    ("usage total wrong", text_stream, _usage_total_wrong, "usage", {}),
    ("completed after error", text_stream, _completed_after_error, "error-placement", {}),
    ("done text != deltas", text_stream, _done_text_differs, "text-mismatch", {}),
    ("missing Response field", text_stream, _missing_response_field, "response-field", {}),
    ("text without verbosity", text_stream, _text_without_verbosity, "response-field", {}),
    ("missing item id", text_stream, _missing_item_id, "schema", {}),
    ("two terminal events", text_stream, _two_terminals, "terminal-last", {}),
    ("missing terminal", text_stream, _delete("response.completed"), "terminal-missing", {}),
    ("unknown event type", text_stream, _unknown_type, "unknown-type", {}),
    ("item content != parts", text_stream, _item_content_differs, "item-content", {}),
    ("terminal output != done items", text_stream, _terminal_output_differs, "terminal-output", {}),
    ("item left open", text_stream, _item_left_open, "item-open", {}),
    ("item_id mismatch", text_stream, _wrong_item_id, "item-id", {}),
    ("added message has content", text_stream, _added_message_with_content, "item-added", {}),
    ("added part has text", text_stream, _added_part_with_text, "part-added", {}),
    ("part.done != streamed text", text_stream, _part_done_differs, "part-mismatch", {}),
    ("done item still in_progress", text_stream, _item_done_status_in_progress, "item-done", {}),
    ("response id changes", text_stream, _lifecycle_id_changes, "response-identity", {}),
    ("background stream read as foreground", background_stream, lambda ev: ev, "background", {}),
    ("foreground stream read as background", text_stream, lambda ev: ev, "background", {"background": True}),
    ("incomplete without reason", incomplete_stream, _incomplete_reason_missing, "incomplete-details", {}),
    ("incomplete item, response completed", incomplete_stream, _incomplete_item_but_completed, "incomplete-item", {}),
    ("failed without error", failed_stream, _failed_without_error, "response-error", {}),
    ("error shapes disagree", failed_stream, _error_shapes_disagree, "error-event", {}),
    ("error without OpenAI flat fields", failed_stream, _error_without_flat_fields, "schema-openai", {}),
    ("output_text.delta without logprobs", text_stream, _delta_without_logprobs, "schema-openai", {}),
    ("arguments.done without name", parallel_calls_stream, _args_done_without_name, "schema-openai", {}),
    ("event between error and failed", failed_stream, _error_not_before_failed, "error-placement", {}),
    ("arguments done != deltas", parallel_calls_stream, _args_done_differs, "function-args", {}),
    ("content part on function_call", parallel_calls_stream, _content_part_on_call, "content-part", {}),
    ("arguments delta on message", text_stream, _args_on_message, "function-args", {}),
    ("function_call added with arguments", parallel_calls_stream, _call_added_with_args, "item-added", {}),
    ("tool without description", parallel_calls_stream, _missing_tool_description, "response-field", {}),
    ("reasoning with one key", reasoning_stream, _reasoning_one_key, "response-field", {}),
    ("summary_index not dense", reasoning_stream, _summary_index_skips, "summary", {}),
    ("summary part done before text done", reasoning_stream, _summary_done_before_text_done, "delta-order", {}),
]


@pytest.mark.parametrize(
    ("name", "build", "mutate", "rule", "kw"), EVENT_MUTATIONS, ids=[m[0] for m in EVENT_MUTATIONS]
)
def test_event_mutation_is_caught(
    name: str,
    build: Callable[[], list[Event]],
    mutate: Callable[[list[Event]], list[Event]],
    rule: str,
    kw: dict[str, Any],
) -> None:
    events = mutate(build())
    with pytest.raises(StreamViolation) as info:
        validate_events(events, **kw)
    assert info.value.rule == rule, str(info.value)


def _sse(raw_events: Callable[[], list[Event]] = text_stream) -> str:
    return render(raw_events())


SSE_MUTATIONS: list[tuple[str, Callable[[str], Any], str]] = [
    ("CRLF line endings", lambda s: s.replace("\n", "\r\n"), "sse-crlf"),
    (
        "event name != type",
        lambda s: s.replace("event: response.in_progress\n", "event: response.progress\n", 1),
        "sse-event-name",
    ),
    ("missing [DONE]", lambda s: s[: -len("data: [DONE]\n\n")], "sse-done"),
    ("[DONE] without blank line", lambda s: s[:-1], "sse-done"),
    ("frame after [DONE]", lambda s: s + ": late\n\n", "sse-done"),
    ("bare event: ping", lambda s: s.replace(": keep-alive\n\n", "event: ping\n\n"), "sse-framing"),
    ("data without event line", lambda s: s.replace("event: response.created\n", "", 1), "sse-framing"),
    ("extra blank line", lambda s: s.replace("\n\n", "\n\n\n", 2), "sse-framing"),
    (
        "non-compact JSON",
        lambda s: s.replace('"type":"response.created"', '"type": "response.created"', 1),
        "sse-compact",
    ),
    (
        "data not JSON",
        lambda s: s.replace('data: {"type":"response.created"', 'data: {type:"response.created"', 1),
        "sse-json",
    ),
    ("frame split across writes", lambda s: [s[:40], s[40:]], "sse-chunk"),
    ("not UTF-8", lambda s: s.encode().replace(b"Hel", b"\xffel"), "sse-encoding"),
    (
        "id line in frame",
        lambda s: s.replace("event: response.created\n", "id: 0\nevent: response.created\n", 1),
        "sse-framing",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "rule"), SSE_MUTATIONS, ids=[m[0] for m in SSE_MUTATIONS])
def test_sse_mutation_is_caught(name: str, mutate: Callable[[str], Any], rule: str) -> None:
    raw = mutate(_sse())
    with pytest.raises(StreamViolation) as info:
        validate_sse(raw)
    assert info.value.rule == rule, str(info.value)


def test_final_response_must_match_exactly() -> None:
    events = text_stream()
    final = copy.deepcopy(events[-1]["response"])
    final["parallel_tool_calls"] = True
    validate_events(events, final_response=final)
    final["output"][0]["content"][0]["text"] = "Hello"
    with pytest.raises(StreamViolation) as info:
        validate_events(events, final_response=final)
    assert info.value.rule == "final-response"
    # True == 1 in Python, but not on the wire.
    final = copy.deepcopy(events[-1]["response"])
    final["metadata"] = {"n": True}
    events[-1]["response"]["metadata"] = {"n": 1}
    with pytest.raises(StreamViolation, match="final-response"):
        validate_events(events, final_response=final)


def test_resumed_tail_checks() -> None:
    events = text_stream()
    with pytest.raises(StreamViolation) as info:
        validate_events(events[5:], starting_after=3)
    assert info.value.rule == "sequence"
    # Deltas seen in the tail must still add up to the done text.
    tail = copy.deepcopy(events[5:])
    tail[_find(tail, "response.output_text.done")]["text"] = "something else"
    with pytest.raises(StreamViolation, match="text-mismatch"):
        validate_events(tail, starting_after=4)
    # A tail must still end with the terminal event.
    with pytest.raises(StreamViolation, match="terminal-missing"):
        validate_events(events[5:-1], starting_after=4)


def test_violation_names_index_and_sequence_number() -> None:
    events = _done_text_differs(text_stream())
    with pytest.raises(StreamViolation) as info:
        validate_events(events)
    i = _find(events, "response.output_text.done")
    assert info.value.index == i and info.value.sequence_number == i
    assert f"event #{i} (sequence_number={i})" in str(info.value)
    assert "[text-mismatch]" in str(info.value)


def test_validate_response_object_rules() -> None:
    validate_response_object(make_response())
    validate_response_object(make_response(status="completed", usage=USAGE, completed_at=1))
    bad: list[tuple[dict[str, Any], str]] = [
        (make_response(status="completed", completed_at=1), "usage"),
        (make_response(status="failed", usage=USAGE), "response-error"),
        (make_response(status="bogus"), "response-status"),
        (make_response(background=True, store=False), "response-field"),
        (make_response(error={"code": "x", "message": "y"}), "response-error"),
        (make_response(completed_at=5), "response-field"),
    ]
    for resp, rule in bad:
        with pytest.raises(StreamViolation) as info:
            validate_response_object(resp)
        assert info.value.rule == rule, str(info.value)
    resp = make_response()
    del resp["user"]
    with pytest.raises(StreamViolation, match="response-field"):
        validate_response_object(resp)


def test_spec_path_and_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from tests.support.stream_validator import SPEC_PATH

    assert SPEC_PATH.is_file()
    copy_path = tmp_path / "spec.json"
    copy_path.write_bytes(SPEC_PATH.read_bytes())
    monkeypatch.setenv("OPENRESPONSES_SPEC", str(copy_path))
    validate_events(text_stream())
    monkeypatch.setenv("OPENRESPONSES_SPEC", str(tmp_path / "missing.json"))
    with pytest.raises(FileNotFoundError):
        validate_events(text_stream())


@pytest.mark.parametrize("name", VALID)
def test_valid_fixtures_satisfy_the_openai_sdk_stream_helper(name: str) -> None:
    # Keeps the fixtures honest: what this validator accepts, the OpenAI SDK's own accumulator
    # (which raises on created-not-first, unknown output_index, delta before its part, ...)
    # must accept too. Private SDK module, hence the skip if it moves.
    responses_mod = pytest.importorskip("openai.lib.streaming.responses._responses")
    from openai import omit
    from openai._models import construct_type_unchecked
    from openai.types.responses import ResponseStreamEvent

    build, _ = VALID[name]
    state = responses_mod.ResponseStreamState(input_tools=omit, text_format=omit)
    events = build()
    emitted: list[Any] = []
    for ev in events:
        emitted = state.handle_event(construct_type_unchecked(type_=cast(Any, ResponseStreamEvent), value=ev))
    if events[-1]["type"] == "response.completed":
        # The SDK rebuilt its completed Response; it must hold every item we streamed.
        assert len(emitted[-1].response.output) == len(events[-1]["response"]["output"])


# ---------------------------------------------------------------------------------------------
# Automatic compaction: `response.compaction.compacting` (the newest SDK's event, in neither spec)


def compaction_stream(*, encrypted: str = "sealed-summary", compacting: dict[str, Any] | None = None) -> list[Event]:
    """A compaction item (added without its content, compacting, done sealed), then the answer."""
    b = StreamBuilder().start()
    item = {"id": "cmp_0001", "type": "compaction", "encrypted_content": ""}
    b.items[0] = item
    b.emit("response.output_item.added", output_index=0, item=dict(item))
    b.emit("response.compaction.compacting", item_id="cmp_0001", output_index=0, **(compacting or {}))
    b.done[0] = {**item, "encrypted_content": encrypted}
    b.emit("response.output_item.done", output_index=0, item=dict(b.done[0]))
    b.message(["Carrying on."])
    return b.complete()


def test_a_compaction_stream_passes_and_its_event_is_checked_against_the_sdk_type() -> None:
    from openai.types.responses import ResponseCompactionCompactingEvent, ResponseStreamEvent

    validate_events(compaction_stream())
    assert event_schema_names()["response.compaction.compacting"] == "sdk:ResponseCompactionCompactingEvent"
    assert ResponseCompactionCompactingEvent in ResponseStreamEvent.__args__[0].__args__  # type: ignore[attr-defined]  # the SDK union's members, at run time
    for broken, rule in (
        (compaction_stream(compacting={"summary": "leaked"}), "schema"),  # the event carries no summary
        (compaction_stream(encrypted=""), "compaction"),
    ):
        with pytest.raises(StreamViolation) as info:
            validate_events(broken)
        assert info.value.rule == rule
    on_a_message = compaction_stream()
    compacting = next(e for e in on_a_message if e["type"] == "response.compaction.compacting")
    on_a_message.remove(compacting)
    message_added = next(e for e in on_a_message if e["type"] == "response.content_part.added")
    on_a_message.insert(on_a_message.index(message_added), {**compacting, "item_id": "msg_0001", "output_index": 1})
    for n, ev in enumerate(on_a_message):
        ev["sequence_number"] = n
    with pytest.raises(StreamViolation) as info:
        validate_events(on_a_message)
    assert info.value.rule == "compaction"
