"""protocol/caching.py with plain data: where Anthropic's cache_control marks go."""

from __future__ import annotations

from typing import Any

from responses_api.protocol.anthropic import build_messages_request
from responses_api.protocol.request import parse_create_request


def marks(**body: Any) -> list[tuple[str, dict]]:
    req = parse_create_request({"model": "m", **body})
    built = build_messages_request(req, req.input_items, upstream_model="u", stream=False)
    return [
        (block.get("text") or block["type"], block["cache_control"])
        for message in built["messages"]
        for block in message["content"]
        if "cache_control" in block
    ]


def text(value: str, breakpoint_: bool = False) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "input_text", "text": value}
    if breakpoint_:
        part["prompt_cache_breakpoint"] = {"mode": "explicit"}
    return part


def test_no_cache_field_no_mark_and_a_key_alone_marks_the_prompts_end() -> None:
    assert marks(input="hi") == []
    assert marks(input="hi", prompt_cache_key="k") == [("hi", {"type": "ephemeral"})]


def test_empty_text_takes_no_mark_the_implicit_one_goes_to_the_last_block_that_can() -> None:
    content = [text("prefix", True), text("", True), {"type": "input_image", "image_url": "https://x/y.png"}, text("")]
    assert marks(input=[{"role": "user", "content": content}]) == [
        ("prefix", {"type": "ephemeral"}),
        ("image", {"type": "ephemeral"}),
    ]


def test_explicit_mode_without_breakpoints_marks_nothing() -> None:
    assert marks(input="hi", prompt_cache_key="k", prompt_cache_options={"mode": "explicit"}) == []
