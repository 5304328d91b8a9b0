"""JSON from outside (request bodies, upstream replies, tool arguments): a nesting limit,
and text that can be stored.

Python's JSON decoder recurses, so a body nested 10,000 levels deep raises RecursionError
(not ValueError) and, below that, a value nested a few hundred levels deep is accepted and
then breaks whatever walks it next (validation, the JSONB encoder, the admin's renderer).
Every JSON document that comes from outside is parsed here instead: too deep is a
ValueError like any other malformed document, and the limit is one documented number.

Two characters JSON can carry cannot be stored: NUL (U+0000; PostgreSQL's text and jsonb
refuse it) and a lone UTF-16 surrogate (`"\\ud800"` without its pair, or the raw bytes
ED A0 80; not Unicode text at all, so nothing encodes it as UTF-8). Both occur in what real
clients send (a coding agent's shell output with NUL bytes, a JavaScript client cutting a
string in the middle of an emoji) and in model output, so refusing them would break working
sessions. Each is replaced by U+FFFD, the Unicode replacement character, when the document
is parsed: the model, the stream, the stored response and every later read see the same text.
"""

from __future__ import annotations

import re
from typing import Any

from . import wirejson

MAX_JSON_DEPTH = 100
"""How deeply arrays and objects may nest in a request body (the top level counts as 1)."""


class JsonTooDeep(ValueError):
    def __init__(self, limit: int | None) -> None:
        if limit is None:
            super().__init__("it nests arrays and objects too deeply to parse")
        else:
            super().__init__(f"it nests arrays and objects more than {limit} levels deep")
        self.limit = limit


def loads(data: str | bytes, max_depth: int | None = MAX_JSON_DEPTH) -> Any:
    """`json.loads`, raising JsonTooDeep past `max_depth` (None: only the decoder's own limit)."""
    try:
        value = wirejson.loads(data)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    if max_depth is not None and _may_exceed(data, max_depth) and nesting_exceeds(value, max_depth):
        raise JsonTooDeep(max_depth)
    if _may_hold_unstorable(data):
        try:
            value = storable(value)
        except RecursionError:  # only without a depth limit: as deep as the decoder allows
            raise JsonTooDeep(max_depth) from None
    return value


REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Necessary conditions, checked at C speed on the raw document: NUL is always escaped in valid
# JSON; a surrogate is an escape or (bytes decoded with surrogatepass) the UTF-8 lead ED A0-BF.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _may_hold_unstorable(data: str | bytes) -> bool:
    # Substring tests first: most documents (every stream chunk of an ASCII answer) have no
    # escape and no ED byte at all, and skip the regular expression.
    if isinstance(data, str):
        return "\\u" in data and ("\\u0000" in data or _SURROGATE_ESCAPE.search(data) is not None)
    return (b"\\u" in data or b"\xed" in data) and (
        b"\\u0000" in data or _SURROGATE_ESCAPE_BYTES.search(data) is not None
    )


def storable_text(text: str) -> str:
    """`text` with NUL and lone surrogates replaced by U+FFFD (paired ones are already one
    code point in a Python string)."""
    return _UNSTORABLE.sub(REPLACEMENT, text) if _UNSTORABLE.search(text) else text


def storable(value: Any) -> Any:
    """`value` (parsed JSON) with every string, keys included, made storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable(v) for v in value]
    if isinstance(value, dict):
        return {storable_text(k): storable(v) for k, v in value.items()}
    return value


def _may_exceed(data: str | bytes, limit: int) -> bool:
    # Cheap (C-speed) necessary condition: nesting N levels deep needs N opening brackets.
    # Most bodies have fewer brackets than the limit and skip the walk entirely.
    if isinstance(data, str):
        return data.count("[") + data.count("{") > limit
    return data.count(b"[") + data.count(b"{") > limit


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests lists/dicts more than `limit` levels; iterative, so any depth is safe."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False
