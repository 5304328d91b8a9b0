"""MCP credentials of a job a worker runs: the `headers`/`authorization` a request gave its MCP
tools leave the stored body and are kept sealed for the tenant (never in the database in plain
text), then put back when the worker parses the job."""

from __future__ import annotations

from typing import Any

from ..protocol.mcp_tools import restore_mcp_credentials, split_mcp_credentials
from ..sealing import sealer

PURPOSE = "mcp-credentials"


def seal_credentials(body: dict[str, Any], tenant_id: int) -> tuple[dict[str, Any], str | None]:
    """The body without its MCP credentials, and those sealed (None: it had none)."""
    stripped, credentials = split_mcp_credentials(body)
    if not credentials:
        return stripped, None
    return stripped, sealer().seal(credentials, tenant_id=tenant_id, purpose=PURPOSE)


def restore_credentials(body: dict[str, Any], sealed: str | None, tenant_id: int) -> dict[str, Any]:
    """`seal_credentials` undone."""
    if not sealed:
        return body
    return restore_mcp_credentials(body, sealer().unseal(sealed, tenant_id=tenant_id, purpose=PURPOSE))
