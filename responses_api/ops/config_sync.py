"""Sync providers and model routes from the GATEWAY_CONFIG file (YAML or JSON) into the database.

Idempotent: running it again with the same file changes nothing. One rule for every
section (providers, models, tools, mcp_servers, tenants, alert_webhooks, prompts, guardrails): a field the file sets is the
file's, recorded in the entry's `config_managed` and read-only in the admin; a field it
leaves out is the admin's and never reset; an entry not (or no longer) in the file is left
alone, and unmarked. Run once per deployment (compose's `migrate` service, `scripts/run`),
never by the web processes.

Ownership is per source file (`config_source`): a sync un-marks only the entries its own file
managed, and refuses an entry another file still manages, so syncing file B never changes what
file A manages. The bundled model of `scripts/run` yields to any file, and an entry whose file
is gone may be taken over (a moved or renamed file).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from tool_registry.models import McpServer, Tool

from ..api.auth import clear_cache as clear_key_cache
from ..models import (
    PRICE_FIELDS,
    AlertWebhook,
    ApiKey,
    Guardrail,
    ModelRoute,
    Prompt,
    PromptVersion,
    Provider,
    RouteTarget,
    Tenant,
    validate_alert_thresholds,
)
from ..orchestration.guardrails import clear_cache as clear_guardrail_cache
from ..orchestration.routing import clear_cache, encrypt_secret
from ..upstreams import dialects


class ConfigError(ValueError):
    pass


# The `config_source` of the entries `scripts/run` (gateway_up) generates for the bundled model:
# not a file of the operator's, so any file may take those entries over.
BUNDLED_SOURCE = "scripts/run (bundled model)"

_log = logging.getLogger("gateway.config")


def source_of(path: str | Path) -> str:
    """A file's source name: its absolute path, the same from any working directory."""
    return str(Path(path).resolve())


def _claim(obj: Any, source: str, where: str) -> None:
    """Make `source` the entry's owner, unless another file still manages it."""
    owner = getattr(obj, "config_source", "") or ""
    if obj.pk is not None and obj.config_managed and owner and owner != source:
        if owner != BUNDLED_SOURCE and Path(owner).exists():
            raise ConfigError(
                f"{where}: {_name_of(obj)!r} is managed by {owner}; remove it from that file "
                "(and sync it) before another file may manage it"
            )
        _log.warning("%s: %r was managed by %s; %s manages it now", where, _name_of(obj), owner, source or "this sync")
    obj.config_source = source


def _name_of(obj: Any) -> str:
    return str(getattr(obj, "name", None) or getattr(obj, "label", ""))


def load_config_file(path: str | Path) -> dict[str, Any]:
    text = Path(path).read_text()
    try:
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def _require(entry: dict[str, Any], key: str, where: str) -> Any:
    if key not in entry or entry[key] in (None, ""):
        raise ConfigError(f"{where}: '{key}' is required")
    return entry[key]


def _known_keys(entry: Any, allowed: Iterable[str], where: str) -> None:
    """A misspelt key is named as unknown (with the key it probably meant), before any check of
    what is missing: `target:` for `targets:` reads "unknown key target", not "targets is required"."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping")
    allowed = set(allowed)
    unknown = sorted(set(entry) - allowed)
    if unknown:
        hints = [
            f"{key!r} (did you mean {close[0]!r}?)" if (close := get_close_matches(key, allowed, 1)) else repr(key)
            for key in unknown
        ]
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}: {', '.join(hints)}")


def _float(value: Any) -> float:
    return float(value)


def _set(obj: Any, entry: dict[str, Any], fields: dict[str, Any], where: str, source: str) -> None:
    """The file's rule: each key `fields` names that the entry sets is applied (through its
    function, to one or more model fields) and recorded in `config_managed`; a key the entry
    leaves out is the admin's, and its fields keep whatever they hold (a new entry: the
    model's defaults, which are the documented ones)."""
    _claim(obj, source, where)
    managed = []
    for key, convert in fields.items():
        if key not in entry:
            continue
        try:
            values = convert(entry[key])
        except _BadField as exc:
            raise ConfigError(f"{where}.{key}.{exc.field}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.{key}: {exc}") from None
        for attr, value in values.items():
            setattr(obj, attr, value)
        managed.append(key)
    obj.config_managed = managed


