"""Vector stores' pure parts: chunking by approximate tokens, attribute filters, request fields."""

from __future__ import annotations

import pytest

from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.vector_stores import (
    chunk_text,
    chunking_strategy,
    cosine,
    filters,
    keywords,
    matches,
    pack_vector,
    search_request,
    unpack_vector,
)


def test_chunks_are_bounded_overlap_and_keep_every_word() -> None:
    text = " ".join(f"word{i}" for i in range(2000))
    chunks = chunk_text(text, max_tokens=100, overlap_tokens=25)  # 400 characters, 100 overlap
    assert all(len(c) <= 400 for c in chunks)
    assert chunks[0].startswith("word0 ") and chunks[-1].endswith("word1999")
    seen = {w for c in chunks for w in c.split()}
    assert seen == set(text.split())  # no word lost, none split
    for before, after in zip(chunks, chunks[1:]):
        tail = before.split()[-3:]
        assert " ".join(tail) in after  # consecutive chunks overlap
    assert chunk_text("", 800, 400) == [] and chunk_text("one", 800, 400) == ["one"]
    assert chunk_text("x" * 1000, 100, 0) == ["x" * 400, "x" * 400, "x" * 200]  # an over-long "word" is cut


def test_chunking_strategy_defaults_and_bounds() -> None:
    assert chunking_strategy(None) == chunking_strategy({"type": "auto"}) == (800, 400)
    assert chunking_strategy(
        {"type": "static", "static": {"max_chunk_size_tokens": 100.0, "chunk_overlap_tokens": 50}}
    ) == (
        100,
        50,
    )
    for bad, param in [
        (
            {"type": "static", "static": {"max_chunk_size_tokens": 99, "chunk_overlap_tokens": 0}},
            "max_chunk_size_tokens",
        ),
        (
            {"type": "static", "static": {"max_chunk_size_tokens": 4097, "chunk_overlap_tokens": 0}},
            "max_chunk_size_tokens",
        ),
        (
            {"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 101}},
            "chunk_overlap_tokens",
        ),
        (
            {"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": True}},
            "chunk_overlap_tokens",
        ),
    ]:
        with pytest.raises(InvalidRequest) as err:
            chunking_strategy(bad)
        assert err.value.param == f"chunking_strategy.static.{param}"


ATTRS = {"topic": "pets", "pages": 3, "draft": True, "score": 2.5}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"type": "eq", "key": "topic", "value": "pets"}, True),
        ({"type": "ne", "key": "topic", "value": "pets"}, False),
        ({"type": "gt", "key": "pages", "value": 2}, True),
        ({"type": "lte", "key": "score", "value": 2.5}, True),
        ({"type": "lt", "key": "topic", "value": 3}, False),  # a string against a number
        ({"type": "gt", "key": "draft", "value": False}, False),  # booleans are not ordered
        ({"type": "eq", "key": "draft", "value": True}, True),
        ({"type": "eq", "key": "pages", "value": True}, False),  # 3 is not True
        ({"type": "in", "key": "topic", "value": ["home", "pets"]}, True),
        ({"type": "nin", "key": "topic", "value": ["home", "pets"]}, False),
        ({"type": "ne", "key": "missing", "value": "x"}, False),  # no such attribute: fails, ne too
        ({"type": "nin", "key": "missing", "value": ["x"]}, False),
        (
            {
                "type": "and",
                "filters": [
                    {"type": "eq", "key": "topic", "value": "pets"},
                    {
                        "type": "or",
                        "filters": [
                            {"type": "gt", "key": "pages", "value": 10},
                            {"type": "eq", "key": "draft", "value": True},
                        ],
                    },
                ],
            },
            True,
        ),
        ({"type": "or", "filters": []}, False),
        ({"type": "and", "filters": []}, True),
    ],
)
def test_filters_match_as_documented(spec: dict, expected: bool) -> None:
    assert matches(filters(spec), ATTRS) is expected


def test_bad_filters_and_searches_name_the_field() -> None:
    cases: list[tuple[dict, str]] = [
        (
            {"query": "q", "filters": {"type": "and", "filters": [{"type": "eq", "key": 1, "value": 1}]}},
            "filters.filters[0].key",
        ),
        ({"query": "q", "filters": {"type": "in", "key": "k", "value": [True]}}, "filters.value[0]"),
        ({"query": ["a", 1]}, "query[1]"),
        ({"query": "q", "max_num_results": 0}, "max_num_results"),
        ({"query": "q", "rewrite_query": "yes"}, "rewrite_query"),
        (
            {"query": "q", "ranking_options": {"hybrid_search": {"embedding_weight": 0, "text_weight": 0}}},
            "ranking_options.hybrid_search",
        ),
    ]
    for body, param in cases:
        with pytest.raises(InvalidRequest) as err:
            search_request(body)
        assert err.value.param == param, body


def test_keywords_and_vectors() -> None:
    assert keywords("What is the tax deadline?") == ["tax", "deadline"]
    assert keywords("the") == ["the"]  # nothing but stop words: kept
    assert search_request({"query": "What is the tax deadline?", "rewrite_query": True}).search_query == "tax deadline"
    a, b = unpack_vector(pack_vector([3.0, 4.0])), unpack_vector(pack_vector([6.0, 8.0]))
    assert cosine(a, b) == pytest.approx(1.0) and pack_vector([0.0, 0.0]) == b""
    assert cosine(a, unpack_vector(pack_vector([1.0, 0.0, 0.0]))) == 0.0  # other dimensions: no match
