"""Sync providers and model routes from the GATEWAY_CONFIG file (YAML or JSON) into the database.

Idempotent: running it again with the same file changes nothing. Entries not
in the file are left alone (the admin may have added them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from ..models import ModelRoute, Provider, RouteTarget
from ..orchestration.routing import clear_cache, encrypt_secret


class ConfigError(ValueError):
    pass


def load_config_file(path: str | Path) -> dict[str, Any]:
    text = Path(path).read_text()
    try:
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def _require(entry: dict, key: str, where: str) -> Any:
    if key not in entry or entry[key] in (None, ""):
        raise ConfigError(f"{where}: '{key}' is required")
    return entry[key]


@transaction.atomic
def sync_config(data: dict[str, Any]) -> dict[str, int]:
    """Upsert providers and routes; returns counts of what was written."""
    counts = {
        "providers": 0,
        "models": 0,
        "tools": 0,
        "mcp_servers": 0,
        "tenants": _sync_tenants(data.get("tenants") or []),
    }
    providers: dict[str, Provider] = {}
    for i, entry in enumerate(data.get("providers") or []):
        where = f"providers[{i}]"
        name = _require(entry, "name", where)
        defaults = {
            "kind": entry.get("kind", "chat_completions"),
            "base_url": _require(entry, "base_url", where),
            "api_key_env": entry.get("api_key_env", ""),
            "timeout": float(entry.get("timeout", 120.0)),
            "connect_timeout": float(entry.get("connect_timeout", 5.0)),
            "first_byte_timeout": float(entry.get("first_byte_timeout", 60.0)),
            "idle_timeout": float(entry.get("idle_timeout", 30.0)),
            "options": entry.get("options") or {},
            "headers": entry.get("headers") or {},
            "enabled": bool(entry.get("enabled", True)),
        }
        if defaults["kind"] not in Provider.Kind.values:
            raise ConfigError(f"{where}: unknown kind {defaults['kind']!r}")
        provider = Provider.objects.filter(name=name).first() or Provider(name=name)
        for key, value in defaults.items():
            setattr(provider, key, value)
        if entry.get("api_key"):
            provider.api_key_encrypted = encrypt_secret(str(entry["api_key"]))
        _save_valid(provider, where)
        providers[name] = provider
        counts["providers"] += 1
    for i, entry in enumerate(data.get("models") or []):
        where = f"models[{i}]"
        route, _ = ModelRoute.objects.update_or_create(
            name=_require(entry, "name", where),
            defaults={
                "description": entry.get("description", ""),
                "enabled": bool(entry.get("enabled", True)),
                "hosted_tools": entry.get("hosted_tools") or {},
                "context_window": int(entry["context_window"]) if entry.get("context_window") else None,
                **_price(entry.get("price"), f"{where}.price"),
            },
        )
        _save_valid(route, where)
        targets = _require(entry, "targets", where)
        wanted = []
        for j, target in enumerate(targets):
            provider_name = _require(target, "provider", f"{where}.targets[{j}]")
            target_provider = providers.get(provider_name) or Provider.objects.filter(name=provider_name).first()
            if target_provider is None:
                raise ConfigError(f"{where}.targets[{j}]: unknown provider {provider_name!r}")
            limit = target.get("max_concurrent")
            wanted.append(
                (
                    target_provider.id,
                    str(_require(target, "model", f"{where}.targets[{j}]")),
                    int(target.get("weight", 1)),
                    int(target.get("priority", 0)),
                    int(limit) if limit is not None else None,
                )
            )
        current = list(
            route.targets.order_by("id").values_list(
                "provider_id", "upstream_model", "weight", "priority", "max_concurrent"
            )
        )
        if current != wanted:
            route.targets.all().delete()
            RouteTarget.objects.bulk_create(
                RouteTarget(route=route, provider_id=p, upstream_model=m, weight=w, priority=pr, max_concurrent=c)
                for p, m, w, pr, c in wanted
            )
        counts["models"] += 1
    counts["tools"] = _sync_tools(data.get("tools") or [])
    counts["mcp_servers"] = _sync_mcp_servers(data.get("mcp_servers") or [])
    clear_cache()
    from ..api.auth import clear_cache as clear_key_cache  # tenants' limits are cached with the keys

    clear_key_cache()
    return counts


_TENANT_LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests", "retention_days")


def _sync_tenants(entries: list[dict[str, Any]]) -> int:
    """Tenants with their rate limits, budget and retention (keys are made with create_api_key;
    their own limits are set in the admin). A field left out of an entry is left as it is."""
    from decimal import Decimal, InvalidOperation

    from ..models import Tenant

    for i, entry in enumerate(entries):
        where = f"tenants[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping")
        unknown = set(entry) - {"name", "budget", "keys", *_TENANT_LIMITS}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        tenant = Tenant.objects.filter(name=_require(entry, "name", where)).first() or Tenant(name=entry["name"])
        for field in _TENANT_LIMITS:
            if field in entry:
                setattr(tenant, field, entry[field])
        if "budget" in entry:
            budget = entry["budget"] or {}
            if not isinstance(budget, dict) or set(budget) - {"period", "tokens", "usd"}:
                raise ConfigError(f"{where}.budget: expected a mapping of period, tokens and usd")
            tenant.budget_period = budget.get("period", "month")
            tenant.budget_tokens = budget.get("tokens")
            try:
                tenant.budget_usd = Decimal(str(budget["usd"])) if budget.get("usd") is not None else None
            except InvalidOperation:
                raise ConfigError(f"{where}.budget.usd: not a number") from None
        _save_valid(tenant, where)
        _sync_key_limits(tenant, entry.get("keys") or [], where)
    return len(entries)


_KEY_LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def _sync_key_limits(tenant: Any, entries: list[Any], where: str) -> None:
    """`keys: [{name, requests_per_minute, ...}]`: limits of the tenant's keys with that name
    (keys themselves are made with create_api_key; a name with no key yet is logged, not an
    error, so a deployment's config may name keys created after it)."""
    import logging

    from ..models import ApiKey

    for j, entry in enumerate(entries):
        at = f"{where}.keys[{j}]"
        if not isinstance(entry, dict) or set(entry) - {"name", *_KEY_LIMITS}:
            raise ConfigError(f"{at}: expected a mapping of name and {', '.join(_KEY_LIMITS)}")
        name = _require(entry, "name", at)
        for field in _KEY_LIMITS:
            value = entry.get(field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{at}.{field}: a positive integer, or null for no limit")
        updated = ApiKey.objects.filter(tenant=tenant, name=name).update(
            **{field: entry[field] for field in _KEY_LIMITS if field in entry}
        )
        if not updated:
            logging.getLogger("gateway.config").warning(
                "%s: tenant %r has no API key named %r yet; its limits apply once config is synced again",
                at,
                tenant.name,
                name,
            )


def _price(price: Any, where: str) -> dict[str, Any]:
    """A route's price table: {input_usd_per_million, output_usd_per_million}."""
    from decimal import Decimal, InvalidOperation

    if price is None:
        return {"input_usd_per_million": None, "output_usd_per_million": None}
    if not isinstance(price, dict) or set(price) - {"input_usd_per_million", "output_usd_per_million"}:
        raise ConfigError(f"{where}: expected a mapping of input_usd_per_million and output_usd_per_million")
    try:
        return {
            k: Decimal(str(price[k])) if price.get(k) is not None else None
            for k in ("input_usd_per_million", "output_usd_per_million")
        }
    except InvalidOperation:
        raise ConfigError(f"{where}: prices must be numbers") from None


def _save_valid(obj: Any, where: str) -> None:
    """Model validation first: a bad entry is a ConfigError naming its place, nothing saved."""
    try:
        obj.full_clean()
    except ValidationError as exc:
        raise ConfigError(f"{where}: {exc.message_dict}") from exc
    obj.save()


def _sync_tools(entries: list[dict[str, Any]]) -> int:
    from tool_registry.models import Tool

    for i, entry in enumerate(entries):
        where = f"tools[{i}]"
        executor = _require(entry, "executor", where)
        if not isinstance(executor, dict):
            raise ConfigError(f"{where}.executor: expected a mapping with a 'type'")
        kind = _require(executor, "type", f"{where}.executor")
        tool = Tool.objects.filter(name=_require(entry, "name", where)).first() or Tool(name=entry["name"])
        tool.description = entry.get("description", "")
        tool.parameters = entry.get("parameters") or {"type": "object", "properties": {}}
        tool.strict = bool(entry.get("strict", True))
        tool.enabled = bool(entry.get("enabled", True))
        tool.executor = kind
        tool.timeout = float(executor.get("timeout", entry.get("timeout", 30.0)))
        tool.url = executor.get("url", "")
        tool.headers_env = executor.get("headers_env") or {}
        tool.signing_secret_env = executor.get("signing_secret_env", "")
        tool.python_callable = executor.get("callable", "")
        tool.run_on_worker = bool(entry.get("run_on_worker", False))
        _save_valid(tool, where)
        if "routes" in entry:
            tool.routes.set(ModelRoute.objects.filter(name__in=entry["routes"]))
    return len(entries)


def _sync_mcp_servers(entries: list[dict[str, Any]]) -> int:
    """`mcp_servers:` entries: label, url, headers_env, allowed_tools, require_approval
    (always | never | a list of the tools that need it), timeout, cache_seconds, routes, tenants."""
    from responses_api.models import Tenant
    from tool_registry.models import McpServer

    for i, entry in enumerate(entries):
        where = f"mcp_servers[{i}]"
        label = _require(entry, "label", where)
        server = McpServer.objects.filter(label=label).first() or McpServer(label=label)
        server.url = _require(entry, "url", where)
        server.description = entry.get("description", "")
        server.headers_env = entry.get("headers_env") or {}
        server.allowed_tools = entry.get("allowed_tools") or []
        approval = entry.get("require_approval", "always")
        if isinstance(approval, list):
            server.approval, server.approval_tools = McpServer.Approval.PER_TOOL, approval
        elif approval in ("always", "never"):
            server.approval, server.approval_tools = approval, []
        else:
            raise ConfigError(f"{where}.require_approval: 'always', 'never' or a list of tool names")
        server.timeout = float(entry.get("timeout", 30.0))
        server.cache_seconds = int(entry.get("cache_seconds", 300))
        server.enabled = bool(entry.get("enabled", True))
        _save_valid(server, where)
        if "routes" in entry:
            server.routes.set(ModelRoute.objects.filter(name__in=entry["routes"]))
        if "tenants" in entry:
            server.tenants.set(Tenant.objects.filter(name__in=entry["tenants"]))
    return len(entries)


def sync_config_file(path: str | Path) -> dict[str, int]:
    return sync_config(load_config_file(path))
