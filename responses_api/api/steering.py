"""Steering over WebSocket (`response.steer`, openai SDK 3.57 `response_steer_*`): user input
queued into a response that is running on the connection, committed by a successor response.

The contract (the SDK's docstrings): `response.steer.accepted` says the server owns the input;
the successor's `response.created` is the commit point. The running response stops at a safe
boundary (engine/steering.py) and ends `incomplete` with `incomplete_details.reason: "steered"`,
or ends as it would have; then a successor chained to it (`previous_response_id`) runs with
the queued input and the steered response's settings. A response that stops for client tool
output or an approval keeps the input queued: `response.steer.pending` lists the
`required_input` stubs, and the client's explicit continuation gets the queued input first.
Input that cannot be committed comes back in `response.steer.failed` with a code of
`ResponseSteerErrorCode`.

Pure: no I/O; the connection (websocket/steers.py) owns the queues and sends the events.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..protocol.client_tool_types import CLIENT_TOOL_TYPES
from ..protocol.errors import InvalidRequest
from ..protocol.items import normalize_item

# The fields a `response.steer` may carry (it takes no `stream_id`: its target picks the lane).
STEER_FIELDS = frozenset({"type", "previous_response_id", "input"})
MESSAGE_FIELDS = frozenset({"type", "role", "content"})
CONTENT_PARTS = frozenset({"input_text", "input_image", "input_file"})

# A call item the client answers -> the stub of its answer (ResponseSteerRequiredInput): these,
# and the client tool types' that the SDK has a stub for (`_answer_of`).
_ANSWERED_BY = {
    "function_call": "function_call_output",
    "tool_search_call": "tool_search_output",
}
_ANSWERS = frozenset(_ANSWERED_BY.values()) | {"mcp_approval_response"}


def _answer_of(kind: str) -> str | None:
    """The type of the item that answers a call item of this type (None: not a call the client answers)."""
    answer = _ANSWERED_BY.get(kind)
    if answer is None:
        entry = CLIENT_TOOL_TYPES.of_call(kind)
        answer = entry.output_type if entry is not None and entry.steer_stub else None
    return answer


def _is_answer(kind: Any) -> bool:
    if kind in _ANSWERS:
        return True
    entry = CLIENT_TOOL_TYPES.of_output(kind) if isinstance(kind, str) else None
    return entry is not None and entry.steer_stub


class SteerRefused(Exception):
    """A steer that is not accepted: its `response.steer.failed` code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Steer:
    """One accepted submission: its id, the input as the client sent it, and as items; `size`:
    the bytes of its message (what the connection holds until it is committed or returned)."""

    id: str
    input: Any
    items: list[dict[str, Any]]
    size: int = 0


@dataclass
class SteerQueue:
    """The steering input accepted for one response of the connection, in submission order.

    The engine asks `wanted()` at its safe boundaries (engine/steering.py); `unsupported` names
    why this response takes no steering (answered `steering_not_supported`)."""

    response_id: str
    stream_id: str | None
    body: dict[str, Any]  # the create message's fields: the successor's settings
    unsupported: str | None = None
    steers: list[Steer] = field(default_factory=list)
    accepting: bool = True  # until its terminal event was sent
    status: str | None = None  # its final status, once ended
    output: list[dict[str, Any]] = field(default_factory=list)  # its final output, once ended

    def wanted(self) -> bool:
        return bool(self.steers)

    def take(self) -> list[Steer]:
        steers, self.steers = self.steers, []
        return steers


def unsupported_reason(body: dict[str, Any]) -> str | None:
    """Why a response created with `body` cannot be steered (the SDK: responses bound to a
    conversation or using automatic compaction), or None."""
    if body.get("conversation") is not None:
        return "Responses bound to a conversation do not support steering."
    if body.get("context_management"):
        return "Responses using automatic compaction (context_management) do not support steering."
    return None


