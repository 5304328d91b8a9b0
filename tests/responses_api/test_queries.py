"""The query serializers (responses_api/api/queries.py) parse query strings as the history
API promises: defaults, repeated and comma-separated lists, deepObject metadata, and a 400
naming the parameter for anything else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.http import QueryDict

from responses_api.api.queries import PageQuery, ResponseListQuery, RetrieveQuery, UsageQuery
from responses_api.protocol.errors import InvalidRequest


def test_an_empty_query_gives_the_defaults() -> None:
    assert ResponseListQuery.parse(QueryDict("")) == {
        "after": None,
        "limit": 20,
        "order": "desc",
        "model": None,
        "status": (),
        "created_after": None,
        "created_before": None,
        "metadata": {},
        "previous_response_id": None,
        "root": None,
        "q": None,
    }
    assert RetrieveQuery.parse(QueryDict("")) == {"stream": False, "starting_after": -1}
    first = PageQuery.parse(QueryDict(""))
    first["limit"] = 5  # a caller's copy: the cached defaults stay as they are
    assert PageQuery.parse(QueryDict(""))["limit"] == 20
    ResponseListQuery.parse(QueryDict(""))["metadata"]["k"] = "v"
    assert ResponseListQuery.parse(QueryDict(""))["metadata"] == {}


def test_values_are_parsed() -> None:
    args = ResponseListQuery.parse(
        QueryDict(
            "limit=5&order=asc&status=failed,cancelled&status=failed&created_after=0"
            "&metadata[team]=core&metadata[env]=&q=hello&unknown=ignored"
        )
    )
    assert args["limit"] == 5 and args["order"] == "asc"
    assert args["status"] == ("failed", "cancelled")
    assert args["created_after"] == datetime(1970, 1, 1, tzinfo=UTC)
    assert list(args["metadata"].items()) == [("env", ""), ("team", "core")]
    assert "unknown" not in args
    assert UsageQuery.parse(QueryDict("group_by=tenant,model"))["group_by"] == ("tenant", "model")
    assert RetrieveQuery.parse(QueryDict("stream=true&starting_after=7")) == {"stream": True, "starting_after": 7}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("1767225600", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-01-01", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-01-01T09:30:00", datetime(2026, 1, 1, 9, 30, tzinfo=UTC)),
        ("2026-01-01T09:30:00Z", datetime(2026, 1, 1, 9, 30, tzinfo=UTC)),
        ("2026-01-01T09:30:00%2B02:00", datetime(2026, 1, 1, 7, 30, tzinfo=UTC)),
        ("2026-01-01T09:30:00+02:00", datetime(2026, 1, 1, 7, 30, tzinfo=UTC)),  # the + unencoded
        ("2026-01-01T09:30:00-05:00", datetime(2026, 1, 1, 14, 30, tzinfo=UTC)),
    ],
)
def test_timestamps_are_unix_seconds_or_iso_8601(given: str, expected: datetime) -> None:
    assert ResponseListQuery.parse(QueryDict(f"created_after={given}"))["created_after"] == expected
    assert UsageQuery.parse(QueryDict(f"start={given}"))["start"] == expected
    assert UsageQuery.parse(QueryDict(f"end={given}"))["end"] == expected


@pytest.mark.parametrize(
    ("query", "param", "words"),
    [
        ("limit=0", "limit", "between 1 and 100"),
        ("limit=ten", "limit", "between 1 and 100"),
        ("limit=5&limit=6", "limit", "given once"),
        ("order=sideways", "order", "'asc' or 'desc'"),
        ("model=", "model", "blank"),
        ("status=done", "status", "'done' is not one of"),
        ("status=", "status", "empty"),
        ("created_before=1.5", "created_before", "Unix timestamp"),
        ("created_before=yesterday", "created_before", "ISO 8601"),
        ("created_after=2026-13-01", "created_after", "ISO 8601"),
        ("metadata[a[b]]=v", "metadata", "1 to 64 characters"),
        ("metadata[k]=1&metadata[k]=2", "metadata", "[k] must be given once"),
        ("metadata[k]=" + "x" * 513, "metadata", "[k]"),
        ("q=" + "x" * 501, "q", "500"),
    ],
)
def test_a_bad_value_is_an_invalid_request_naming_the_parameter(query: str, param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ResponseListQuery.parse(QueryDict(query))
    assert caught.value.param == param
    assert f"'{param}'" in str(caught.value) and words in str(caught.value)


def test_usage_and_retrieve_refuse_what_they_cannot_read() -> None:
    with pytest.raises(InvalidRequest, match="Invalid 'starting_after': a valid integer is required"):
        RetrieveQuery.parse(QueryDict("starting_after=x"))
    with pytest.raises(InvalidRequest) as caught:
        UsageQuery.parse(QueryDict("group_by=week"))
    assert caught.value.param == "group_by"
    with pytest.raises(InvalidRequest) as caught:
        RetrieveQuery.parse(QueryDict("stream=true&starting_after=first"))
    assert caught.value.param == "starting_after"
