"""The history browsed with a staff user's admin session (no API key), over the live ASGI gateway.

A staff user logged in to the admin GETs the history's read endpoints: every tenant,
read-only, as DRF's browsable API in a browser and as JSON otherwise. A key, when one
is presented, is what counts; a POST never takes a session; a session of a user who is
not staff (or may not view responses) is no key at all.
"""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from tests.history.conftest import HistoryApi
from tests.history.factories import make_response, tool_loop_conversation

pytestmark = pytest.mark.embedded

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture(autouse=True)
def _plain_static_storage(settings) -> None:
    # `{% static %}` without collectstatic's manifest (production serves collected, hashed files).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def _session(username: str, **flags: bool) -> dict[str, str]:
    """The cookies of a logged-in admin session (as the admin's login form would set them)."""
    user = get_user_model().objects.create_user(username, email=None, password="pw-" + username, **flags)
    if flags.get("is_staff") and not flags.get("is_superuser"):
        user.user_permissions.add(Permission.objects.get(codename="view_response"))
    client = Client()
    client.force_login(user)
    return {name: morsel.value for name, morsel in client.cookies.items()}


def _http(api: HistoryApi, cookies: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=api.url, cookies=cookies, timeout=30.0)


def test_a_staff_session_browses_every_tenant_read_only(api: HistoryApi) -> None:
    ours = make_response(api.tenant_id, model="gpt-house")
    theirs = make_response(api.other_tenant_id, model="gpt-small")
    *_, head = tool_loop_conversation(api.tenant_id)
    with _http(api, _session("ops", is_staff=True)) as http:
        page = http.get("/v1/responses", headers=BROWSER)
        assert page.status_code == 200, page.text
        assert page.headers["content-type"].startswith("text/html")
        assert "Gateway history" in page.text and "staff session: ops" in page.text
        assert ours.id in page.text and theirs.id in page.text  # every tenant
        assert 'method="POST"' not in page.text and "Raw data" not in page.text  # no forms: read-only

        listed = http.get("/v1/responses")  # no Accept for HTML: the API's JSON
        assert listed.headers["content-type"] == "application/json"
        assert {ours.id, theirs.id} <= {r["id"] for r in listed.json()["data"]}

        thread = http.get(f"/v1/responses/{head.id}/thread", headers=BROWSER)
        assert thread.status_code == 200 and "What&#x27;s the weather in Paris" in thread.text
        usage = http.get("/v1/usage", params={"group_by": "tenant", "start": "2020-01-01"})
        assert usage.status_code == 200, usage.text
        assert usage.json()["limits"] == []
        assert http.head("/v1/responses", headers=BROWSER).status_code == 200

        # a bad filter is the usual 400, rendered for the browser
        bad = http.get("/v1/responses", params={"limit": "0"}, headers=BROWSER)
        assert bad.status_code == 400 and "between 1 and 100" in bad.text


def test_a_session_never_creates_and_never_reaches_other_endpoints(api: HistoryApi) -> None:
    with _http(api, _session("ops", is_staff=True, is_superuser=True)) as http:
        create = http.post("/v1/responses", json={"model": "gpt-house", "input": "hi"})
        assert create.status_code == 401, create.text
        assert "API key" in create.json()["error"]["message"]
        # the read endpoints outside the history take keys only
        assert http.get("/v1/models").status_code == 401
        assert http.get("/v1/conversations/conv_x/items").status_code == 401


def test_a_presented_key_is_what_counts(api: HistoryApi) -> None:
    theirs = make_response(api.other_tenant_id)
    cookies = _session("ops", is_staff=True)
    with _http(api, cookies) as http:
        keyed = http.get("/v1/responses", headers={"Authorization": f"Bearer {api.key}", **BROWSER})
        assert keyed.status_code == 200 and keyed.headers["content-type"] == "application/json"
        assert theirs.id not in keyed.text  # the key's tenant only, whatever the session
        wrong = http.get("/v1/responses", headers={"Authorization": "Bearer sk-gw-nope_nope"})
        assert wrong.status_code == 401  # a bad key is not rescued by the session


@pytest.mark.parametrize(
    "flags", [{}, {"is_staff": True, "is_active": False}, {"is_staff": True, "no_permission": True}]
)
def test_only_an_active_staff_user_who_may_view_responses(api: HistoryApi, flags: dict) -> None:
    no_permission = flags.pop("no_permission", False)
    cookies = _session("someone", **flags) if flags.get("is_active", True) else None
    if cookies is None:  # log in, then be deactivated
        cookies = _session("someone", is_staff=True)
        get_user_model().objects.filter(username="someone").update(is_active=False)
    if no_permission:
        get_user_model().objects.get(username="someone").user_permissions.clear()
    with _http(api, cookies) as http:
        reply = http.get("/v1/responses", headers=BROWSER)
        assert reply.status_code == 401, reply.text
        assert reply.headers["content-type"] == "application/json"
    with _http(api, {"sessionid": "not-a-session"}) as http:
        assert http.get("/v1/responses").status_code == 401
