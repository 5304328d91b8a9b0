"""One shared httpx.AsyncClient per event loop (per process under uvicorn)."""
from __future__ import annotations

import asyncio
import weakref

import httpx
from django.conf import settings

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]" = (
    weakref.WeakKeyDictionary()
)


def get_client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        limit = settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS
        client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=min(limit, 200)),
            timeout=httpx.Timeout(
                settings.GATEWAY_UPSTREAM_TIMEOUT, connect=settings.GATEWAY_UPSTREAM_CONNECT_TIMEOUT
            ),
            follow_redirects=False,
        )
        _clients[loop] = client
    return client

