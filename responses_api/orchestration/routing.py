"""Model routes: which upstream targets serve a public model name, weighted, with fallback.

Routes are read from the database and cached in-process for
GATEWAY_CACHE_SECONDS, so an admin edit takes effect within that time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.conf import settings

from ..domain import ProviderConfig, Route, Target
from ..protocol.errors import NotFound, ProviderMisconfigured
from ..sealing import SealBroken, decrypt_secret, encrypt_secret
from ..store import selectors
from ..ttlcache import TTLCache

if TYPE_CHECKING:
    from ..models import Provider

__all__ = ["encrypt_secret", "provider_secret", "route_get"]


def provider_secret(provider: Provider) -> str | None:
    """The provider's API key; a ProviderMisconfigured (503) naming the remedy when it has one
    it cannot get (README.md, "Rotating secrets")."""
    if provider.api_key_env:
        value = os.environ.get(provider.api_key_env)
        if not value:
            raise ProviderMisconfigured(
                f"Provider '{provider.name}' reads its API key from ${provider.api_key_env}, which is "
                f"{'empty' if value == '' else 'not set'} in the gateway's environment: the operator must set it.",
            )
        return value
    if provider.api_key_encrypted:
        try:
            return decrypt_secret(provider.api_key_encrypted)
        except SealBroken:
            raise ProviderMisconfigured(
                f"Provider '{provider.name}''s stored API key was encrypted under a key that is no longer "
                "listed (GATEWAY_ENCRYPTION_KEY, SECRET_KEY, SECRET_KEY_FALLBACKS): the operator must list "
                "that key again and run `manage.py reseal_secrets`, or set the provider's API key anew."
            ) from None
    return None


def provider_config(provider: Provider) -> ProviderConfig:
    return ProviderConfig(
        name=provider.name,
        kind=provider.kind,
        base_url=provider.base_url.rstrip("/"),
        api_key=provider_secret(provider),
        timeout=provider.timeout,
        connect_timeout=provider.connect_timeout,
        first_byte_timeout=provider.first_byte_timeout,
        idle_timeout=provider.idle_timeout,
        options=dict(provider.options or {}),
        headers=dict(provider.headers or {}),
    )


_routes: TTLCache[str, Route | None] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


def route_cached(model: str) -> Route | None:
    """The cached route, without touching the database (None: look it up)."""
    cached = _routes.get(model)
    return cached[0] if cached is not None else None


def route_get(model: str) -> Route:
    """Sync: the route for a public model name (cached; an unknown name too)."""
    cached = _routes.get(model)
    if cached is None:
        route = selectors.route_enabled(model)
        value = None
        if route is not None:
            targets = tuple(
                Target(provider_config(t.provider), t.upstream_model, t.weight, t.priority, t.max_concurrent)
                for t in route.targets.all()
                if t.provider.enabled
            )
            value = (
                Route(
                    route.name,
                    targets,
                    route.run_on_worker,
                    tuple(sorted((route.hosted_tools or {}).items())),
                    route.context_window,
                    route.price,
                )
                if targets
                else None
            )
        cached = (_routes.put(model, value),)
    if cached[0] is None:
        raise NotFound(
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return cached[0]


def clear_cache() -> None:
    _routes.clear()
