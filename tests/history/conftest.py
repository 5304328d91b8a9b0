"""The history API over real HTTP: the live ASGI gateway and keys for two tenants and an admin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.harness import make_key


@dataclass
class HistoryApi:
    url: str
    key: str
    tenant_id: int
    other_key: str
    other_tenant_id: int
    admin_key: str

    def get(self, path: str, params: Any = None, key: str | None = None) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=30.0) as http:
            return http.get(path, params=params, headers={"Authorization": f"Bearer {key or self.key}"})

    def ok(self, path: str, params: Any = None, key: str | None = None) -> dict[str, Any]:
        reply = self.get(path, params, key)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def error(self, path: str, params: Any = None, key: str | None = None, status: int = 400) -> dict[str, Any]:
        reply = self.get(path, params, key)
        assert reply.status_code == status, reply.text
        return reply.json()["error"]

    def ids(self, params: Any = None, key: str | None = None) -> list[str]:
        return [r["id"] for r in self.ok("/v1/responses", params, key)["data"]]


@pytest.fixture
def api(transactional_db, gateway_server) -> HistoryApi:
    key, tenant_id = make_key(tenant="acme", name="acme-key")
    other_key, other_tenant_id = make_key(tenant="globex", name="globex-key")
    admin_key, _ = make_key(tenant="ops", name="ops-admin", is_admin=True)
    return HistoryApi(gateway_server.url, key, tenant_id, other_key, other_tenant_id, admin_key)
