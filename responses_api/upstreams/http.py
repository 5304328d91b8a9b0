"""One shared aiohttp session per event loop (per process under uvicorn) for upstream model calls.

aiohttp rather than httpx on this path: a model call through httpx cost several times
the CPU (bench/README.md, "Figures the code's comments used to quote"), and a stream paid
httpx/anyio's cancel scope on every read.
Certificates are verified as httpx does (certifi, or SSL_CERT_FILE/SSL_CERT_DIR);
HTTP(S)_PROXY/NO_PROXY are honoured.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import urllib.request
import weakref
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp
import httpx
from django.conf import settings

from ..domain import ProviderConfig

_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = weakref.WeakKeyDictionary()
_ssl_context: ssl.SSLContext | None = None


def get_session() -> aiohttp.ClientSession:
    global _ssl_context
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context(trust_env=True)
        connector = aiohttp.TCPConnector(
            limit=settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS,
            limit_per_host=0,
            ssl=_ssl_context,
            # Under the 5 s of uvicorn-based servers (vLLM, ...), so that an idle connection
            # is dropped here before the server closes it under a request.
            keepalive_timeout=4.0,
        )
        session = aiohttp.ClientSession(
            connector=connector,
            # Every tenant's calls share this session: a cookie one answer set (a load
            # balancer's, a proxying server's session) must not go out with anyone's next call.
            cookie_jar=aiohttp.DummyCookieJar(),
            # trust_env would re-read the environment (and ~/.netrc) on every request: proxy_for().
            trust_env=False,
            auto_decompress=True,
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_read=settings.GATEWAY_UPSTREAM_TIMEOUT,
                sock_connect=settings.GATEWAY_UPSTREAM_CONNECT_TIMEOUT,
            ),
        )
        _sessions[loop] = session
    return session


async def close_session() -> None:
    """Close this loop's session (at shutdown), so no connection is left to the garbage collector."""
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


@functools.lru_cache(maxsize=256)
def proxy_for(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to `url` (None under NO_PROXY), read once per origin."""
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def provider_headers(
    provider: ProviderConfig,
    *,
    key_header: str = "authorization",
    key_format: str = "Bearer {}",
    own: Mapping[str, str] | None = None,
    json_body: bool = True,
) -> dict[str, str]:
    """The headers of a request to a provider, for every dialect and call: the content type (of a
    JSON body), the dialect's `own` headers, the provider's configured headers (which may
    override those), and its key last (in `key_header`, as `key_format` writes it), so a
    configured header never replaces the key."""
    headers = {"content-type": "application/json"} if json_body else {}
    headers.update({**(own or {}), **provider.headers})
    if provider.api_key:
        headers[key_header] = key_format.format(provider.api_key)
    return headers
