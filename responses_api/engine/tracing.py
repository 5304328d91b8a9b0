"""OpenTelemetry traces following the GenAI semantic conventions, when an exporter is configured.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and
the `otel` extra is installed: then no OpenTelemetry module is imported, and each hook below
costs one test of `_tracer`. On, a response is one `invoke_agent {model}` span with a child
per model call (`chat {upstream model}`, kind CLIENT) and per server-side tool call
(`execute_tool {name}`), exported over OTLP/HTTP in batches. Attributes are the conventions'
`gen_ai.*` names; message contents are never recorded (they are the tenants' data).
"""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("gateway.tracing")

_tracer: Any = None
_provider: Any = None


def configure(endpoint: str | None = None) -> bool:
    """Set up the exporter (at startup, from the environment; tests pass `endpoint`)."""
    global _tracer, _provider
    endpoint = (
        endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or (
            os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/") + "/v1/traces"
            if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            else None
        )
    )
    if not endpoint or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed "
            "(pip install '.[otel]'); traces are off"
        )
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "open-responses-gateway")})
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _tracer = _provider.get_tracer("open-responses-gateway")
    log.info("OpenTelemetry traces exported to %s", endpoint)
    return True


def flush(timeout_ms: int = 5000) -> None:
    if _provider is not None:
        _provider.force_flush(timeout_ms)


def shutdown() -> None:
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def enabled() -> bool:
    return _tracer is not None


def _kind(name: str) -> Any:
    from opentelemetry.trace import SpanKind

    return getattr(SpanKind, name)


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


def response_span(*, model: str, response_id: str, conversation: str | None, request: Any) -> Any:
    """The span of one response (its whole tool loop); None when tracing is off."""
    if _tracer is None:
        return None
    return _tracer.start_span(
        f"invoke_agent {model}",
        kind=_kind("INTERNAL"),
        attributes=_clean(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": "open-responses-gateway",
                "gen_ai.agent.name": model,
                "gen_ai.request.model": model,
                "gen_ai.response.id": response_id,
                "gen_ai.conversation.id": conversation,
                "gen_ai.request.max_tokens": getattr(request, "max_output_tokens", None),
                "gen_ai.request.temperature": getattr(request, "temperature", None),
                "gen_ai.request.top_p": getattr(request, "top_p", None),
            }
        ),
    )


def end_response(span: Any, response: dict[str, Any]) -> None:
    if span is None:
        return
    usage = response.get("usage") or {}
    span.set_attributes(
        _clean(
            {
                "gen_ai.usage.input_tokens": usage.get("input_tokens"),
                "gen_ai.usage.output_tokens": usage.get("output_tokens"),
                "gen_ai.response.finish_reasons": [response.get("status") or "unknown"],
            }
        )
    )
    error = response.get("error")
    if error:
        _fail(span, str(error.get("code") or "error"), str(error.get("message") or ""))
    span.end()


def model_call_span(parent: Any, target: Any, request: Any) -> Any:
    """One upstream model call (a step of the tool loop), as a CLIENT span."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    parts = urlsplit(target.provider.base_url)
    return _tracer.start_span(
        f"chat {target.upstream_model}",
        kind=_kind("CLIENT"),
        context=trace.set_span_in_context(parent) if parent is not None else None,
        attributes=_clean(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": target.provider.options.get("otel_provider_name") or target.provider.name,
                "gen_ai.request.model": target.upstream_model,
                "gen_ai.request.max_tokens": getattr(request, "max_output_tokens", None),
                "gen_ai.request.temperature": getattr(request, "temperature", None),
                "gen_ai.request.top_p": getattr(request, "top_p", None),
                "server.address": parts.hostname,
                "server.port": parts.port or (443 if parts.scheme == "https" else 80),
            }
        ),
    )


def end_model_call(
    span: Any,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    finish_reason: str | None = None,
    error: Any = None,
) -> None:
    if span is None:
        return
    span.set_attributes(
        _clean(
            {
                "gen_ai.usage.input_tokens": input_tokens,
                "gen_ai.usage.output_tokens": output_tokens,
                "gen_ai.response.finish_reasons": [finish_reason] if finish_reason else None,
            }
        )
    )
    if error is not None:
        _fail(span, getattr(error, "code", None) or type(error).__name__, getattr(error, "message", str(error)))
    span.end()


def tool_span(parent: Any, *, name: str, call_id: str | None, tool_type: str) -> Any:
    if _tracer is None:
        return None
    from opentelemetry import trace

    return _tracer.start_span(
        f"execute_tool {name}",
        kind=_kind("INTERNAL"),
        context=trace.set_span_in_context(parent) if parent is not None else None,
        attributes=_clean(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": tool_type,
            }
        ),
    )


def end_tool(span: Any, error: BaseException | None = None) -> None:
    if span is None:
        return
    if error is not None:
        _fail(span, type(error).__name__, str(error))
    span.end()


async def traced_tool(parent: Any, awaitable: Any, *, name: str, call_id: str | None, tool_type: str) -> Any:
    span = tool_span(parent, name=name, call_id=call_id, tool_type=tool_type)
    try:
        result = await awaitable
    except BaseException as exc:
        end_tool(span, exc)
        raise
    end_tool(span)
    return result


def _fail(span: Any, error_type: str, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message[:500]))
