"""Property-based fuzz of the served OpenAPI document: requests built from it (values valid for
the schema, wrong types, hostile strings) never get a 5xx.

Plain hypothesis over the document: each operation's path and query parameters and, for the
create call, a body whose fields come from the schema's properties, each either a value the
schema allows or an arbitrary JSON value. Derandomized and bounded, so a run is repeatable and
takes seconds."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "\x00",
            "resp_\x00",
            "\ud800",
            "😀" * 3,
            "%00",
            "../../etc/passwd",
            "a" * 5000,
            "' OR 1=1 --",
            "{}",
            "[]",
            "null",
            "-1",
            "1e309",
            "NaN",
        ]
    ),
)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12,
)


class SchemaValues:
    """Values for a JSON schema of the document: mostly ones it allows, sometimes anything."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.schemas = document["components"]["schemas"]

    def __call__(self, schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
        if depth > 5:
            return ANY_JSON
        return st.one_of(self._allowed(schema, depth), ANY_JSON) if depth else self._allowed(schema, depth)

    def _allowed(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        if "$ref" in schema:
            return self(self.schemas[schema["$ref"].rsplit("/", 1)[-1]], depth + 1)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return st.one_of([self(option, depth + 1) for option in schema[key]])
        if "allOf" in schema:
            return self(schema["allOf"][0], depth + 1)
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        if "const" in schema:
            return st.just(schema["const"])
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([self({**schema, "type": k}, depth + 1) for k in kind])
        if kind == "object" or "properties" in schema:
            properties = schema.get("properties") or {}
            if not properties:
                return st.dictionaries(HOSTILE_TEXT, ANY_JSON, max_size=3)
            return st.fixed_dictionaries({}, optional={name: self(sub, depth + 1) for name, sub in properties.items()})
        if kind == "array":
            return st.lists(self(schema.get("items") or {}, depth + 1), max_size=3)
        if kind == "string":
            return HOSTILE_TEXT
        if kind == "integer":
            return st.integers(-5, 10**7)
        if kind == "number":
            return st.floats(-5, 1e7, allow_nan=False)
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        return ANY_JSON


@pytest.fixture
def document(gateway: Gateway) -> dict[str, Any]:
    resp = gateway.http().get("/v1/openapi.json")
    assert resp.status_code == 200
    return resp.json()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in document["paths"].items()
        for method, op in ops.items()
        if method in ("get", "post", "delete") and path not in ("/v1/docs", "/v1/openapi.json")
    ]


# All 200 examples in the servers run. The embedded rerun (GATEWAY_TEST_DB=sqlite) sends them to
# the same code (views, validation, serializers; only the database and the worker differ), so
# there a quarter of them, derandomized as well: ~40 s less of that run, nothing left unfuzzed.
FUZZ_EXAMPLES = 50 if os.environ.get("GATEWAY_TEST_DB") == "sqlite" else 200

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_no_operation_of_the_served_document_answers_5xx(
    gateway: Gateway, scripted: ScriptedUpstream, document: dict[str, Any]
) -> None:
    scripted.set_default(MODEL, Reply(echo=True))
    values = SchemaValues(document)
    client = gateway.http(timeout=30)
    seen: dict[str, set[int]] = {}

    for method, path, op in operations(document):
        params = [p for p in op.get("parameters", []) if p["in"] in ("path", "query")]
        path_params = {p["name"]: HOSTILE_TEXT | st.just("resp_missing") for p in params if p["in"] == "path"}
        query_params = {
            p["name"]: st.one_of(values(p.get("schema") or {}).map(_as_query), HOSTILE_TEXT)
            for p in params
            if p["in"] == "query"
        }
        body_schema = ((op.get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema")
        if body_schema is not None:
            body_strategy = values(body_schema).map(
                lambda body: {"model": MODEL, "input": "hi", **body} if isinstance(body, dict) else body
            )
            body_strategy = st.one_of(body_strategy, ANY_JSON)
        else:
            body_strategy = st.none()

        @FUZZ
        @given(
            path_values=st.fixed_dictionaries(path_params),
            query=st.fixed_dictionaries({}, optional=query_params),
            body=body_strategy,
        )
        def run(path_values: dict[str, str], query: dict[str, Any], body: Any) -> None:
            # Called right below, in this iteration: the loop variables are the ones meant.
            url = path  # noqa: B023 - called in this iteration (comment above)
            for name, value in path_values.items():
                url = url.replace("{" + name + "}", _quote(value))
            if query:  # encoded by hand: httpx refuses lone surrogates, a hostile client does not
                url += "?" + "&".join(f"{_quote(k)}={_quote(v)}" for k, v in query.items())
            kwargs: dict[str, Any] = {}
            if body is not None:
                if isinstance(body, dict) and body.get("background"):
                    body["background"] = False  # the embedded worker would outlive the example
                kwargs["content"] = json.dumps(body)
                kwargs["headers"] = {"Content-Type": "application/json"}
            resp = client.request(method, url, **kwargs)  # noqa: B023 - called in this iteration
            text = resp.text  # a stream is read to its end
            seen.setdefault(f"{method} {path}", set()).add(resp.status_code)  # noqa: B023 - called in this iteration
            assert resp.status_code < 500, (method, url, query, body, text[:500])  # noqa: B023 - called in this iteration

        run()

    # The fuzz reached every operation and got past validation somewhere.
    assert len(seen) == len(operations(document))
    assert 200 in seen["POST /v1/responses"] and 400 in seen["POST /v1/responses"]


def _as_query(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value.encode("utf-8", "surrogatepass"), safe="")
