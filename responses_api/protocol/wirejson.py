"""JSON the gateway writes and reads on the request path: orjson, with the standard library
behind it for the few values orjson refuses.

orjson encodes a stream event in a tenth of the standard encoder's time and decodes an
upstream chunk in a fifth (bench/README.md, performance round 3); with one event per token
that is a measurable share of a stream's CPU. Its output is the same compact JSON with
UTF-8 text (what `separators=(",", ":"), ensure_ascii=False` gives). What it refuses (keys
that are not strings, integers beyond 64 bits, lone surrogates, subclasses it does not know)
falls back to `json`, so no value that encoded before fails now; what its decoder refuses
(NaN and Infinity, integers beyond 64 bits, documents nested deeper than 1,024 levels) falls
back likewise, so the standard decoder's answer and error messages stay the rule. One
difference would be silent: orjson reads an integer beyond 64 bits as a float. A document with
a run of 20 digits (the shortest such integer) is therefore read by `json` alone.
"""

from __future__ import annotations

import copy
import json
from typing import Any, TypeVar

import orjson

# Every ASCII digit to "0", every other byte to " ": a run of 20 digits is then a substring
# search (C speed, a tenth of a regular expression's time on a stream chunk).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_TWENTY_DIGITS = b"0" * 20
T = TypeVar("T")

_encode_std = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_encode_ascii = json.JSONEncoder(separators=(",", ":")).encode


def dumpb(value: Any) -> bytes:
    """Compact UTF-8 JSON bytes."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        # Escaped to ASCII: a lone surrogate has no UTF-8 form, but its JSON escape is valid.
        return _encode_ascii(value).encode("ascii")


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII characters as themselves."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return _encode_std(value)


def loads(data: str | bytes) -> Any:
    """`json.loads`, faster for the documents orjson takes."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if _TWENTY_DIGITS in raw.translate(_DIGITS_ONLY):
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def copy_json(value: T) -> T:
    """A deep copy of JSON data: an orjson round trip, several times faster than
    `copy.deepcopy` (bench/README.md). What orjson cannot encode is deep-copied."""
    try:
        copied: T = orjson.loads(orjson.dumps(value))
    except TypeError:
        return copy.deepcopy(value)
    return copied
