"""The request path's JSON (orjson with the standard library behind it): the same documents
in and out as `json` would give, including the values orjson refuses or reads differently.

No database, no network: these run in every configuration.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from responses_api.protocol import jsonlimits, wirejson

pytestmark = pytest.mark.embedded

STANDARD: dict[str, Any] = dict(separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    "value",
    [
        {"type": "response.output_text.delta", "delta": "héllo \u2028 \U0001f600", "logprobs": []},
        [1, -2, 2.5, 1e16, 1e-7, None, True, False, "", {}],
        {"nested": {"deep": [[[{"x": "y"}]]]}},
        18446744073709551615,  # the largest integer orjson encodes
    ],
)
def test_encodes_what_json_encodes(value: object) -> None:
    assert json.loads(wirejson.dumps(value)) == value
    assert wirejson.dumpb(value) == wirejson.dumps(value).encode()
    assert json.loads(wirejson.dumps(value)) == json.loads(json.dumps(value, **STANDARD))


@pytest.mark.parametrize(
    "value",
    [
        2**70,  # beyond 64 bits
        {1: "integer key"},
        {"lone": "\ud800"},  # a lone surrogate has no UTF-8 form
    ],
)
def test_values_orjson_refuses_are_encoded_by_json(value: object) -> None:
    assert wirejson.dumps(value) == json.dumps(value, **STANDARD)
    raw = wirejson.dumpb(value)
    raw.decode("utf-8")  # always valid UTF-8: the lone surrogate is escaped
    assert json.loads(raw) == json.loads(json.dumps(value))


@pytest.mark.parametrize(
    "document",
    [
        '{"a": 1, "b": [true, null, "\\u00e9"], "c": 2.5}',
        b'{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"abcd"}}]}',
        '{"big": 123456789012345678901234567890}',  # orjson would read a float
        '{"id": "x12345678901234567890", "n": 18446744073709551615}',
        '{"a": NaN, "b": Infinity}',  # orjson refuses these; json reads them
        '{"a": 1, "a": 2}',
        '"\\ud800"',
    ],
)
def test_decodes_as_json_does(document: str | bytes) -> None:
    got, expected = wirejson.loads(document), json.loads(document)
    if isinstance(expected, dict) and any(isinstance(v, float) and math.isnan(v) for v in expected.values()):
        assert math.isnan(got["a"]) and got["b"] == math.inf
        return
    assert got == expected
    assert type(got) is type(expected)
    if isinstance(expected, dict) and "big" in expected:
        assert isinstance(got["big"], int)


@pytest.mark.parametrize("document", ["{", "[1,]", "", "nul", b"\xff"])
def test_malformed_documents_raise_value_error(document: str | bytes) -> None:
    with pytest.raises(ValueError):
        wirejson.loads(document)


def test_depth_and_unstorable_rules_still_apply() -> None:
    with pytest.raises(jsonlimits.JsonTooDeep):
        jsonlimits.loads("[" * 150 + "]" * 150)
    with pytest.raises(jsonlimits.JsonTooDeep):
        jsonlimits.loads("[" * 100_000 + "]" * 100_000, max_depth=None)
    assert jsonlimits.loads(b'{"t": "a\\u0000b\\ud800"}') == {"t": "a\ufffdb\ufffd"}
    assert jsonlimits.loads('{"t": "\\u00e9"}') == {"t": "\u00e9"}


def test_copy_json_is_deep_and_falls_back() -> None:
    original: dict[str, Any] = {"output": [{"content": [{"text": "a"}]}], "n": 1.5}
    copy = wirejson.copy_json(original)
    assert copy == original
    copy["output"][0]["content"][0]["text"] = "changed"
    assert original["output"][0]["content"][0]["text"] == "a"
    odd = {"big": 2**70, "items": [1, 2]}
    odd_copy = wirejson.copy_json(odd)
    assert odd_copy == odd and odd_copy["items"] is not odd["items"]
