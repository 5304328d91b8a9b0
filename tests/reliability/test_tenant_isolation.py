"""Another tenant's response is exactly an unknown one on every endpoint of the served
document, for reads and writes, and its items cannot be referenced."""

from __future__ import annotations

import pytest

from tests.support.harness import MODEL, Gateway, make_key
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded

UNKNOWN = "resp_" + "0" * 48


def test_every_operation_on_a_response_id_treats_a_foreign_id_as_unknown(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    scripted.set_default(MODEL, Reply(text="mine"))
    mine = gateway.openai().responses.create(
        model=MODEL, input="secret question", background=False, metadata={"team": "a"}
    )
    other_key, _ = make_key(tenant="other-co", name="other")
    document = gateway.http().get("/v1/openapi.json").json()
    probed = []
    with gateway.http(other_key) as other:
        for path, ops in document["paths"].items():
            if "{response_id}" not in path:
                continue
            for method in ops:
                if method not in ("get", "post", "delete"):
                    continue
                for query in ({}, {"stream": "true"}) if method == "get" and path.endswith("}") else ({},):
                    foreign = other.request(method.upper(), path.replace("{response_id}", mine.id), params=query)
                    unknown = other.request(method.upper(), path.replace("{response_id}", UNKNOWN), params=query)
                    assert (foreign.status_code, foreign.json()["error"]["code"]) == (
                        unknown.status_code,
                        unknown.json()["error"]["code"],
                    ), (method, path, query)
                    assert foreign.status_code == 404
                    # Word for word the unknown id's answer (an id the client sent may be echoed).
                    assert foreign.text.replace(mine.id, UNKNOWN) == unknown.text
                    probed.append((method, path))
        # Lists and filters never show it; chaining and referencing it is refused as unknown.
        for params in (
            {},
            {"previous_response_id": mine.id},
            {"root": mine.id},
            {"q": "secret"},
            {"metadata[team]": "a"},
            {"after": mine.id},
        ):
            listed = other.get("/v1/responses", params=params)
            as_unknown = other.get("/v1/responses", params={k: v.replace(mine.id, UNKNOWN) for k, v in params.items()})
            assert listed.status_code == as_unknown.status_code, params
            if listed.status_code == 200:
                assert listed.json()["data"] == [], params
            else:
                assert listed.text.replace(mine.id, UNKNOWN) == as_unknown.text, params
        chained = other.post("/v1/responses", json={"model": MODEL, "input": "x", "previous_response_id": mine.id})
        assert chained.status_code == 400 and chained.json()["error"]["code"] == "previous_response_not_found"
        item_id = gateway.openai().responses.input_items.list(mine.id).data[0].id
        referenced = other.post(
            "/v1/responses", json={"model": MODEL, "input": [{"type": "item_reference", "id": item_id}]}
        )
        assert referenced.status_code in (400, 404) and "secret" not in referenced.text
        usage = other.get("/v1/usage")
        assert usage.status_code in (200, 403) and mine.id not in usage.text
    assert {p for _, p in probed} >= {
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/cancel",
        "/v1/responses/{response_id}/input_items",
    }
    # Untouched by the foreign DELETE and cancel.
    assert gateway.openai().responses.retrieve(mine.id).status == "completed"
