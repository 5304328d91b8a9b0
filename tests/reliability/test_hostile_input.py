"""Hostile request bodies get a 400 that names the problem, never a 500, and store nothing."""

from __future__ import annotations

import json

import pytest

from responses_api.protocol import jsonlimits
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import parse_sse
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def nested(depth: int, leaf: object = 1) -> str:
    return "[" * depth + json.dumps(leaf) + "]" * depth


def stored_count() -> int:
    from responses_api.models import Response

    return Response.objects.count()


@pytest.mark.parametrize("depth", [101, 10_000, 100_000])
def test_a_deeply_nested_body_is_a_400_not_a_500(gateway: Gateway, depth: int) -> None:
    before = stored_count()
    body = f'{{"model": "{MODEL}", "input": {nested(depth)}}}'
    resp = gateway.http().post("/v1/responses", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "more than 100 levels deep" in error["message"]
    assert stored_count() == before


@pytest.mark.parametrize("where", ["metadata", "tool parameters", "text format schema"])
def test_deep_nesting_anywhere_in_the_body_is_refused(gateway: Gateway, where: str) -> None:
    deep = json.loads(nested(150))
    body: dict = {"model": MODEL, "input": "hi"}
    if where == "metadata":
        body["metadata"] = {"k": deep}
    elif where == "tool parameters":
        body["tools"] = [
            {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": {"default": deep}}}}
        ]
    else:
        body["text"] = {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object", "default": deep}}}
    resp = gateway.http().post("/v1/responses", content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert "more than 100 levels deep" in resp.json()["error"]["message"]


def test_nesting_up_to_the_limit_is_accepted(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="ok"))

    def body(levels: int) -> dict:
        # body 1, tools 2, the tool 3, its parameters 4, then two levels per nested property.
        schema: dict = {"type": "object", "enum": [{}]} if levels % 2 else {"type": "object"}
        for _ in range((levels - 4) // 2):
            schema = {"type": "object", "properties": {"x": schema}}
        return {"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": schema}]}

    assert jsonlimits.nesting_exceeds(body(100), 100) is False and jsonlimits.nesting_exceeds(body(101), 100)
    resp = gateway.http().post("/v1/responses", json=body(100))
    assert resp.status_code == 200, resp.text
    resp = gateway.http().post("/v1/responses", json=body(101))
    assert resp.status_code == 400, resp.text


def test_the_limit_helper() -> None:
    assert jsonlimits.loads(nested(99)) is not None  # 99 brackets + the leaf: depth 99
    assert jsonlimits.loads(nested(100)) is not None
    for depth in (101, 5_000, 200_000):
        with pytest.raises(jsonlimits.JsonTooDeep):
            jsonlimits.loads(nested(depth))
    # Many brackets side by side are not depth: the cheap precheck passes, the walk clears it.
    wide = json.dumps([[1]] * 1000)
    assert len(jsonlimits.loads(wide)) == 1000
    # Without a limit only the decoder's own recursion bound applies, still as a ValueError.
    with pytest.raises(ValueError):
        jsonlimits.loads(nested(200_000), max_depth=None)
    assert jsonlimits.loads(nested(500), max_depth=None)


# -- NUL and lone surrogates -------------------------------------------------------------
def post_raw(gateway: Gateway, raw: bytes):
    return gateway.http().post("/v1/responses", content=raw, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    "raw_text",
    [
        rb'"say \u0000 this"',  # NUL: PostgreSQL's jsonb refuses it
        rb'"cut \ud83d emoji"',  # a lone high surrogate, escaped
        rb'"cut \ude00 emoji"',  # a lone low surrogate
        b'"raw \xed\xa0\x80 bytes"',  # a surrogate as raw (CESU-style) bytes
    ],
)
def test_unstorable_characters_in_input_are_replaced_and_stored(
    gateway: Gateway, scripted: ScriptedUpstream, raw_text: bytes
) -> None:
    scripted.enqueue(MODEL, Reply(echo=True))
    body = b'{"model": "%s", "input": %s, "metadata": {"k\\u0000": %s}}' % (MODEL.encode(), raw_text, raw_text)
    resp = post_raw(gateway, body)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["status"] == "completed"
    # What the model saw, what was answered and what is stored are the same text.
    sent = scripted.requests[-1].body["messages"][-1]["content"]
    assert "\ufffd" in json.dumps(sent, ensure_ascii=False) and "\x00" not in json.dumps(sent)
    ((key, value),) = answer["metadata"].items()
    assert key == "k\ufffd" and value.count("\ufffd") == 1
    client = gateway.openai()
    again = client.responses.retrieve(answer["id"])
    assert again.status == "completed" and again.output_text == answer["output"][0]["content"][0]["text"]
    items = client.responses.input_items.list(answer["id"])
    assert "\ufffd" in items.data[0].content[0].text


def test_nul_in_model_output_is_stored_and_the_stream_ends(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="before\x00after \ud800 end", chunk_chars=3))
    client = gateway.openai()
    events = list(client.responses.create(model=MODEL, input="hi", stream=True))
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "before\ufffdafter \ufffd end"
    stored_response = client.responses.retrieve(events[-1].response.id)
    assert stored_response.status == "completed" and stored_response.output_text == text


@pytest.mark.parametrize(
    "path, param",
    [
        ("/v1/responses/resp_%00x", "response_id"),
        ("/v1/responses/resp_%00x/input_items", "response_id"),
        ("/v1/responses/resp_%00x/cancel", "response_id"),
        ("/v1/responses?model=m%00", "model"),
        ("/v1/responses?q=a%00b", "q"),
        ("/v1/responses?metadata[k]=v%00", "metadata[k]"),
        ("/v1/responses?after=resp_%00", "after"),
        ("/v1/usage?model=m%00", "model"),
        ("/v1/models/m%00", "model"),
    ],
)
def test_nul_in_ids_and_query_parameters_is_a_400(gateway: Gateway, path: str, param: str) -> None:
    method = "POST" if path.endswith("/cancel") else "GET"
    resp = gateway.http().request(method, path)
    assert resp.status_code == 400, (path, resp.status_code, resp.text)
    assert resp.json()["error"]["param"] == param


def test_nul_in_previous_response_id_is_not_found(gateway: Gateway) -> None:
    resp = post_raw(gateway, b'{"model": "%s", "input": "x", "previous_response_id": "resp_\\u0000x"}' % MODEL.encode())
    assert resp.status_code == 400, resp.text  # as OpenAI answers an unknown previous response
    error = resp.json()["error"]
    assert (error["param"], error["code"]) == ("previous_response_id", "previous_response_not_found")


def test_tool_output_with_nul_is_storable() -> None:
    from tool_registry.executors import _as_output

    assert _as_output("a\x00b") == "a\ufffdb"
    assert "\x00" not in _as_output({"k": "a\x00b"})  # JSON-escaped: stored as the six characters \u0000


# -- whatever fails while storing a finished response, it still ends -----------------------
@pytest.fixture
def poisoned_item_store(gateway: Gateway):
    """A real database refusal: a trigger rejects any item whose data mentions POISON."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("""CREATE OR REPLACE FUNCTION poison_check() RETURNS trigger AS $$
                BEGIN IF NEW.data::text LIKE '%POISON%' THEN RAISE EXCEPTION 'poisoned item'; END IF;
                RETURN NEW; END $$ LANGUAGE plpgsql""")
            cursor.execute(
                "CREATE TRIGGER poison BEFORE INSERT ON responses_api_item FOR EACH ROW EXECUTE FUNCTION poison_check()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER poison BEFORE INSERT ON responses_api_item "
                "WHEN NEW.data LIKE '%POISON%' BEGIN SELECT RAISE(ABORT, 'poisoned item'); END"
            )
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER poison ON responses_api_item" if connection.vendor == "postgresql" else "DROP TRIGGER poison"
        )


def test_a_stream_whose_storage_fails_ends_failed(
    gateway: Gateway, scripted: ScriptedUpstream, poisoned_item_store
) -> None:
    from responses_api.models import Response

    scripted.enqueue(MODEL, Reply(text="this is POISON to the store"))
    with gateway.http().stream("POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}) as resp:
        events = parse_sse(resp.iter_bytes())
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    final = events[-1]["response"]
    assert final["status"] == "failed" and final["error"]["code"] == "server_error"
    assert "this is POISON" in final["output"][0]["content"][0]["text"]  # the client still gets what was made
    row = Response.objects.get(id=final["id"])
    assert row.status == "failed"
    assert gateway.openai().responses.retrieve(final["id"]).output == []


def test_a_create_whose_storage_fails_is_a_500_and_the_row_ends_failed(
    gateway: Gateway, scripted: ScriptedUpstream, poisoned_item_store
) -> None:
    from responses_api.models import Response

    before = set(Response.objects.values_list("id", flat=True))
    scripted.enqueue(MODEL, Reply(text="this is POISON to the store"))
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert resp.status_code == 500, resp.text
    assert resp.json()["error"]["type"] == "server_error"
    new = Response.objects.exclude(id__in=before)
    assert [r.status for r in new] == ["failed"]


@pytest.mark.parametrize("name", ["a\nb", "x\r\ny: 1", "😀", "a,b"])
def test_an_unknown_field_of_any_name_is_named_in_the_header(
    gateway: Gateway, scripted: ScriptedUpstream, name: str
) -> None:
    """Unknown fields (a newer SDK's) are accepted and named in `x-gateway-ignored-fields`; a
    name no header can hold was a 500 (the fuzz found `a\nb`), and a comma would split it in
    two: names are percent-encoded there. The document allows any extra property, so it is not
    refused (schemathesis holds the server to that)."""
    from urllib.parse import quote, unquote

    scripted.set_default(MODEL, Reply(text="ok"))
    body = json.dumps({"model": MODEL, "input": "hi", name: 1})
    resp = gateway.http().post("/v1/responses", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text
    named = resp.headers["x-gateway-ignored-fields"].split(",")
    assert quote(name, safe="._-[]") in named and name in [unquote(n) for n in named]


def test_a_newer_sdks_field_is_still_accepted_and_named(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.set_default(MODEL, Reply(text="ok"))
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "hi", "some_new_field_2027": {"a": 1}})
    assert resp.status_code == 200 and "some_new_field_2027" in resp.headers["x-gateway-ignored-fields"]
