"""GET /v1/responses: full Response objects, cursor paging both ways, every filter, 400s that name the param."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.history.conftest import HistoryApi
from tests.history.factories import T0, assistant, make_response, user
from tests.support.harness import MODEL, Gateway
from tests.support.stream_validator import validate_response_object
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def test_lists_full_response_objects_newest_first(api: HistoryApi) -> None:
    rows = [
        make_response(api.tenant_id, created_at=T0 + timedelta(minutes=i), output=[assistant(f"answer {i}")])
        for i in range(3)
    ]
    body = api.ok("/v1/responses")
    assert body["object"] == "list"
    assert [r["id"] for r in body["data"]] == [r.id for r in reversed(rows)]
    assert body["first_id"] == rows[2].id and body["last_id"] == rows[0].id and body["has_more"] is False
    newest = body["data"][0]
    validate_response_object(newest)
    assert newest["output"][0]["content"][0]["text"] == "answer 2"
    # exactly what GET /v1/responses/{id} returns
    assert newest == api.ok(f"/v1/responses/{rows[2].id}")


@pytest.mark.parametrize("order", ["desc", "asc"])
def test_paging_visits_every_response_once_in_order(api: HistoryApi, order: str) -> None:
    rows = [make_response(api.tenant_id, created_at=T0 + timedelta(seconds=i)) for i in range(6)]
    rows.append(make_response(api.tenant_id, created_at=rows[3].created_at))  # a tie: broken by id
    expected = [r.id for r in sorted(rows, key=lambda r: (r.created_at, r.id), reverse=order == "desc")]
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        params = {"limit": 3, "order": order} | ({"after": after} if after else {})
        body = api.ok("/v1/responses", params)
        seen += [r["id"] for r in body["data"]]
        pages += 1
        if not body["has_more"]:
            break
        after = body["last_id"]
    assert seen == expected
    assert pages == 3
    assert api.ids({"limit": 100, "order": order}) == expected


def test_default_page_size_is_20(api: HistoryApi) -> None:
    for i in range(22):
        make_response(api.tenant_id, created_at=T0 + timedelta(seconds=i))
    body = api.ok("/v1/responses")
    assert len(body["data"]) == 20 and body["has_more"] is True
    assert len(api.ok("/v1/responses", {"after": body["last_id"]})["data"]) == 2


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"order": "newest"}, "order"),
        ({"after": "resp_unknown"}, "after"),
        ({"status": "done"}, "status"),
        ({"status": "completed,bogus"}, "status"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "1.5"}, "created_before"),
        ({"metadata[" + "k" * 65 + "]": "v"}, "metadata"),
        ({"metadata[team]": "x" * 513}, "metadata"),
        ({"q": "x" * 501}, "q"),
        ({"model": ""}, "model"),
        ({"root": ""}, "root"),
        ({"previous_response_id": ""}, "previous_response_id"),
    ],
)
def test_invalid_values_are_400_naming_the_parameter(api: HistoryApi, params: dict, param: str) -> None:
    error = api.error("/v1/responses", params)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert param in error["message"]


def test_every_filter(api: HistoryApi) -> None:
    t = api.tenant_id
    a = make_response(
        t,
        model="alpha",
        created_at=T0,
        metadata={"project": "x", "env": "prod"},
        input=[user("tell me about penguins")],
        output=[assistant("Penguins are flightless birds.")],
    )
    b = make_response(
        t,
        model="beta",
        status="failed",
        created_at=T0 + timedelta(hours=1),
        metadata={"project": "x", "env": "dev"},
        input=[user("weather in Oslo")],
        output=[],
        error={"code": "server_error", "message": "upstream exploded"},
    )
    c = make_response(
        t,
        model="alpha",
        status="incomplete",
        created_at=T0 + timedelta(hours=2),
        previous=a,
        metadata={"project": "y"},
        input=[user("and emperors?")],
        output=[assistant("Emperor penguins are the tallest")],
    )
    d = make_response(
        t,
        model="alpha",
        status="in_progress",
        created_at=T0 + timedelta(hours=3),
        previous=c,
        input=[user("how tall?")],
        output=[],
    )
    e = make_response(
        t,
        model="alpha",
        created_at=T0 + timedelta(hours=4),
        previous=a,
        input=[user("what about puffins")],
        output=[assistant("Puffins fly.")],
    )
    ts = int(T0.timestamp())

    assert api.ids({"model": "alpha"}) == [e.id, d.id, c.id, a.id]
    assert api.ids({"model": "gamma"}) == []
    assert api.ids({"status": "failed"}) == [b.id]
    assert api.ids({"status": "failed,incomplete"}) == [c.id, b.id]
    assert api.ids([("status", "failed"), ("status", "in_progress")]) == [d.id, b.id]
    assert api.ids({"created_after": ts + 3600}) == [e.id, d.id, c.id, b.id]
    assert api.ids({"created_before": ts + 3600}) == [a.id]
    assert api.ids({"created_after": ts + 3600, "created_before": ts + 3 * 3600}) == [c.id, b.id]
    assert api.ids({"metadata[project]": "x"}) == [b.id, a.id]
    assert api.ids({"metadata[project]": "x", "metadata[env]": "prod"}) == [a.id]
    assert api.ids({"metadata[missing]": "x"}) == []
    assert api.ids({"previous_response_id": a.id}) == [e.id, c.id]
    # root: the response and everything chained after it, at any depth (branches included)
    assert api.ids({"root": a.id}) == [e.id, d.id, c.id, a.id]
    assert api.ids({"root": c.id}) == [d.id, c.id]
    assert api.ids({"root": b.id}) == [b.id]
    assert api.ids({"root": "resp_unknown"}) == []
    # q: input and output text
    assert api.ids({"q": "penguins"}) == [c.id, a.id]
    assert api.ids({"q": "Oslo"}) == [b.id]  # input text only
    assert api.ids({"q": "flightless"}) == [a.id]  # output text only
    assert api.ids({"q": "walrus"}) == []
    # filters combine (AND), and page like the unfiltered list
    assert api.ids({"model": "alpha", "q": "penguins", "status": "incomplete"}) == [c.id]
    page = api.ok("/v1/responses", {"root": a.id, "limit": 2, "order": "asc"})
    assert [r["id"] for r in page["data"]] == [a.id, c.id] and page["has_more"]
    rest = api.ok("/v1/responses", {"root": a.id, "limit": 2, "order": "asc", "after": page["last_id"]})
    assert [r["id"] for r in rest["data"]] == [d.id, e.id] and not rest["has_more"]


def test_deleted_and_unstored_responses_are_never_listed(api: HistoryApi) -> None:
    root = make_response(api.tenant_id, created_at=T0)
    deleted = make_response(api.tenant_id, created_at=T0 + timedelta(seconds=1), previous=root, deleted=True)
    child = make_response(api.tenant_id, created_at=T0 + timedelta(seconds=2), previous=deleted)
    make_response(api.tenant_id, created_at=T0 + timedelta(seconds=3), store=False)
    assert api.ids() == [child.id, root.id]
    assert api.ids({"root": root.id}) == [child.id, root.id]  # the chain goes on through a deleted response
    assert api.ids({"previous_response_id": deleted.id}) == [child.id]
    assert api.error("/v1/responses", {"after": deleted.id})["param"] == "after"
    assert api.ids(key=api.admin_key) == [child.id, root.id]


def test_requires_a_key(api: HistoryApi) -> None:
    reply = api.get("/v1/responses", key="sk-gw-nope_nope")
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "invalid_api_key"


def test_post_still_creates_and_other_methods_are_405(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="hello there"))
    created = gateway.openai().responses.create(model=MODEL, input="hi")
    with gateway.http() as http:
        listed = http.get("/v1/responses").json()
        put = http.put("/v1/responses", json={})
    assert listed["data"][0]["id"] == created.id
    assert listed["data"][0]["output"][0]["content"][0]["text"] == "hello there"
    assert put.status_code == 405
    assert set(put.headers["allow"].split(", ")) == {
        "GET",
        "HEAD",
        "POST",
    }  # HEAD: GET without its body, as Django serves it
