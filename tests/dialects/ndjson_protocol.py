"""The test-only "ndjson" dialect's protocol conversion (pure, as responses_api/protocol/*.py is):
a made-up wire format, one JSON object per line, that no real upstream speaks. It proves that a
dialect is two modules (this one and ndjson_adapter.py) and one registry line.

Request, `POST {base_url}/generate`:
    {"model", "turns": [{"who": "system"|"user"|"model"|"tool", "text", "call": {...}, "for"}],
     "functions": [{"name", "params"}], "max"}
Answer (streamed or not, the same lines):
    {"say": "a piece of text"}
    {"call": {"id", "name", "args"}}         a function call, whole
    {"done": "stop"|"length"|"call", "used": [input tokens, output tokens]}
    {"fail": "message"}                      the upstream's own failure
"""

from __future__ import annotations

from typing import Any

from responses_api.protocol.deltas import Delta, Finish, TextDelta, ToolCallDelta, UpstreamFailed, Usage
from responses_api.protocol.dialects import WireDialect
from responses_api.protocol.items import item_text
from responses_api.protocol.request import CreateRequest
from responses_api.protocol.tools import Tool

# Its facts and its column in the surface table (every field not named: announced, but those
# the gateway applies whatever the upstream, and those every dialect refuses).
WIRE = WireDialect(
    "ndjson",
    "Test-only newline-delimited JSON",
    column={
        "model": "translated:model | the route's upstream model",
        "input": "translated:turns",
        "instructions": "translated:turns | a system turn",
        "tools": "translated:functions | function tools only",
        "tool_choice": "announced",
        "max_output_tokens": "translated:max",
    },
    chat_column={"model": "translated:model", "messages": "translated:turns", "stream": "gateway"},
)

_FINISH = {"stop": "stop", "length": "length", "call": "tool_calls"}


def build_request(req: CreateRequest, items: list[dict[str, Any]], *, model: str, tools: list[Tool]) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    if req.instructions:
        turns.append({"who": "system", "text": req.instructions})
    for item in items:
        kind = item.get("type")
        if kind == "message":
            turns.append({"who": "model" if item.get("role") == "assistant" else "user", "text": item_text(item)})
        elif kind == "function_call":
            call = {"id": item["call_id"], "name": item["name"], "args": item.get("arguments", "")}
            turns.append({"who": "model", "call": call})
        elif kind == "function_call_output":
            output = item.get("output")
            turns.append({"who": "tool", "for": item["call_id"], "text": output if isinstance(output, str) else ""})
    body: dict[str, Any] = {"model": model, "turns": turns}
    if tools:
        body["functions"] = [{"name": t.name, "params": t.parameters} for t in tools]
    if req.max_output_tokens is not None:
        body["max"] = req.max_output_tokens
    return body


class LineDecoder:
    """One answer's lines as neutral deltas; `finished` once its `done` line came."""

    def __init__(self) -> None:
        self.finished = False
        self._calls = 0

    def feed(self, line: dict[str, Any]) -> list[Delta]:
        if "say" in line:
            return [TextDelta(str(line["say"]))]
        if "call" in line:
            call = line["call"]
            self._calls += 1
            return [ToolCallDelta(self._calls - 1, call["id"], call["name"], call.get("args") or "")]
        if "done" in line:
            self.finished = True
            used = line.get("used") or [0, 0]
            return [Usage(input_tokens=used[0], output_tokens=used[1]), Finish(_FINISH.get(line["done"], "stop"))]
        if "fail" in line:
            raise UpstreamFailed("ndjson_failed", str(line["fail"]))
        return []