def parse_steer(message: dict[str, Any]) -> tuple[str, Any, list[dict[str, Any]]]:
    """(previous_response_id, input as sent, input as items) of a `response.steer`, or
    SteerRefused('invalid_input'): user messages only, each with type, role and content."""
    extra = sorted(set(message) - STEER_FIELDS)
    if extra:
        raise SteerRefused(
            "invalid_input", f"'response.steer' takes only type, previous_response_id and input; got {extra[0]!r}."
        )
    previous = message.get("previous_response_id")
    if not isinstance(previous, str) or not previous:
        raise SteerRefused("invalid_input", "'previous_response_id' must name the response to steer.")
    raw = message.get("input")
    if isinstance(raw, str):
        if not raw:
            raise SteerRefused("invalid_input", "'input' must not be empty.")
        return previous, raw, [normalize_item({"type": "message", "role": "user", "content": raw}, "input")]
    if not isinstance(raw, list) or not raw:
        raise SteerRefused("invalid_input", "'input' must be a string or a non-empty array of user messages.")
    items = []
    for i, entry in enumerate(raw):
        param = f"input[{i}]"
        if not isinstance(entry, dict) or entry.get("role") != "user" or entry.get("type", "message") != "message":
            raise SteerRefused("invalid_input", f"'{param}': steering takes only messages with the 'user' role.")
        extra = sorted(set(entry) - MESSAGE_FIELDS)
        if extra:
            raise SteerRefused("invalid_input", f"'{param}' may hold only type, role and content; got {extra[0]!r}.")
        content = entry.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in CONTENT_PARTS:
                    raise SteerRefused(
                        "invalid_input",
                        f"'{param}.content[{j}]' must be an input_text, input_image or input_file part.",
                    )
        try:
            items.append(normalize_item(entry, param))
        except InvalidRequest as exc:
            raise SteerRefused("invalid_input", exc.message) from None
    return previous, raw, items


def new_steer(raw: Any, items: list[dict[str, Any]], size: int = 0) -> Steer:
    return Steer(f"steer_{uuid.uuid4().hex}", raw, items, size)


def required_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stubs of what the client owes after `output`: its calls without an output in it,
    and its approval requests (identifying fields only; their outputs answer these calls)."""
    answered = {item.get("call_id") for item in output if _is_answer(item["type"])}
    stubs: list[dict[str, Any]] = []
    for item in output:
        kind = item["type"]
        answer = _answer_of(kind)
        if kind == "mcp_approval_request":
            stubs.append({"type": "mcp_approval_response", "approval_request_id": item["id"]})
        elif answer is not None and item.get("call_id") not in answered:
            if kind == "tool_search_call" and item.get("execution") != "client":
                continue
            stub: dict[str, Any] = {"type": answer, "call_id": item["call_id"]}
            if kind == "function_call":
                stub["name"] = item["name"]
            elif kind == "tool_search_call":
                stub["execution"] = "client"
            stubs.append(stub)
    return stubs


def with_queued_input(body: dict[str, Any], steers: list[Steer]) -> dict[str, Any]:
    """The explicit continuation after `response.steer.pending`: the queued input goes before
    the request's own input, after only the answers to the parent's calls that lead it (Chat
    Completions and Anthropic upstreams need a call's result right after the call)."""
    own = body.get("input")
    own_items: list[Any] = [{"type": "message", "role": "user", "content": own}] if isinstance(own, str) else own or []
    if not isinstance(own_items, list):
        return body  # not an input the parser takes: it reports the error
    lead = 0
    while lead < len(own_items) and isinstance(own_items[lead], dict) and _is_answer(own_items[lead].get("type")):
        lead += 1
    queued = [item for steer in steers for item in steer.items]
    return {**body, "input": [*own_items[:lead], *queued, *own_items[lead:]]}


def successor_body(queue: SteerQueue, steers: list[Steer]) -> dict[str, Any]:
    """The automatic successor: the steered response's settings, continuing from it with the
    queued input (and generating: a warm-up's successor answers it)."""
    inherited = {k: v for k, v in queue.body.items() if k not in ("input", "previous_response_id", "generate")}
    return {**inherited, "previous_response_id": queue.response_id, "input": [i for s in steers for i in s.items]}


def _lane(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def accepted_event(steer: Steer, previous: str, stream_id: str | None) -> dict[str, Any]:
    return _lane(
        {
            "type": "response.steer.accepted",
            "sequence_number": 0,
            "steer": {"id": steer.id, "previous_response_id": previous},
        },
        stream_id,
    )


def pending_event(steer: Steer, previous: str, stubs: list[dict[str, Any]], stream_id: str | None) -> dict[str, Any]:
    return _lane(
        {
            "type": "response.steer.pending",
            "sequence_number": 0,
            "reason": "waiting_for_required_input",
            "required_input": stubs,
            "steer": {"id": steer.id, "previous_response_id": previous},
        },
        stream_id,
    )


def failed_event(
    code: str, message: str, *, raw_input: Any, previous: Any, steer_id: str | None = None, stream_id: str | None = None
) -> dict[str, Any]:
    """The input handed back, uncommitted (with its id when it had been accepted)."""
    steer: dict[str, Any] = {
        "input": raw_input if raw_input is not None else [],
        "previous_response_id": previous if isinstance(previous, str) else "",
    }
    if steer_id is not None:
        steer["id"] = steer_id
    return _lane(
        {
            "type": "response.steer.failed",
            "sequence_number": 0,
            "error": {"type": "invalid_request_error", "code": code, "message": message},
            "steer": steer,
        },
        stream_id,
    )
