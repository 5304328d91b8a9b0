"""Token estimates and `truncation: "auto"`.

Where the upstream cannot count (see upstreams/tokenize.py), the gateway estimates: 1 token per
4 characters of text (arguments, outputs and tool schemas included), 4 tokens of overhead per
item, 1,000 per image or file. Real tokenizers give roughly 3-4.5 characters per token for
English and code, so the estimate is deliberately on the high side: truncating a little early
is better than an upstream's context-length error.
"""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 4
ITEM_OVERHEAD = 4
MEDIA_TOKENS = 1000
# With truncation, room kept for the answer when the request sets no max_output_tokens.
DEFAULT_OUTPUT_RESERVE = 4096


def _text_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate_item(item: dict[str, Any]) -> int:
    tokens = ITEM_OVERHEAD
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            kind = part.get("type")
            if kind in ("input_image", "input_file"):
                tokens += MEDIA_TOKENS
            else:
                tokens += _text_tokens(part.get("text") or part.get("refusal") or "")
    elif isinstance(content, str):
        tokens += _text_tokens(content)
    for key in ("arguments", "input", "name"):
        if isinstance(item.get(key), str):
            tokens += _text_tokens(item[key])
    output = item.get("output")
    if isinstance(output, str):
        tokens += _text_tokens(output)
    elif output is not None:
        tokens += _text_tokens(json.dumps(output))
    for part in item.get("summary") or []:
        tokens += _text_tokens(part.get("text", ""))
    return tokens


def estimate_request(items: list[dict[str, Any]], instructions: str | None, tools: list[dict[str, Any]]) -> int:
    fixed = _text_tokens(instructions or "") + (_text_tokens(json.dumps(tools)) if tools else 0)
    return fixed + sum(estimate_item(i) for i in items)


def _pinned(item: dict[str, Any]) -> bool:
    """System and developer messages are instructions: truncation never drops them."""
    return item["type"] == "message" and item.get("role") in ("system", "developer")


def truncate(
    items: list[dict[str, Any]],
    *,
    budget: int,
    instructions: str | None,
    tools: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], int] | None:
    """The newest items that fit `budget` tokens, dropping the oldest first: a tool call goes
    with its output, instructions (and system/developer messages) stay, the newest item always
    stays. Returns (kept, number dropped), or None when even that does not fit."""
    sizes = [estimate_item(i) for i in items]
    total = estimate_request([], instructions, tools) + sum(sizes)
    if total <= budget:
        return items, 0
    call_ids_dropped: set[str] = set()
    dropped: set[int] = set()
    for index, item in enumerate(items[:-1]):
        if total <= budget:
            break
        if index in dropped or _pinned(item):
            continue
        group = [index]
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id not in call_ids_dropped:
            call_ids_dropped.add(call_id)
            group += [j for j in range(index + 1, len(items)) if items[j].get("call_id") == call_id]
        if len(items) - 1 in group:
            break  # that would take the newest item with it
        for j in group:
            if j not in dropped:
                dropped.add(j)
                total -= sizes[j]
    if total > budget:
        return None
    return [item for i, item in enumerate(items) if i not in dropped], len(dropped)
