"""Compaction: a conversation becomes a `compaction` item whose `encrypted_content` holds a
summary the routed model wrote. The gateway seals the summary (sealing.py: authenticated, bound
to the tenant); a later request that carries the item gives the model the summary in its place.

Two forms. `/v1/responses/compact` (v1) answers the user messages, verbatim, then the item,
whose summary covers everything else. A `compaction_trigger` as the last input item of a create
(v2, Codex's remote compaction) answers the item alone, whose summary covers the whole context:
its payload says so (`whole`), and a later context starts at it, keeping only what the request
that sent it placed before it (`expand_compactions`); of an automatic compaction's (`auto`),
only the system and developer messages of that."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeAlias

from .client_tool_types import CLIENT_TOOL_TYPES
from .ids import new_id

_item_type = operator.itemgetter("type")

COMPACTION_INSTRUCTIONS = (
    "You are compacting a long conversation between a user and an AI assistant (which may have "
    "used tools) so that it can continue in a much smaller context. Write a summary that lets the "
    "assistant carry on seamlessly: the user's goals and constraints, decisions taken and why, "
    "what was done (files, commands, tool results that still matter, with exact names, paths and "
    "values), what failed, and what remains to do next. Be complete but concise; do not address "
    "the user; write only the summary."
)
# v2: nothing is kept verbatim beside the summary, so it must carry the user's requests too.
WHOLE_CONTEXT_INSTRUCTIONS = (
    COMPACTION_INSTRUCTIONS
    + " Nothing of the conversation is kept beside your summary: include the user's requests and "
    "constraints (verbatim where the wording matters) and the current state of the work."
)
SUMMARY_REQUEST = "Summarize the conversation above as instructed, for continuing it later."
SUMMARY_PREFIX = (
    "Summary of the earlier part of this conversation (compacted; the user's own messages precede it verbatim):\n\n"
)


# Not "it replaces everything before it": a request's own items before it (Codex's instructions) stay.
WHOLE_SUMMARY_PREFIX = "Summary of this conversation so far (compacted; it stands for the earlier turns):\n\n"


def summary_request_item() -> dict[str, Any]:
    return {
        "type": "message",
        "id": new_id("msg"),
        "role": "user",
        "content": [{"type": "input_text", "text": SUMMARY_REQUEST}],
    }


def compacted_output(context: list[dict[str, Any]], sealed_summary: str) -> list[dict[str, Any]]:
    """What /compact answers: the user messages of `context` as they were, then the compaction item."""
    kept = [
        {
            "id": item.get("id") or new_id("msg"),
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": item["content"],
        }
        for item in context
        if item["type"] == "message" and item.get("role") == "user"
    ]
    return [*kept, {"id": new_id("cmp"), "type": "compaction", "encrypted_content": sealed_summary}]


def summary_payload(summary: str, *, whole: bool, auto: bool = False) -> dict[str, Any]:
    """What a compaction item seals: the summary, and whether it stands for the whole context
    before it (v2) or for all but the user messages kept beside it (v1); `auto`: written by
    automatic compaction (`context_management`), whose clients send the whole history back
    before the item (items sealed before the flag read as a `compaction_trigger`'s)."""
    if not whole:
        return {"summary": summary}
    return {"summary": summary, "whole": True, "auto": True} if auto else {"summary": summary, "whole": True}


def _is_instructions(item: dict[str, Any]) -> bool:
    return item["type"] == "message" and item.get("role") in ("system", "developer")


# The items that answer a call (by call_id); after a trim they need their call in what is kept.
# (The client tool types' outputs too: `_answers_a_call`.)
_OUTPUT_TYPES = frozenset({"function_call_output", "tool_search_output"})


def _answers_a_call(item: dict[str, Any]) -> bool:
    return item["type"] in _OUTPUT_TYPES or item["type"] in CLIENT_TOOL_TYPES.output_types


InputSpans: TypeAlias = tuple[range, ...]
"""Where the client's input lies in a context (index ranges, oldest first): this request's own,
and that of its chain or of the WebSocket connection's memory where it is known. A whole-context
compaction item keeps what the client placed before it in the same span. The inputs of
consecutive requests with no output between them are one span (`span_after`): a warm-up
(`generate: false`) answers nothing, and Codex resumes a session by warming up with its
instructions, then sending the rest of its context, compaction item included, after them."""


def span_after(spans: InputSpans, start: int, stop: int) -> InputSpans:
    """`spans` and the input at `start:stop` after them: one span with the last if nothing came
    between them (the request before answered nothing)."""
    if spans and spans[-1].stop == start:
        return (*spans[:-1], range(spans[-1].start, stop))
    return (*spans, range(start, stop))


def expand_compactions(
    items: list[dict[str, Any]], open_payload: Callable[[str], dict[str, Any]], inputs: InputSpans = ()
) -> list[dict[str, Any]]:
    """The items the model is given: each compaction item becomes a message holding its summary,
    and the context starts at the last one whose summary stands for the whole context (v2).

    After that item the upstream context holds, in order, the items of the request's own input
    (its span in `inputs`: with a warm-up's that it continues) that precede it, then its summary,
    then what follows it. A client places there what must outlive the compaction: Codex sends its
    instructions as a `developer` item before the item, in a request without
    `previous_response_id`. An automatic compaction's item (`auto`) keeps only the `system` and
    `developer` messages there: its clients chain statelessly by sending the whole history back,
    item included, and the turns before it are what its summary replaced. Nothing else the
    summary stands for is sent: the older chain, the conversation, the connection's memory, and
    the output before an item a response produced (an automatic compaction's summary was written
    over that output). A v1 item drops nothing: its user messages sit beside it. Tool outputs
    whose calls were dropped go with them."""
    if "compaction" not in map(_item_type, items):  # in C: a long chain is scanned on every call
        return items
    payloads: dict[int, dict[str, Any]] = {}
    keep, begin, auto = 0, 0, False  # items[keep:begin] are the request's own before the item
    for index, item in enumerate(items):
        if item["type"] == "compaction" and item.get("encrypted_content"):
            payload = payloads[index] = open_payload(item["encrypted_content"])
            if payload.get("whole"):
                keep = next((span.start for span in inputs if index in span), index)
                begin, auto = index, bool(payload.get("auto"))
    kept = [n for n in range(keep, begin) if not auto or _is_instructions(items[n])]
    expanded: list[dict[str, Any]] = []
    for index in [*kept, *range(begin, len(items))]:
        item = items[index]
        if item["type"] != "compaction":
            expanded.append(item)
            continue
        opened = payloads.get(index)
        if opened is None:
            continue  # one whose summary was never written (its response failed while compacting)
        prefix = WHOLE_SUMMARY_PREFIX if opened.get("whole") else SUMMARY_PREFIX
        expanded.append(
            {
                "type": "message",
                "id": item["id"],
                "role": "user",
                "content": [{"type": "input_text", "text": prefix + opened["summary"]}],
            }
        )
    calls = {item.get("call_id") for item in expanded if not _answers_a_call(item)}
    return [item for item in expanded if not _answers_a_call(item) or item.get("call_id") in calls]


def client_instructions(instructions: str | None) -> tuple[str | None, bool]:
    """The client's part of a stored response's `instructions`, and whether the gateway appended
    its own summariser prompt (a `/v1/responses/compact` run stores the client's instructions,
    if any, then a blank line, then `COMPACTION_INSTRUCTIONS`): what the admin shows as the
    client's, never the gateway's prompt."""
    if instructions is None or not instructions.endswith(COMPACTION_INSTRUCTIONS):
        return instructions, False
    client = instructions[: -len(COMPACTION_INSTRUCTIONS)].removesuffix("\n\n")
    return client or None, True