def _unmanage_others(model: Any, key: str, kept: set[str], section: str, source: str) -> None:
    """Entries that left the file stay, unmarked: from now on they are the admin's alone. Only
    this source's entries (and those of no recorded source, from before sources were kept):
    another file's entries are that file's business."""
    rows = model.objects.exclude(**{f"{key}__in": kept}).filter(config_source__in={source, ""})
    for obj in rows.only("pk", key, "config_managed"):
        if obj.config_managed:
            model.objects.filter(pk=obj.pk).update(config_managed=[], config_source="")
            _log.warning(
                "%s: %r is no longer in the file; left in place, no longer managed by it", section, getattr(obj, key)
            )


def _provider_kind(value: Any) -> dict[str, Any]:
    if not dialects.known(value):
        raise ValueError(f"unknown kind {value!r}")
    return {"kind": value}


_PROVIDER_FIELDS: dict[str, Any] = {
    "kind": _provider_kind,
    "base_url": lambda v: {"base_url": v},
    "api_key_env": lambda v: {"api_key_env": v or ""},
    "api_key": lambda v: {"api_key_encrypted": encrypt_secret(str(v)) if v else ""},
    "timeout": lambda v: {"timeout": _float(v)},
    "connect_timeout": lambda v: {"connect_timeout": _float(v)},
    "first_byte_timeout": lambda v: {"first_byte_timeout": _float(v)},
    "idle_timeout": lambda v: {"idle_timeout": _float(v)},
    "options": lambda v: {"options": v or {}},
    "headers": lambda v: {"headers": v or {}},
    "enabled": lambda v: {"enabled": bool(v)},
}


def _route_fields(where: str) -> dict[str, Any]:
    return {
        "description": lambda v: {"description": v or ""},
        "enabled": lambda v: {"enabled": bool(v)},
        "hosted_tools": lambda v: {"hosted_tools": v or {}},
        "context_window": lambda v: {"context_window": int(v) if v else None},
        "price": lambda v: _price(v, f"{where}.price"),
    }


_TARGET_KEYS = ("provider", "model", "weight", "priority", "max_concurrent")


@transaction.atomic
def sync_config(data: dict[str, Any], *, source: str = "") -> dict[str, int]:
    """Upsert what the file lists; returns counts of what was written.

    A field the file sets is the file's (written at every sync, read-only in the admin); a
    field it leaves out is the admin's and never reset; an entry that left the file is left
    in place, no longer marked as managed (`config_managed` empty). `source` names the file
    (source_of(path), or BUNDLED_SOURCE): only its own entries are un-marked, and an entry
    another existing file manages is refused (ConfigError, nothing written)."""
    counts = {
        "providers": 0,
        "models": 0,
        "tools": 0,
        "mcp_servers": 0,
        "tenants": _sync_tenants(data.get("tenants") or [], source),
        "alert_webhooks": _sync_alert_webhooks(data.get("alert_webhooks") or [], source),
    }
    providers: dict[str, Provider] = {}
    for i, entry in enumerate(data.get("providers") or []):
        where = f"providers[{i}]"
        _known_keys(entry, {"name", *_PROVIDER_FIELDS}, where)
        name = _require(entry, "name", where)
        _require(entry, "base_url", where)
        provider = Provider.objects.filter(name=name).first() or Provider(name=name)
        _set(provider, entry, _PROVIDER_FIELDS, where, source)
        _save_valid(provider, where)
        providers[name] = provider
        counts["providers"] += 1
    _unmanage_others(Provider, "name", set(providers), "providers", source)
    routes: set[str] = set()
    for i, entry in enumerate(data.get("models") or []):
        where = f"models[{i}]"
        _known_keys(entry, {"name", "targets", *_route_fields(where)}, where)
        name = _require(entry, "name", where)
        targets = _require(entry, "targets", where)
        route = ModelRoute.objects.filter(name=name).first() or ModelRoute(name=name)
        _set(route, entry, _route_fields(where), where, source)
        route.config_managed.append("targets")
        _save_valid(route, where)
        routes.add(name)
        wanted = []
        for j, target in enumerate(targets):
            _known_keys(target, _TARGET_KEYS, f"{where}.targets[{j}]")
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
    _unmanage_others(ModelRoute, "name", routes, "models", source)
    counts["tools"] = _sync_tools(data.get("tools") or [], source)
    counts["mcp_servers"] = _sync_mcp_servers(data.get("mcp_servers") or [], source)
    counts["prompts"] = _sync_prompts(data.get("prompts") or [], source)
    counts["guardrails"] = _sync_guardrails(data.get("guardrails") or [], source)
    clear_cache()
    clear_guardrail_cache()

    clear_key_cache()
    return counts


