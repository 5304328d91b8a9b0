"""The calls of the remote guardrail kinds (protocol/guardrail_remote.py says what they ask and
how an answer is read): `moderation` POSTs to the operator's `/v1/moderations` server on the
gateway's upstream session (upstreams/http.py); `judge` runs a model route of the gateway.

Both run under the guardrail's timeout; a failure (an error, a timeout, an answer that is not a
clear verdict) passes under `fail_open` and is the finding `unavailable` otherwise, and is
logged with the guardrail's name and the reason, never the text checked nor a key.

The moderation URL is the operator's, trusted as a provider's `base_url` is (it is usually an
internal service): the egress policy, which guards the URLs tools and clients bring, does not
apply to it. Its key is read from the environment variable the config names, per call, as a
provider's `api_key_env` is.

The judge's run bypasses every guardrail (it is started here, not through a front door: no
recursion, and its question is the operator's) and its route's key access (the operator chose
the route); its tokens are counted to the tenant and key whose text it judged, as a usage
record of the endpoint `guardrail.judge` (/v1/usage, budgets and the admin count them)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tool_registry.runner import NoTools

from ..domain import Route
from ..engine.interfaces import ResponseJob
from ..engine.run import ResponseRun
from ..observability.metrics import guardrail_failure
from ..protocol import jsonlimits
from ..protocol.guardrail_remote import (
    Caller,
    RemoteCheckFailed,
    failed,
    judge_categories,
    judge_input,
    judge_instructions,
    moderation_body,
    moderation_categories,
)
from ..protocol.guardrails import RemoteDetector, Span
from ..protocol.ids import new_id
from ..protocol.request import parse_create_request
from ..protocol.response import request_params
from ..store import db
from ..store.usage import Endpoint, usage_writer
from ..upstreams.http import get_session, proxy_for
from .routing import route_cached, route_get

log = logging.getLogger("gateway.guardrails")


def bind(detector: RemoteDetector) -> RemoteDetector:
    """The detector with its kind's call bound (the caller is bound per scope: `for_caller`)."""
    return dataclasses.replace(detector, check=_checked)


def for_caller(detector: RemoteDetector, tenant_id: int, key_id: int | None) -> RemoteDetector:
    return dataclasses.replace(detector, caller=Caller(tenant_id, key_id))


async def _checked(detector: RemoteDetector, text: str) -> list[Span]:
    """The verdict as spans, each over the whole text (the verdict is on all of it)."""
    return [Span(0, len(text), category) for category in await _categories(detector, text)]


async def _categories(detector: RemoteDetector, text: str) -> list[str]:
    settings = detector.settings
    assert settings is not None  # compile_detector sets it
    if not text.strip():
        return []
    ask = _ASK[settings.kind]
    try:
        async with asyncio.timeout(settings.timeout):
            return await ask(detector, text)
    except TimeoutError:
        reason = f"no verdict within {settings.timeout:g} s"
    except RemoteCheckFailed as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure of the call is the guardrail's fail_open choice
        reason = type(exc).__name__  # not str(exc): an error may echo what was sent
    outcome = "passed (fail_open)" if settings.fail_open else "unavailable (fail closed)"
    log.warning("guardrail %r (%s) could not check: %s; %s", detector.name, settings.kind, reason, outcome)
    guardrail_failure(detector.name, settings.kind, "open" if settings.fail_open else "closed")
    return failed(settings)


async def _moderate(detector: RemoteDetector, text: str) -> list[str]:
    settings = detector.settings
    assert settings is not None
    headers = {"content-type": "application/json"}
    if settings.api_key_env:
        key = os.environ.get(settings.api_key_env)
        if not key:
            raise RemoteCheckFailed(f"${settings.api_key_env} is not set in the gateway's environment")
        headers["authorization"] = f"Bearer {key}"
    body = json.dumps(moderation_body(settings, text)).encode()
    async with get_session().post(
        settings.url, data=body, headers=headers, proxy=proxy_for(settings.url), allow_redirects=False
    ) as response:
        if response.status != 200:
            raise RemoteCheckFailed(f"the moderation server answered HTTP {response.status}")
        try:
            answer = jsonlimits.loads(await response.read(), max_depth=None)
        except ValueError:
            raise RemoteCheckFailed("the moderation server's answer is not JSON") from None
    return moderation_categories(settings, answer)


async def _judge(detector: RemoteDetector, text: str) -> list[str]:
    settings = detector.settings
    assert settings is not None
    caller = detector.caller
    if caller is None:
        raise RemoteCheckFailed("no tenant to count the judge's tokens to")
    req = parse_create_request(
        {
            "model": settings.route,
            "instructions": judge_instructions(settings),
            "input": judge_input(text),
            "store": False,
            "stream": False,
        }
    )
    route = await _route(settings.route)
    job = ResponseJob(
        response_id=new_id("resp"),
        created_at=int(time.time()),
        tenant_id=caller.tenant_id,
        request=req,
        params=request_params(req),
        route=route,
        context=list(req.input_items),
        input_items=req.input_items,
        input_spans=(range(len(req.input_items)),),
    )
    run = ResponseRun(job, _JudgeUsage(caller, settings.route), NoTools(), max_iterations=0)
    await run.connect()
    response = await run.run_to_end()
    if run.error is not None or response.get("status") != "completed":
        raise RemoteCheckFailed(f"the judge route '{settings.route}' did not answer ({response.get('status')})")
    answer = "".join(
        part.get("text", "")
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    )
    return judge_categories(settings, answer)


# Each remote kind's call, by kind (protocol/guardrails.py REMOTE_KINDS).
_ASK: dict[str, Callable[[RemoteDetector, str], Awaitable[list[str]]]] = {"moderation": _moderate, "judge": _judge}


async def _route(name: str) -> Route:
    cached = route_cached(name)
    if cached is not None:
        return cached
    try:
        return await db.run_shared(("route", name), route_get, name)
    except Exception as exc:  # noqa: BLE001 - an unknown or disabled route is a failed check
        raise RemoteCheckFailed(f"the judge route '{name}' is not available ({type(exc).__name__})") from None


class _JudgeUsage:
    """The judge run's Persistence: no response is kept, its tokens are a usage record of
    `guardrail.judge` for the tenant and key whose text it judged."""

    def __init__(self, caller: Caller, route: str) -> None:
        self.caller = caller
        self.route = route

    async def open(self) -> None:
        return None

    async def finish(
        self, response: dict[str, Any], *, upstream: str, latency_ms: int, cache_write_1h_tokens: int = 0
    ) -> None:
        usage = response.get("usage") or {}
        details = usage.get("input_tokens_details") or {}
        usage_writer.add(
            tenant_id=self.caller.tenant_id,
            api_key_id=self.caller.key_id,
            endpoint=Endpoint.GUARDRAIL_JUDGE,
            model=self.route,
            upstream=upstream,
            status=200 if response.get("status") == "completed" else 502,
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cached_tokens=details.get("cached_tokens"),
            cache_write_tokens=details.get("cache_write_tokens"),
            cache_write_1h_tokens=cache_write_1h_tokens if usage else None,
            latency_ms=latency_ms,
        )

    async def finish_failed(self, response: dict[str, Any], *, upstream: str, latency_ms: int) -> None:
        await self.finish(response, upstream=upstream, latency_ms=latency_ms)
