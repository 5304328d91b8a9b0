"""Tool executors: run one call of a registry tool. No ORM here; specs are plain data.

Every failure (timeout, HTTP error, refused egress, exception, garbage) becomes
an error output for the model, never an exception for the engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib
import inspect
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from responses_api.protocol import jsonlimits

from .egress import EgressDenied, EgressPolicy, send_checked

SIGNATURE_HEADER = "X-Gateway-Signature"
TIMESTAMP_HEADER = "X-Gateway-Timestamp"
MAX_OUTPUT_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool
    executor: str  # http | python
    timeout: float
    url: str = ""
    headers_env: dict[str, str] = field(default_factory=dict)
    signing_secret_env: str = ""
    python_callable: str = ""
    run_on_worker: bool = False
    defer_loading: bool = False  # offered only once the model finds it with tool search


@dataclass(frozen=True, slots=True)
class ToolResult:
    output: str
    ok: bool


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over `timestamp.body`; receivers recompute it to verify (and reject old timestamps)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _error(message: str) -> ToolResult:
    return ToolResult(json.dumps({"error": message}), ok=False)


def _as_output(value: Any) -> str:
    text = jsonlimits.storable_text(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "…[truncated]"


async def _run_http(spec: ToolSpec, arguments: dict[str, Any], policy: EgressPolicy) -> ToolResult:
    body = json.dumps(arguments, separators=(",", ":")).encode()
    headers = {"content-type": "application/json", "user-agent": "open-responses-gateway"}
    for name, env_name in spec.headers_env.items():
        value = os.environ.get(env_name)
        if value is not None:
            headers[name] = value
    if spec.signing_secret_env:
        secret = os.environ.get(spec.signing_secret_env)
        if not secret:
            return _error(f"tool '{spec.name}' is misconfigured: ${spec.signing_secret_env} is not set")
        timestamp = str(int(time.time()))
        headers[TIMESTAMP_HEADER] = timestamp
        headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
    try:
        response = await send_checked(
            "POST", spec.url, policy=policy, content=body, headers=headers, timeout=spec.timeout
        )
    except EgressDenied as exc:
        return _error(f"egress refused: {exc}")
    except Exception as exc:  # noqa: BLE001 - any transport failure is the model's to hear about
        return _error(f"tool '{spec.name}' could not be reached: {type(exc).__name__}")
    if response.status_code >= 400:
        return _error(
            f"tool '{spec.name}' answered HTTP {response.status_code}: {jsonlimits.storable_text(response.text[:500])}"
        )
    content_type = response.headers.get("content-type", "")
    if "json" in content_type:
        try:
            return ToolResult(_as_output(jsonlimits.loads(response.content, max_depth=None)), ok=True)
        except ValueError:
            return _error(f"tool '{spec.name}' answered invalid JSON")
    return ToolResult(_as_output(response.text), ok=True)


def _load_callable(spec: ToolSpec, allowed_modules: frozenset[str]) -> Any:
    module_name, _, function_name = spec.python_callable.partition(":")
    if module_name not in allowed_modules:
        raise PermissionError(f"module '{module_name}' is not allowlisted")
    function = getattr(importlib.import_module(module_name), function_name)
    if not callable(function):
        raise TypeError(f"{spec.python_callable} is not callable")
    return function


async def _run_python(spec: ToolSpec, arguments: dict[str, Any], allowed_modules: frozenset[str]) -> ToolResult:
    try:
        function = _load_callable(spec, allowed_modules)
    except (ImportError, AttributeError, PermissionError, TypeError) as exc:
        return _error(f"tool '{spec.name}' is misconfigured: {exc}")
    try:
        if inspect.iscoroutinefunction(function):
            value = await function(**arguments)
        else:
            value = await asyncio.to_thread(function, **arguments)
    except TypeError as exc:
        return _error(f"bad arguments for '{spec.name}': {exc}")
    except Exception as exc:  # noqa: BLE001 - the tool's own failure, reported to the model
        return _error(f"tool '{spec.name}' failed: {type(exc).__name__}: {exc}")
    return ToolResult(_as_output(value), ok=True)


async def execute(
    spec: ToolSpec, arguments: str, *, policy: EgressPolicy, allowed_modules: frozenset[str]
) -> ToolResult:
    try:
        parsed = jsonlimits.loads(arguments or "{}")
    except ValueError:
        return _error(f"the arguments for '{spec.name}' are not valid JSON")
    if not isinstance(parsed, dict):
        return _error(f"the arguments for '{spec.name}' must be a JSON object")
    try:
        if spec.executor == "http":
            return await asyncio.wait_for(_run_http(spec, parsed, policy), spec.timeout)
        if spec.executor == "python":
            return await asyncio.wait_for(_run_python(spec, parsed, allowed_modules), spec.timeout)
    except TimeoutError:
        return _error(f"tool '{spec.name}' timed out after {spec.timeout:g} s")
    return _error(f"tool '{spec.name}' has an unknown executor '{spec.executor}'")
