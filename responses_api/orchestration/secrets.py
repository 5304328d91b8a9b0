"""What the gateway holds sealed or names by environment variable, checked and re-sealed.

`secrets_check()` runs once as a web process starts (a few rows: the providers, the registry's
tools and MCP servers, the alert webhooks, the newest waiting jobs' MCP credentials) and logs each secret the gateway
cannot have, with the remedy, so an encryption key dropped from GATEWAY_ENCRYPTION_KEY shows at
start-up rather than as 503s later. `secrets_reseal()` is `manage.py reseal_secrets`: what the
database holds sealed under an older listed key is sealed again under the first, after which the
older key may be dropped. Blobs clients hold (reasoning and compaction `encrypted_content`) cannot
be re-sealed: they open while their key stays listed (README.md, "Rotating secrets")."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import QuerySet

from tool_registry.models import McpServer, Tool

from ..mcp.credentials import PURPOSE as MCP_CREDENTIALS
from ..models import AlertWebhook, Provider, Response
from ..protocol.errors import ProviderMisconfigured
from ..sealing import SealBroken, decrypt_secret, first_secret_opens, reseal_secret, sealer
from .routing import provider_secret

log = logging.getLogger("gateway.secrets")

JOBS_CHECKED = 20  # at start-up: the newest waiting jobs with sealed MCP credentials


def _waiting_jobs() -> QuerySet[Response]:
    return (
        Response.objects.filter(status__in=Response.RUNNING, job__has_key="mcp_credentials")
        .only("id", "tenant_id", "job")
        .order_by("-created_at")
    )


def secrets_check(*, jobs: int = JOBS_CHECKED) -> list[str]:
    """One line per secret the gateway cannot have (logged at ERROR too)."""
    problems: list[str] = []
    for provider in Provider.objects.filter(enabled=True).order_by("name"):
        try:
            provider_secret(provider)
        except ProviderMisconfigured as exc:
            problems.append(exc.message)
    unset = "which is not set or empty: its calls go without it."
    for tool in Tool.objects.filter(enabled=True).order_by("name"):
        for name in [*(tool.headers_env or {}).values(), tool.signing_secret_env]:
            if name and not os.environ.get(name):
                problems.append(f"Tool '{tool.name}' reads a credential from ${name}, {unset}")
    for server in McpServer.objects.filter(enabled=True).order_by("label"):
        for name in (server.headers_env or {}).values():
            if name and not os.environ.get(name):
                problems.append(f"MCP server '{server.label}' reads a credential from ${name}, {unset}")
    for webhook in AlertWebhook.objects.filter(enabled=True).exclude(secret_encrypted="").order_by("name"):
        try:
            decrypt_secret(webhook.secret_encrypted)
        except SealBroken:
            problems.append(
                f"Alert webhook '{webhook.name}' has its signing secret sealed under a key that is no longer "
                "listed: its alerts cannot be sent. List it again (GATEWAY_ENCRYPTION_KEY) and run "
                "`manage.py reseal_secrets`, or set a new secret."
            )
    for row in _waiting_jobs()[:jobs]:
        try:
            sealer().unseal((row.job or {})["mcp_credentials"], tenant_id=row.tenant_id, purpose=MCP_CREDENTIALS)
        except SealBroken:
            problems.append(
                f"Response {row.id} waits for a worker with MCP credentials sealed under a key that is no "
                "longer listed: list it again (GATEWAY_ENCRYPTION_KEY) and run `manage.py reseal_secrets`."
            )
    for line in problems:
        log.error("secrets: %s", line)
    return problems


@dataclass
class ResealReport:
    resealed: list[str] = field(default_factory=list)  # what was (or, in a dry run, would be) sealed again
    unopenable: list[str] = field(default_factory=list)  # no listed key opens it: left as it is
    current: int = 0  # already under the first key


def secrets_reseal(*, dry_run: bool = False) -> ResealReport:
    """Providers' stored API keys, alert webhooks' signing secrets and waiting jobs' sealed MCP
    credentials under the first listed key (registry tools and MCP servers name environment variables: nothing sealed)."""
    report = ResealReport()
    with transaction.atomic():
        for provider in Provider.objects.select_for_update().exclude(api_key_encrypted="").order_by("name"):
            what = f"provider '{provider.name}' API key"
            if first_secret_opens(provider.api_key_encrypted):
                report.current += 1
                continue
            try:
                fresh = reseal_secret(provider.api_key_encrypted)
            except SealBroken:
                report.unopenable.append(what)
                continue
            report.resealed.append(what)
            if not dry_run:
                Provider.objects.filter(pk=provider.pk).update(api_key_encrypted=fresh)
        for webhook in AlertWebhook.objects.select_for_update().exclude(secret_encrypted="").order_by("name"):
            what = f"alert webhook '{webhook.name}' secret"
            if first_secret_opens(webhook.secret_encrypted):
                report.current += 1
                continue
            try:
                fresh = reseal_secret(webhook.secret_encrypted)
            except SealBroken:
                report.unopenable.append(what)
                continue
            report.resealed.append(what)
            if not dry_run:
                AlertWebhook.objects.filter(pk=webhook.pk).update(secret_encrypted=fresh)
        for row in _waiting_jobs().select_for_update():
            what = f"response {row.id} MCP credentials"
            job = dict(row.job or {})
            try:
                resealed = sealer().reseal(job["mcp_credentials"], tenant_id=row.tenant_id, purpose=MCP_CREDENTIALS)
            except SealBroken:
                report.unopenable.append(what)
                continue
            if resealed is None:
                report.current += 1
                continue
            report.resealed.append(what)
            if not dry_run:  # the row is locked (select_for_update): no worker changes its job meanwhile
                job["mcp_credentials"] = resealed
                Response.objects.filter(pk=row.pk).update(job=job)
    return report
