"""API keys as operators manage them: expiry (a 401 that says so, names no tenant, and holds
on a cached key), regenerating the secret (same key, old secret refused) and the key page's
spend. Runs on both suites."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from tests.support.harness import MODEL, Gateway, make_key
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


@pytest.fixture(autouse=True)
def _plain_static(settings):
    # As tests/admin/conftest.py: render {% static %} without collectstatic's manifest.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def key_of(raw: str):
    from responses_api.models import ApiKey

    return ApiKey.objects.get(prefix=raw.split("_")[0].removeprefix("sk-gw-"))


def status_and_code(gateway: Gateway, key: str) -> tuple[int, str | None]:
    with gateway.http(key) as client:
        reply = client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    return reply.status_code, (reply.json().get("error") or {}).get("code") if reply.status_code != 200 else None


def test_an_expired_key_gets_a_401_that_says_so_and_names_no_tenant(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.api import auth
    from responses_api.models import ApiKey

    scripted.set_default(MODEL, Reply(text="ok"))
    raw, _ = make_key(tenant="secret-tenant-name", name="secret-key-name")
    key = key_of(raw)
    ApiKey.objects.filter(id=key.id).update(expires_at=timezone.now() + timedelta(days=1))
    auth.clear_cache()
    assert status_and_code(gateway, raw) == (200, None)  # not expired yet
    ApiKey.objects.filter(id=key.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    auth.clear_cache()
    with gateway.http(raw) as client:
        reply = client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
        listed = client.get("/v1/responses/resp_x")
    assert reply.status_code == 401, reply.text
    error = reply.json()["error"]
    assert error["code"] == "api_key_expired" and "expired" in error["message"]
    assert "secret-tenant-name" not in reply.text and "secret-key-name" not in reply.text
    assert listed.status_code == 401 and listed.json()["error"]["code"] == "api_key_expired"
    # A wrong secret under the expired key's prefix learns nothing: the plain invalid-key 401.
    wrong = raw[:-4] + ("aaaa" if not raw.endswith("aaaa") else "bbbb")
    assert status_and_code(gateway, wrong) == (401, "invalid_api_key")


def test_a_cached_key_is_refused_once_its_expiry_passes(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """The key cache (GATEWAY_CACHE_SECONDS) holds the expiry with the key: a key that expires
    while cached is refused at once, not a cache time later."""
    from responses_api.api import auth
    from responses_api.models import ApiKey
    from responses_api.store.services import hash_key

    scripted.set_default(MODEL, Reply(text="ok"))
    ApiKey.objects.filter(id=key_of(gateway.key).id).update(expires_at=timezone.now() + timedelta(hours=1))
    auth.clear_cache()
    assert status_and_code(gateway, gateway.key) == (200, None)
    cached = auth.cached_principal(gateway.key)
    assert cached is not None and cached.expires_at is not None
    # The hour passes while the entry is still cached: the same entry, its expiry now behind it.
    auth._cache.put(hash_key(gateway.key), dataclasses.replace(cached, expires_at=time.time() - 1))
    assert status_and_code(gateway, gateway.key) == (401, "api_key_expired")


def test_the_admin_sets_an_expiry_and_lists_the_key_as_expired(admin_client, gateway: Gateway) -> None:
    key = key_of(gateway.key)
    form = {
        "name": "test",
        "allowed_models": "",
        "expires_at_0": "2001-01-01",
        "expires_at_1": "00:00:00",
        "requests_per_minute": "",
        "tokens_per_minute": "",
        "max_concurrent_requests": "",
        "budget_period": "month",
        "alert_thresholds": "[80, 100]",
    }
    reply = admin_client.post(f"/admin/responses_api/apikey/{key.id}/change/", form)
    assert reply.status_code == 302, reply.content.decode()[:3000]
    key.refresh_from_db()
    assert key.expires_at is not None and key.expires_at.year == 2001
    listing = admin_client.get("/admin/responses_api/apikey/?state=expired").content.decode()
    assert ">expired<" in listing and key.prefix in listing
    assert key.prefix not in admin_client.get("/admin/responses_api/apikey/?state=active").content.decode()


def test_regenerate_keeps_the_key_and_refuses_the_old_secret(
    admin_client,
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import ApiKey, Response

    scripted.set_default(MODEL, Reply(text="ok"))
    old = key_of(gateway.key)
    ApiKey.objects.filter(id=old.id).update(requests_per_minute=50, budget_tokens=10_000)
    assert status_and_code(gateway, gateway.key) == (200, None)
    page = admin_client.get(f"/admin/responses_api/apikey/{old.id}/change/").content.decode()
    assert 'id="gw-regenerate"' in page
    assert admin_client.get(f"/admin/responses_api/apikey/{old.id}/regenerate/").status_code == 302  # GET: nothing
    assert ApiKey.objects.get(id=old.id).secret_hash == old.secret_hash

    reply = admin_client.post(f"/admin/responses_api/apikey/{old.id}/regenerate/")
    assert reply.status_code == 302
    shown = admin_client.get(reply["Location"]).content.decode()
    new = ApiKey.objects.get(id=old.id)
    assert new.secret_hash != old.secret_hash and new.prefix != old.prefix
    assert (new.name, new.tenant_id, new.requests_per_minute, new.budget_tokens) == ("test", old.tenant_id, 50, 10_000)
    secret = shown.split('id="gw-secret-value">', 1)[1].split("<", 1)[0]
    assert secret.startswith(f"sk-gw-{new.prefix}_")
    assert "gw-secret-value" not in admin_client.get(reply["Location"]).content.decode()  # shown once
    # The admin cleared this process's key cache; another process's lasts GATEWAY_CACHE_SECONDS.
    assert status_and_code(gateway, gateway.key) == (401, "invalid_api_key")
    assert status_and_code(gateway, secret) == (200, None)
    assert Response.objects.filter(api_key_id=old.id).count() == 2  # its usage history is the same key's


def test_a_revoked_key_cannot_be_regenerated(admin_client, gateway: Gateway) -> None:
    from responses_api.models import ApiKey

    key = key_of(gateway.key)
    ApiKey.objects.filter(id=key.id).update(revoked_at=timezone.now())
    admin_client.post(f"/admin/responses_api/apikey/{key.id}/regenerate/")
    assert ApiKey.objects.get(id=key.id).secret_hash == key.secret_hash
    assert (
        'id="gw-regenerate"' not in admin_client.get(f"/admin/responses_api/apikey/{key.id}/change/").content.decode()
    )


def test_the_key_page_shows_what_the_key_spent(
    admin_client,
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import ModelRoute
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(
        input_usd_per_million=Decimal("1000"), output_usd_per_million=Decimal("4000")
    )
    routing.clear_cache()
    scripted.set_default(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    )
    other, _ = make_key(name="other")
    for key in (gateway.key, gateway.key, other):
        assert status_and_code(gateway, key) == (200, None)
    page = admin_client.get(f"/admin/responses_api/apikey/{key_of(gateway.key).id}/change/").content.decode()
    spend = page.split('data-role="cost-table"', 1)[1].split("</table>", 1)[0]
    # Two calls of 10 * $1000 + 5 * $4000 per million tokens: 30 tokens, $0.06 (the other key's
    # not counted), in the model's row and in today's and the month's totals.
    assert spend.count("<td>30</td>") == 3 and spend.count("$0.06") == 3, spend