_TENANT_LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests", "retention_days")


class _BadField(ValueError):
    """A value of a mapping's field (`field`) is refused: the message names its whole path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _tenant_budget(budget: Any) -> dict[str, Any]:
    """A tenant's or a key's `budget: {period, tokens, usd, alert_thresholds}`. Checked here,
    not only by the model: keys are written with `.update()`, which validates nothing (an
    unknown period counted as monthly; a negative count aborted the whole sync in the database)."""
    budget = budget or {}
    if not isinstance(budget, dict) or set(budget) - {"period", "tokens", "usd", "alert_thresholds"}:
        raise ValueError("expected a mapping of period, tokens, usd and alert_thresholds")
    periods = [value for value, _ in ApiKey._meta.get_field("budget_period").choices or []]
    period = budget.get("period", "month")
    if period not in periods:
        raise _BadField("period", f"{period!r} is not one of {', '.join(periods)}")
    tokens = budget.get("tokens")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0):
        raise _BadField("tokens", "a whole number of tokens, 0 or more, or null for no budget")
    try:
        usd = Decimal(str(budget["usd"])) if budget.get("usd") is not None else None
    except InvalidOperation:
        raise _BadField("usd", "not a number") from None
    if usd is not None and (not usd.is_finite() or usd < 0 or isinstance(budget["usd"], bool)):
        raise _BadField("usd", "an amount in USD, 0 or more, or null for no budget")
    return {
        "budget_period": period,
        "budget_tokens": budget.get("tokens"),
        "budget_usd": usd,
        "alert_thresholds": budget.get("alert_thresholds", [80, 100]),
    }


_TENANT_FIELDS: dict[str, Any] = {
    **{field: (lambda v, f=field: {f: v}) for field in _TENANT_LIMITS},
    "budget": _tenant_budget,
}


def _sync_tenants(entries: list[dict[str, Any]], source: str) -> int:
    """Tenants with their rate limits, budget and retention (keys are made with create_api_key;
    `keys:` sets the limits of those named). The file's rule, as for every section."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"tenants[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping")
        unknown = set(entry) - {"name", "budget", "keys", *_TENANT_LIMITS}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        tenant = Tenant.objects.filter(name=_require(entry, "name", where)).first() or Tenant(name=entry["name"])
        _set(tenant, entry, _TENANT_FIELDS, where, source)
        _save_valid(tenant, where)
        _sync_key_limits(tenant, entry.get("keys") or [], where)
        seen.add(tenant.name)
    _unmanage_others(Tenant, "name", seen, "tenants", source)
    return len(entries)


