"""`/v1/responses/compact`: a conversation becomes its user messages, verbatim, and one
`compaction` item whose `encrypted_content` holds a summary the routed model wrote of
everything else. The gateway seals the summary (sealing.py: authenticated, bound to the
tenant); a later request that carries the item gives the model the summary in its place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ids import new_id

COMPACTION_INSTRUCTIONS = (
    "You are compacting a long conversation between a user and an AI assistant (which may have "
    "used tools) so that it can continue in a much smaller context. Write a summary that lets the "
    "assistant carry on seamlessly: the user's goals and constraints, decisions taken and why, "
    "what was done (files, commands, tool results that still matter, with exact names, paths and "
    "values), what failed, and what remains to do next. Be complete but concise; do not address "
    "the user; write only the summary."
)
SUMMARY_REQUEST = "Summarize the conversation above as instructed, for continuing it later."
SUMMARY_PREFIX = (
    "Summary of the earlier part of this conversation (compacted; the user's own messages precede it verbatim):\n\n"
)


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


def expand_compactions(items: list[dict[str, Any]], open_summary: Callable[[str], str]) -> list[dict[str, Any]]:
    """The items the model is given: each compaction item becomes a message holding its summary."""
    if not any(item["type"] == "compaction" for item in items):
        return items
    return [
        {
            "type": "message",
            "id": item["id"],
            "role": "user",
            "content": [{"type": "input_text", "text": SUMMARY_PREFIX + open_summary(item["encrypted_content"])}],
        }
        if item["type"] == "compaction"
        else item
        for item in items
    ]
