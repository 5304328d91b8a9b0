"""The dialect conversions a WebSocket lane keeps (protocol/prefix.py): extending a resumed copy
never writes through to the kept one, and a resumed conversion gives what converting everything
at once gives."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from responses_api.protocol.anthropic import AnthropicConversion
from responses_api.protocol.chat import ChatConversion, ChatOptions
from responses_api.protocol.native import NativeConversion
from responses_api.protocol.prefix import Conversion, ConvertedPrefix, converted

BEFORE: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sure:"}]},
]
AFTER: list[dict[str, Any]] = [
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "done"},
]
CONVERSIONS: dict[str, Callable[[], Conversion]] = {
    "chat": lambda: ChatConversion("Be brief.", ChatOptions(send_reasoning=True)),
    "anthropic": lambda: AnthropicConversion("Be brief."),
    "responses": NativeConversion,
}


def state(conversion: Any) -> Any:
    return copy.deepcopy({name: getattr(conversion, name) for name in conversion.__slots__ if name != "options"})


@pytest.mark.parametrize("dialect", CONVERSIONS)
def test_a_resumed_copy_extends_without_touching_the_kept_one(dialect: str) -> None:
    kept = CONVERSIONS[dialect]()
    kept.extend(BEFORE)
    before = state(kept)
    resumed = kept.resumed()
    resumed.extend(AFTER)
    assert state(kept) == before
    whole = CONVERSIONS[dialect]()
    whole.extend(BEFORE + AFTER)
    assert state(resumed) == state(whole)


def test_the_prefix_serves_only_its_key_and_the_items_it_converted() -> None:
    prefix = ConvertedPrefix(max_items=10)
    items = [dict(item) for item in BEFORE]
    converted(prefix, ("chat", "a"), items, CONVERSIONS["chat"])
    assert prefix.resume(("chat", "b"), items) is None  # another target or option: not this one
    assert prefix.resume(("chat", "a"), items[:1]) is None  # fewer items than it converted
    changed = [items[0], {**items[1], "content": [{"type": "output_text", "text": "No."}]}]
    assert prefix.resume(("chat", "a"), changed) is None  # an older item differs
    found = prefix.resume(("chat", "a"), [*items, AFTER[1]])
    assert found is not None and found[1] == 2
    converted(prefix, ("chat", "a"), [dict(item) for item in BEFORE * 6], CONVERSIONS["chat"])
    assert prefix.resume(("chat", "a"), BEFORE * 6) is None  # more than max_items: none kept
