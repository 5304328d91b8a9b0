"""Stored items as the gateway writes them, for tests that fill the store directly."""

from __future__ import annotations

from typing import Any

from responses_api.protocol.ids import new_id


def message_item(role: str, text: str) -> dict:
    """A completed message item: `input_text` for the user, `output_text` for the assistant."""
    kind = "output_text" if role == "assistant" else "input_text"
    part: dict[str, Any] = {"type": kind, "text": text} | (
        {"annotations": [], "logprobs": []} if role == "assistant" else {}
    )
    return {"type": "message", "id": new_id("msg"), "status": "completed", "role": role, "content": [part]}
