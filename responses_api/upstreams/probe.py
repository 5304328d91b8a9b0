"""The admin's "Check connection": one GET of a provider's model list, outside any request.

Sync on purpose: it runs in an admin action's thread, once per provider the operator picked."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from ..domain import ProviderConfig
from .dialects import dialect_named


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What the provider answered. `error` set: it could not be reached (`status` 0) or did
    not answer 200; `models` None: it answered 200 with something other than a model list."""

    url: str
    status: int = 0
    elapsed_ms: float = 0.0
    models: list[str] | None = None
    error: str = ""


def list_models(provider: ProviderConfig, *, timeout: float = 5.0) -> ProbeResult:
    """GET `<base_url>/models` with the headers every call to the provider sends: its dialect's
    (where its key goes: a bearer token, or Anthropic's x-api-key and anthropic-version) and its
    configured ones."""
    url = provider.base_url.rstrip("/") + "/models"
    sent = dialect_named(provider.kind).headers(provider, json_body=False)
    started = time.monotonic()
    try:
        reply = httpx.get(
            url, headers=sent, timeout=httpx.Timeout(timeout, connect=min(provider.connect_timeout, timeout))
        )
    except httpx.HTTPError as exc:
        return ProbeResult(url, error=f"{exc.__class__.__name__}: {exc}")
    elapsed = (time.monotonic() - started) * 1000
    if reply.status_code != 200:
        return ProbeResult(url, reply.status_code, elapsed, error=reply.text[:300])
    try:
        models = [str(m.get("id", "?")) for m in reply.json().get("data", [])]
    except (ValueError, AttributeError):
        return ProbeResult(url, 200, elapsed)
    return ProbeResult(url, 200, elapsed, models)
