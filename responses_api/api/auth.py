"""Who is asking: the `Principal` (domain.py) of an API key, with its key's and tenant's rate
limits and budget, or of a staff user's admin session browsing the history read-only. The DRF
authentication classes that call these are in `drf_policies.py`.

Keys look like `sk-gw-<prefix>_<secret>`; the database keeps the prefix and
the SHA-256 of the whole key. Successful look-ups are cached in-process for
GATEWAY_CACHE_SECONDS, so a revoked (or regenerated) key stops working within that time; an
expiry is checked on every request, cached or not.
"""

from __future__ import annotations

import hmac
import time
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest
from django.utils import timezone

from ..domain import Budget, Principal, Quota
from ..models import ApiKey, Tenant
from ..protocol.errors import AuthenticationFailed
from ..store import db
from ..store.services import KEY_PREFIX, hash_key
from ..store.ttlcache import TTLCache

_cache: TTLCache[str, Principal] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


def bearer_token(header: str | None) -> str:
    if not header:
        raise AuthenticationFailed("You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationFailed("Malformed Authorization header; expected 'Bearer <key>'.")
    return token.strip()


def _invalid() -> AuthenticationFailed:
    return AuthenticationFailed("Incorrect API key provided.")


def _expired() -> AuthenticationFailed:
    # Names neither the key's tenant nor its name: whoever holds an old key learns only that it expired.
    return AuthenticationFailed("This API key has expired.", code="api_key_expired")


def _unexpired(principal: Principal) -> Principal:
    if principal.expires_at is not None and principal.expires_at <= time.time():
        raise _expired()
    return principal


def cached_principal(raw_key: str) -> Principal | None:
    """The cached principal for a key, without touching the database."""
    cached = _cache.get(hash_key(raw_key))
    return _unexpired(cached[0]) if cached is not None else None


async def principal_for(raw_key: str) -> Principal:
    """Async: the cached principal, or a look-up off the event loop."""
    cached = cached_principal(raw_key)
    # Concurrent requests with one key share one look-up (when the cache entry expires, every
    # request in flight misses at once).
    return cached if cached is not None else await db.run_shared(("key", raw_key), authenticate_key, raw_key)


def authenticate_key(raw_key: str) -> Principal:
    """Sync: look the key up (cached). Raises AuthenticationFailed."""
    digest = hash_key(raw_key)
    cached = _cache.get(digest)
    if cached is not None:
        return _unexpired(cached[0])
    if not raw_key.startswith(KEY_PREFIX) or "_" not in raw_key[len(KEY_PREFIX) :]:
        raise _invalid()
    prefix = raw_key[len(KEY_PREFIX) :].split("_", 1)[0]
    key = ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()
    if key is None or not hmac.compare_digest(key.secret_hash, digest):
        raise _invalid()
    if key.revoked_at is not None:
        # Only the key's holder gets here (the secret matched): telling them it was revoked,
        # and nothing about whose it was, says what to do (ask for a new one).
        raise AuthenticationFailed("This API key was revoked; ask the gateway's operator for a new one.")
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise _expired()
    if key.last_used_at is None or (timezone.now() - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(id=key.id).update(last_used_at=timezone.now())
    principal = Principal(
        tenant_id=key.tenant_id,
        tenant_name=key.tenant.name,
        key_id=key.id,
        key_name=key.name,
        is_admin=key.is_admin,
        allowed_models=tuple(key.allowed_models or ()),
        quotas=tuple(q for q in (key_quota(key), tenant_quota(key.tenant)) if q is not None),
        budgets=tuple(b for b in (budget_of(key), budget_of(key.tenant)) if b is not None),
        expires_at=key.expires_at.timestamp() if key.expires_at is not None else None,
    )
    return _cache.put(digest, principal)


def staff_principal(request: HttpRequest) -> Principal | None:
    """Sync: the read-only principal of a logged-in staff user who may view responses in the
    admin, from the request's admin session cookie; None without one. It reads every tenant
    (`is_admin`), has no limits and no key: only the history's GET and HEAD accept it."""
    session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    if not session_key:
        return None
    if not hasattr(request, "session"):  # the ASGI fast lane runs no SessionMiddleware
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(request)
    if not (user.is_active and user.is_staff and user.has_perm("responses_api.view_response")):
        return None
    name = user.get_username()
    return Principal(
        tenant_id=0,
        tenant_name="",
        key_id=0,
        key_name=f"staff session: {name}",
        is_admin=True,
        allowed_models=(),
        staff_user=name,
    )


def quota_of(scope: str, label: str, owner: ApiKey | Tenant) -> Quota | None:
    """A key's or tenant's per-minute and concurrency limits; None when it has none."""
    if not (owner.requests_per_minute or owner.tokens_per_minute or owner.max_concurrent_requests):
        return None
    return Quota(
        scope,
        label,
        owner.requests_per_minute,
        owner.tokens_per_minute,
        owner.max_concurrent_requests,
        alert_at=tuple(sorted({t for t in owner.alert_thresholds or () if t <= 100})),
    )


def key_quota(key: ApiKey) -> Quota | None:
    return quota_of(f"key:{key.id}", f"API key '{key.name}'", key)


def tenant_quota(tenant: Tenant) -> Quota | None:
    return quota_of(f"tenant:{tenant.id}", f"tenant '{tenant.name}'", tenant)


def budget_of(owner: ApiKey | Tenant) -> Budget | None:
    """A key's own budget, or its tenant's (all its keys together); None when it has none."""
    if owner.budget_tokens is None and owner.budget_usd is None:
        return None
    is_key = isinstance(owner, ApiKey)
    return Budget(
        owner.tenant_id if isinstance(owner, ApiKey) else owner.id,
        owner.budget_period,
        owner.budget_tokens,
        owner.budget_usd,
        key_id=owner.id if is_key else None,
        label=f"API key '{owner.name}'" if is_key else "this tenant",
        alert_at=tuple(sorted(set(owner.alert_thresholds or ()))),
    )


def clear_cache() -> None:
    _cache.clear()