_KEY_LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def _sync_key_limits(tenant: Any, entries: list[Any], where: str) -> None:
    """`keys: [{name, requests_per_minute, ...}]`: limits of the tenant's keys with that name
    (keys themselves are made with create_api_key; a name with no key yet is logged, not an
    error, so a deployment's config may name keys created after it)."""
    for j, entry in enumerate(entries):
        at = f"{where}.keys[{j}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "budget", *_KEY_LIMITS}:
            raise ConfigError(f"{at}: expected a mapping of name, budget and {', '.join(_KEY_LIMITS)}")
        name = _require(entry, "name", at)
        for field in _KEY_LIMITS:
            value = entry.get(field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{at}.{field}: a positive integer, or null for no limit")
        fields = {field: entry[field] for field in _KEY_LIMITS if field in entry}
        if "budget" in entry:
            try:
                fields.update(_tenant_budget(entry["budget"]))
            except _BadField as exc:
                raise ConfigError(f"{at}.budget.{exc.field}: {exc}") from None
            except ValueError as exc:
                raise ConfigError(f"{at}.budget: {exc}") from None
            try:
                validate_alert_thresholds(fields["alert_thresholds"])
            except ValidationError as exc:
                raise ConfigError(f"{at}.budget.alert_thresholds: {exc.messages[0]}") from None
        updated = ApiKey.objects.filter(tenant=tenant, name=name).update(**fields)
        if not updated:
            _log.warning(
                "%s: tenant %r has no API key named %r yet; its limits apply once config is synced again",
                at,
                tenant.name,
                name,
            )


_WEBHOOK_FIELDS: dict[str, Any] = {
    "url": lambda v: {"url": str(v)},
    "secret": lambda v: {"secret_encrypted": encrypt_secret(str(v)) if v else ""},
    "enabled": lambda v: {"enabled": bool(v)},
}


def _sync_alert_webhooks(entries: list[Any], source: str) -> int:
    """`alert_webhooks: [{name, url, secret, enabled}]`: where budget alerts are POSTed (the
    secret, which signs them, is stored encrypted). The file's rule, as for every section."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"alert_webhooks[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", *_WEBHOOK_FIELDS}:
            raise ConfigError(f"{where}: expected a mapping of name, url, secret and enabled")
        name = _require(entry, "name", where)
        _require(entry, "url", where)
        webhook = AlertWebhook.objects.filter(name=name).first() or AlertWebhook(name=name)
        _set(webhook, entry, _WEBHOOK_FIELDS, where, source)
        _save_valid(webhook, where)
        seen.add(name)
    _unmanage_others(AlertWebhook, "name", seen, "alert_webhooks", source)
    return len(entries)


def _prompt_tenant(value: Any) -> dict[str, Any]:
    if value in (None, ""):
        return {"tenant": None}  # shared: every tenant's keys may use it
    tenant = Tenant.objects.filter(name=str(value)).first()
    if tenant is None:
        raise ValueError(f"unknown tenant {value!r}")
    return {"tenant": tenant}


_PROMPT_FIELDS: dict[str, Any] = {
    "name": lambda v: {"name": str(v)},
    "tenant": _prompt_tenant,
    "description": lambda v: {"description": v or ""},
    "default_version": lambda v: {"default_version": int(v) if v is not None else None},
    "versions": lambda v: {},  # written below, version by version
}
_PROMPT_VERSION_KEYS = ("instructions", "input", "model", "tools", "text_format", "reasoning")


def _sync_prompts(entries: list[Any], source: str) -> int:
    """`prompts: [{id, name, tenant, description, default_version, versions: [...]}]`: reusable
    prompts (no tenant: every tenant's). `versions` lists the prompt's versions in order,
    version 1 first; a saved version is immutable, so a listed version that differs from the
    stored one is refused (append a new version instead), and a stored version the file no
    longer lists stays (responses name it). The file's rule, as for every section."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"prompts[{i}]"
        _known_keys(entry, {"id", *_PROMPT_FIELDS}, where)
        prompt_id = str(_require(entry, "id", where))
        versions = entry.get("versions") or []
        if not isinstance(versions, list):
            raise ConfigError(f"{where}.versions: expected a list")
        prompt = Prompt.objects.filter(id=prompt_id).first() or Prompt(
            id=prompt_id, name=entry.get("name") or prompt_id
        )
        _set(prompt, entry, _PROMPT_FIELDS, where, source)
        with transaction.atomic():
            _save_valid(prompt, where)
            stored = {v.version: v for v in PromptVersion.objects.filter(prompt=prompt)}
            for j, fields in enumerate(versions, start=1):
                at = f"{where}.versions[{j - 1}]"
                _known_keys(fields, _PROMPT_VERSION_KEYS, at)
                wanted = PromptVersion(
                    prompt=prompt,
                    version=j,
                    instructions=fields.get("instructions") or "",
                    input=fields.get("input") or [],
                    model=fields.get("model") or "",
                    tools=fields.get("tools"),
                    text_format=fields.get("text_format"),
                    reasoning=fields.get("reasoning"),
                )
                old = stored.get(j)
                if old is None:
                    _save_valid(wanted, at)
                elif any(getattr(old, k) != getattr(wanted, k) for k in _PROMPT_VERSION_KEYS):
                    raise ConfigError(
                        f"{at}: version {j} of {prompt_id!r} is saved and immutable; "
                        "append the change as a new version (and set default_version)"
                    )
        seen.add(prompt_id)
    _unmanage_others(Prompt, "id", seen, "prompts", source)
    return len(entries)


def _guardrail_key(value: Any) -> dict[str, Any]:
    if value in (None, ""):
        return {"api_key": None}
    key = ApiKey.objects.filter(prefix=str(value)).first()
    if key is None:  # an error, not a skip: a guardrail silently not applied is a gap in policy
        raise ValueError(f"no API key with the prefix {value!r}")
    return {"api_key": key}


def _guardrail_route(value: Any) -> dict[str, Any]:
    if value in (None, ""):
        return {"route": None}
    route = ModelRoute.objects.filter(name=str(value)).first()
    if route is None:
        raise ValueError(f"unknown model route {value!r}")
    return {"route": route}


def _guardrail_config(value: Any) -> dict[str, Any]:
    if value is not None and not isinstance(value, dict):
        raise ValueError("expected a mapping")
    return {"config": value or {}}


_GUARDRAIL_FIELDS: dict[str, Any] = {
    "description": lambda v: {"description": v or ""},
    "kind": lambda v: {"kind": str(v)},
    "applies_to": lambda v: {"applies_to": str(v)},
    "action": lambda v: {"action": str(v)},
    "config": _guardrail_config,
    "tenant": _prompt_tenant,
    "key": _guardrail_key,
    "route": _guardrail_route,
    "enabled": lambda v: {"enabled": bool(v)},
}


def _sync_guardrails(entries: list[Any], source: str) -> int:
    """`guardrails: [{name, kind, applies_to, action, config, tenant, key, route, enabled,
    description}]`: checks on what clients send (the model's docstring says how scopes
    combine; `key` is a key's prefix). The file's rule, as for every section."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"guardrails[{i}]"
        _known_keys(entry, {"name", *_GUARDRAIL_FIELDS}, where)
        name = str(_require(entry, "name", where))
        _require(entry, "kind", where)
        guardrail = Guardrail.objects.filter(name=name).first() or Guardrail(name=name)
        _set(guardrail, entry, _GUARDRAIL_FIELDS, where, source)
        _save_valid(guardrail, where)
        seen.add(name)
    _unmanage_others(Guardrail, "name", seen, "guardrails", source)
    return len(entries)


def _price(price: Any, where: str) -> dict[str, Any]:
    """A route's price table: {input_usd_per_million, output_usd_per_million, and the cache
    prices cached_input_, cache_write_ and cache_write_1h_usd_per_million}; one left out is
    empty (the cache prices then follow the input price)."""
    if price is None:
        return dict.fromkeys(PRICE_FIELDS)
    if not isinstance(price, dict) or set(price) - set(PRICE_FIELDS):
        raise ConfigError(f"{where}: expected a mapping of " + ", ".join(PRICE_FIELDS))
    try:
        return {k: Decimal(str(price[k])) if price.get(k) is not None else None for k in PRICE_FIELDS}
    except InvalidOperation:
        raise ConfigError(f"{where}: prices must be numbers") from None


def _save_valid(obj: Any, where: str) -> None:
    """Model validation first: a bad entry is a ConfigError naming its place, nothing saved."""
    try:
        obj.full_clean()
    except ValidationError as exc:
        raise ConfigError(f"{where}: {exc.message_dict}") from exc
    obj.save()


def _tool_executor(executor: Any) -> dict[str, Any]:
    if not isinstance(executor, dict) or not executor.get("type"):
        raise ValueError("expected a mapping with a 'type'")
    fields = {
        "executor": executor["type"],
        "url": executor.get("url", ""),
        "headers_env": executor.get("headers_env") or {},
        "signing_secret_env": executor.get("signing_secret_env", ""),
        "python_callable": executor.get("callable", ""),
    }
    if "timeout" in executor:
        fields["timeout"] = float(executor["timeout"])
    return fields


_TOOL_FIELDS: dict[str, Any] = {
    "description": lambda v: {"description": v or ""},
    "parameters": lambda v: {"parameters": v or {"type": "object", "properties": {}}},
    "strict": lambda v: {"strict": bool(v)},
    "enabled": lambda v: {"enabled": bool(v)},
    "timeout": lambda v: {"timeout": float(v)},
    "executor": _tool_executor,  # after `timeout`: the executor's own timeout wins
    "run_on_worker": lambda v: {"run_on_worker": bool(v)},
    "defer_loading": lambda v: {"defer_loading": bool(v)},
}


def _sync_tools(entries: list[dict[str, Any]], source: str) -> int:
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"tools[{i}]"
        _known_keys(entry, {"name", "routes", *_TOOL_FIELDS}, where)
        _require(entry, "executor", where)
        tool = Tool.objects.filter(name=_require(entry, "name", where)).first() or Tool(
            name=entry["name"], parameters={"type": "object", "properties": {}}
        )
        _set(tool, entry, _TOOL_FIELDS, where, source)
        if "routes" in entry:
            tool.config_managed.append("routes")
        _save_valid(tool, where)
        if "routes" in entry:
            tool.routes.set(ModelRoute.objects.filter(name__in=entry["routes"]))
        seen.add(tool.name)
    _unmanage_others(Tool, "name", seen, "tools", source)
    return len(entries)


def _sync_mcp_servers(entries: list[dict[str, Any]], source: str) -> int:
    """`mcp_servers:` entries: label, url, headers_env, allowed_tools, require_approval
    (always | never | a list of the tools that need it), timeout, cache_seconds, defer_loading, routes,
    tenants."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"mcp_servers[{i}]"
        _known_keys(entry, {"label", "routes", "tenants", *_MCP_FIELDS}, where)
        label = _require(entry, "label", where)
        _require(entry, "url", where)
        server = McpServer.objects.filter(label=label).first() or McpServer(label=label)
        _set(server, entry, _MCP_FIELDS, where, source)
        server.config_managed += [key for key in ("routes", "tenants") if key in entry]
        _save_valid(server, where)
        if "routes" in entry:
            server.routes.set(ModelRoute.objects.filter(name__in=entry["routes"]))
        if "tenants" in entry:
            server.tenants.set(Tenant.objects.filter(name__in=entry["tenants"]))
        seen.add(label)
    _unmanage_others(McpServer, "label", seen, "mcp_servers", source)
    return len(entries)


def _mcp_approval(approval: Any) -> dict[str, Any]:
    if isinstance(approval, list):
        return {"approval": McpServer.Approval.PER_TOOL, "approval_tools": approval}
    if approval in ("always", "never"):
        return {"approval": approval, "approval_tools": []}
    raise ValueError("'always', 'never' or a list of tool names")


_MCP_FIELDS: dict[str, Any] = {
    "url": lambda v: {"url": v},
    "description": lambda v: {"description": v or ""},
    "headers_env": lambda v: {"headers_env": v or {}},
    "allowed_tools": lambda v: {"allowed_tools": v or []},
    "require_approval": _mcp_approval,
    "timeout": lambda v: {"timeout": float(v)},
    "cache_seconds": lambda v: {"cache_seconds": int(v)},
    "enabled": lambda v: {"enabled": bool(v)},
    "defer_loading": lambda v: {"defer_loading": bool(v)},
}


def sync_config_file(path: str | Path) -> dict[str, int]:
    return sync_config(load_config_file(path), source=source_of(path))
