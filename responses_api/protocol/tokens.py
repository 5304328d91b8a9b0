"""Token estimates and `truncation: "auto"`.

Where the upstream cannot count (see upstreams/tokenize.py), the gateway estimates from the
text's shape, not its length alone: a word is about one token, a digit half of one, a symbol
(punctuation, markup, JSON's braces and quotes, any non-ASCII character) most of one, a line
break one; 4 tokens of overhead per item (ChatML's role markers), 1,000 per image or file. One
rate of characters per token cannot be close for both: SmolLM2's tokenizer reads 2.9 characters
per token in this README's markdown and 4.4 in Codex's prose instructions, so 1 per 4 characters
was 25% low on the one and 10% high on the other. Fitted on those and on this repository's code
(issue 51), the estimate is within 15% of llama.cpp's count with SmolLM2's chat template
(tests/test_real_model.py checks it). Tool schemas are counted (compact JSON) although a
template may drop them: SmolLM2's does, its model having no tool calling.
"""

from __future__ import annotations

import json
import re
from typing import Any

ITEM_OVERHEAD = 4
MEDIA_TOKENS = 1000
# With truncation, room kept for the answer when the request sets no max_output_tokens.
DEFAULT_OUTPUT_RESERVE = 4096

_WORDS = re.compile(r"[A-Za-z]+")
_DIGITS = re.compile(r"[0-9]")
_SYMBOLS = re.compile(r"[^\sA-Za-z0-9]")
# Upper-case runs (GATEWAY_CACHE_SECONDS, HTTP, README) split into more pieces than prose words
# do in BPE vocabularies, which learn mostly lower-case text.
_CAPITALS = re.compile(r"[A-Z]{2,}")


def _text_tokens(text: str) -> int:
    if not text:
        return 0
    # findall runs in C: a long first prompt is counted without a Python loop over its characters.
    hundredths = (
        115 * len(_WORDS.findall(text))
        + 50 * len(_DIGITS.findall(text))
        + 85 * len(_SYMBOLS.findall(text))
        + 25 * len("".join(_CAPITALS.findall(text)))
        + 100 * text.count("\n")
    )
    return (hundredths + 99) // 100


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
    # Compact JSON: what a chat template that shows tools renders is closer to it than to
    # json.dumps's spaced form. Tools are counted although some templates drop them (SmolLM2's:
    # a model without tool calling never sees them): on the high side, as the module says.
    fixed = _text_tokens(instructions or "") + (_text_tokens(json.dumps(tools, separators=(",", ":"))) if tools else 0)
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
