"""Vector stores' request fields, checked (a 400 naming the field otherwise), and the pure parts
of ingestion and search: chunking by tokens, attribute filters, query keywords, vector maths.

Tokens are counted approximately: the gateway has no tokenizer of its own (tiktoken downloads
its tables at first use, which a gateway without egress cannot), so a token is taken to be four
characters of text, the rule of thumb OpenAI's documentation gives for English. Chunks are cut
at whitespace, so a chunk of 800 "tokens" is at most 3,200 characters and never splits a word.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequest
from .request import expect

CHARS_PER_TOKEN = 4
# OpenAI's `auto` chunking strategy, and the bounds of a `static` one.
DEFAULT_MAX_CHUNK_TOKENS = 800
DEFAULT_CHUNK_OVERLAP_TOKENS = 400
MIN_CHUNK_TOKENS = 100
MAX_CHUNK_TOKENS = 4096
MAX_ATTRIBUTES = 16
MAX_NUM_RESULTS = 50
DEFAULT_NUM_RESULTS = 10
MAX_FILES_PER_BATCH = 2000
RANKERS = ("auto", "default-2024-11-15", "none")
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
MAX_FILTER_DEPTH = 8


# --------------------------------------------------------------------------- request fields


def integer(value: Any, param: str) -> int:
    """An integer; 3.0 is one too (JSON does not tell them apart, nor does JSON Schema)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return expect(value, int, param, "an integer")


def chunking_strategy(value: Any, param: str = "chunking_strategy", *, overlap_checked: bool = True) -> tuple[int, int]:
    """(max_chunk_size_tokens, chunk_overlap_tokens): `auto` (or none given) is 800 and 400.
    `overlap_checked` False: the overlap's bound of half the size is left to `check_overlap`
    (the views check it after the files named, so an unknown file is the error reported first)."""
    if value is None:
        return DEFAULT_MAX_CHUNK_TOKENS, DEFAULT_CHUNK_OVERLAP_TOKENS
    expect(value, dict, param, "an object")
    kind = value.get("type")
    if kind == "auto":
        return DEFAULT_MAX_CHUNK_TOKENS, DEFAULT_CHUNK_OVERLAP_TOKENS
    if kind != "static":
        raise InvalidRequest(f"Invalid '{param}.type': expected 'auto' or 'static'.", param=f"{param}.type")
    static = expect(value.get("static"), dict, f"{param}.static", "an object")
    size = integer(static.get("max_chunk_size_tokens"), f"{param}.static.max_chunk_size_tokens")
    overlap = integer(static.get("chunk_overlap_tokens"), f"{param}.static.chunk_overlap_tokens")
    if not MIN_CHUNK_TOKENS <= size <= MAX_CHUNK_TOKENS:
        raise InvalidRequest(
            f"'{param}.static.max_chunk_size_tokens' must be between {MIN_CHUNK_TOKENS} and {MAX_CHUNK_TOKENS}.",
            param=f"{param}.static.max_chunk_size_tokens",
        )
    if not 0 <= overlap <= MAX_CHUNK_TOKENS // 2:
        raise InvalidRequest(
            f"'{param}.static.chunk_overlap_tokens' must be between 0 and {MAX_CHUNK_TOKENS // 2}.",
            param=f"{param}.static.chunk_overlap_tokens",
        )
    if overlap_checked:
        check_overlap(size, overlap, param)
    return size, overlap


def check_overlap(size: int, overlap: int, param: str = "chunking_strategy") -> None:
    if overlap > size // 2:
        raise InvalidRequest(
            f"'{param}.static.chunk_overlap_tokens' must not exceed half of max_chunk_size_tokens.",
            param=f"{param}.static.chunk_overlap_tokens",
        )


def chunking_object(size: int, overlap: int) -> dict[str, Any]:
    return {"type": "static", "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap}}


def attributes(value: Any, param: str = "attributes") -> dict[str, str | float | bool]:
    """Up to 16 pairs: keys of at most 64 characters; strings of at most 512, numbers or booleans."""
    if value is None:
        return {}
    expect(value, dict, param, "an object")
    if len(value) > MAX_ATTRIBUTES:
        raise InvalidRequest(f"'{param}' may have at most {MAX_ATTRIBUTES} keys.", param=param)
    for key, item in value.items():
        if not key or len(key) > 64:
            raise InvalidRequest(f"'{param}' keys are 1 to 64 characters.", param=f"{param}.{key[:64]}")
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidRequest(f"'{param}.{key}' must be a finite number.", param=f"{param}.{key}")
        expect(item, (str, int, float, bool), f"{param}.{key}", "a string, number or boolean")
        if isinstance(item, str) and len(item) > 512:
            raise InvalidRequest(f"'{param}.{key}' is at most 512 characters.", param=f"{param}.{key}")
    return dict(value)


def expires_after(value: Any, param: str = "expires_after") -> int | None:
    """The days of an `expires_after` policy (anchor `last_active_at`, 1 to 365 days), or None."""
    if value is None:
        return None
    expect(value, dict, param, "an object")
    if value.get("anchor") != "last_active_at":
        raise InvalidRequest(f"'{param}.anchor' must be 'last_active_at'.", param=f"{param}.anchor")
    days = integer(value.get("days"), f"{param}.days")
    if not 1 <= days <= 365:
        raise InvalidRequest(f"'{param}.days' must be between 1 and 365.", param=f"{param}.days")
    return days


def optional_string(body: dict[str, Any], name: str, max_length: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    expect(value, str, name, "a string")
    if len(value) > max_length:
        raise InvalidRequest(f"'{name}' is at most {max_length} characters.", param=name)
    return str(value)


def file_ids(value: Any, param: str = "file_ids") -> list[str]:
    expect(value, list, param, "an array of file ids")
    if len(value) > MAX_FILES_PER_BATCH:
        raise InvalidRequest(f"'{param}' may name at most {MAX_FILES_PER_BATCH} files.", param=param)
    for i, entry in enumerate(value):
        expect(entry, str, f"{param}[{i}]", "a file id")
    return list(dict.fromkeys(value))  # a file named twice is attached once


# --------------------------------------------------------------------------- filters


def filters(value: Any, param: str = "filters", depth: int = 0) -> dict[str, Any] | None:
    """A comparison (`{key, type, value}`) or compound (`{type: and|or, filters}`) filter, checked."""
    if value is None and depth == 0:
        return None
    expect(value, dict, param, "a comparison or compound filter")
    kind = value.get("type")
    if kind in ("and", "or"):
        if depth >= MAX_FILTER_DEPTH:
            raise InvalidRequest(f"'{param}' nests filters too deeply.", param=param)
        inner = expect(value.get("filters"), list, f"{param}.filters", "an array of filters")
        return {
            "type": kind,
            "filters": [filters(f, f"{param}.filters[{i}]", depth + 1) for i, f in enumerate(inner)],
        }
    if kind not in COMPARISONS:
        raise InvalidRequest(
            f"Invalid '{param}.type': expected one of {', '.join(COMPARISONS)}, and, or.", param=f"{param}.type"
        )
    key = expect(value.get("key"), str, f"{param}.key", "a string")
    target = value.get("value")
    if kind in ("in", "nin"):
        expect(target, list, f"{param}.value", "an array of strings or numbers")
        for i, entry in enumerate(target):
            expect(entry, (str, int, float), f"{param}.value[{i}]", "a string or number")
    else:
        expect(target, (str, int, float, bool), f"{param}.value", "a string, number or boolean")
    return {"type": kind, "key": key, "value": target}


def filter_keys(spec: dict[str, Any], param: str = "filters") -> list[tuple[str, str]]:
    """Every (key, param) a filter compares."""
    if spec["type"] in ("and", "or"):
        return [pair for i, f in enumerate(spec["filters"]) for pair in filter_keys(f, f"{param}.filters[{i}]")]
    return [(spec["key"], f"{param}.key")]


def _comparable(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    return (isinstance(a, numbers) and isinstance(b, numbers)) or (isinstance(a, str) and isinstance(b, str))


def matches(spec: dict[str, Any] | None, attrs: dict[str, Any]) -> bool:
    """Whether a file with these attributes passes the filter. A file without the compared key
    fails the comparison, whatever its operator (`ne` and `nin` too), as a SQL NULL would; so do
    values of different types (a string against a number)."""
    if spec is None:
        return True
    kind = spec["type"]
    if kind == "and":
        return all(matches(f, attrs) for f in spec["filters"])
    if kind == "or":
        return any(matches(f, attrs) for f in spec["filters"])
    if spec["key"] not in attrs:
        return False
    have, want = attrs[spec["key"]], spec["value"]
    if kind in ("in", "nin"):
        found = any(_comparable(have, w) and have == w for w in want)
        return found if kind == "in" else not found
    if not _comparable(have, want):
        return False
    if kind == "eq":
        return bool(have == want)
    if kind == "ne":
        return bool(have != want)
    if isinstance(have, bool):
        return False  # booleans are equal or not; they are not ordered
    return bool({"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}[kind])


# --------------------------------------------------------------------------- search request


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    filters: dict[str, Any] | None
    max_num_results: int
    score_threshold: float
    ranker: str
    rewrite_query: bool
    embedding_weight: float = 0.7
    text_weight: float = 0.3

    @property
    def search_query(self) -> str:
        """What is searched: the query, or its keywords when `rewrite_query` asked for a rewrite."""
        return " ".join(keywords(self.query)) if self.rewrite_query else self.query


def search_request(body: dict[str, Any], *, prefix: str = "") -> SearchRequest:
    query = body.get("query")
    if isinstance(query, list):
        for i, entry in enumerate(query):
            expect(entry, str, f"{prefix}query[{i}]", "a string")
        query = " ".join(query)
    query = expect(query, str, f"{prefix}query", "a string or an array of strings")
    if not query.strip():
        raise InvalidRequest(f"'{prefix}query' must not be empty.", param=f"{prefix}query")
    return SearchRequest(query=query, **search_options(body, prefix=prefix))


def search_options(body: dict[str, Any], *, prefix: str = "") -> dict[str, Any]:
    """The options of a search (the search endpoint's, or a `file_search` tool's)."""
    limit = body.get("max_num_results")
    if limit is None:
        limit = DEFAULT_NUM_RESULTS
    limit = integer(limit, f"{prefix}max_num_results")
    if not 1 <= limit <= MAX_NUM_RESULTS:
        raise InvalidRequest(
            f"'{prefix}max_num_results' must be between 1 and {MAX_NUM_RESULTS}.", param=f"{prefix}max_num_results"
        )
    options = body.get("ranking_options")
    if options is None:
        options = {}
    expect(options, dict, f"{prefix}ranking_options", "an object")
    threshold = options.get("score_threshold")
    if threshold is None:
        threshold = 0.0
    expect(threshold, (int, float), f"{prefix}ranking_options.score_threshold", "a number")
    if not 0 <= threshold <= 1:
        raise InvalidRequest(
            f"'{prefix}ranking_options.score_threshold' must be between 0 and 1.",
            param=f"{prefix}ranking_options.score_threshold",
        )
    ranker = options.get("ranker")
    if ranker is None:
        ranker = "auto"
    if ranker not in RANKERS:
        raise InvalidRequest(
            f"Invalid '{prefix}ranking_options.ranker': expected one of {', '.join(RANKERS)}.",
            param=f"{prefix}ranking_options.ranker",
        )
    weights: dict[str, float] = {}
    hybrid = options.get("hybrid_search")
    if hybrid is not None:
        expect(hybrid, dict, f"{prefix}ranking_options.hybrid_search", "an object")
        for name in ("embedding_weight", "text_weight"):
            weight = expect(hybrid.get(name), (int, float), f"{prefix}ranking_options.hybrid_search.{name}", "a number")
            if weight < 0 or not math.isfinite(weight):
                raise InvalidRequest(
                    f"'{prefix}ranking_options.hybrid_search.{name}' must not be negative.",
                    param=f"{prefix}ranking_options.hybrid_search.{name}",
                )
            weights[name] = float(weight)
        if not sum(weights.values()):
            raise InvalidRequest(
                "The hybrid_search weights must not both be 0.", param=f"{prefix}ranking_options.hybrid_search"
            )
    rewrite = body.get("rewrite_query")
    if rewrite is None:
        rewrite = False
    expect(rewrite, bool, f"{prefix}rewrite_query", "a boolean")
    return {
        "filters": filters(body.get("filters"), f"{prefix}filters"),
        "max_num_results": limit,
        "score_threshold": float(threshold),
        "ranker": ranker,
        "rewrite_query": rewrite,
        **weights,
    }


# --------------------------------------------------------------------------- text and vectors

_WORD = re.compile(r"\w+", re.UNICODE)
# Words a keyword query drops (rewrite_query; the full-text query): English's most common.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "their",
        "there",
        "these",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def keywords(text: str) -> list[str]:
    """The query's distinct words, lower-cased, without stop words (all of them if nothing else is left)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    kept = [w for w in words if w not in STOP_WORDS]
    return (kept or words)[:64]


def chunk_text(text: str, max_tokens: int, overlap_tokens: int) -> list[str]:
    """Cut text into chunks of at most `max_tokens` (approximately: four characters a token),
    each beginning `overlap_tokens` before the previous one's end, at whitespace."""
    words = [m.group(0) for m in re.finditer(r"\S+\s*", text)]
    limit, overlap = max_tokens * CHARS_PER_TOKEN, overlap_tokens * CHARS_PER_TOKEN
    chunks: list[str] = []
    start = 0
    while start < len(words):
        end, size = start, 0
        while end < len(words) and (size + len(words[end].rstrip()) <= limit or end == start):
            size += len(words[end])
            end += 1
        piece = "".join(words[start:end]).strip()
        if len(piece) > limit:  # one "word" longer than a chunk (a base64 blob): cut it
            chunks.extend(piece[i : i + limit] for i in range(0, len(piece), limit))
        elif piece:
            chunks.append(piece)
        if end >= len(words):
            break
        back, kept = end, 0
        while back > start + 1 and kept + len(words[back - 1]) <= overlap:
            back -= 1
            kept += len(words[back])
        start = back
    return chunks


def pack_vector(values: list[float]) -> bytes:
    """A unit vector as little-endian float32 (so a cosine is a dot product); b'' for a zero vector."""
    norm = math.sqrt(sum(v * v for v in values))
    if not norm:
        return b""
    return struct.pack(f"<{len(values)}f", *(v / norm for v in values))


def unpack_vector(data: bytes) -> tuple[float, ...]:
    return struct.unpack(f"<{len(data) // 4}f", data)


def cosine(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Of two unit vectors; 0 where their dimensions differ (a store re-embedded by another model)."""
    if len(a) != len(b) or not a:
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b))
