"""OpenTelemetry traces: exported over real OTLP/HTTP to a loopback receiver, decoded from
protobuf, following the GenAI semantic conventions. Off (nothing imported) by default."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.harness import MODEL, Gateway, call
from tests.support.upstream import Reply, ScriptedUpstream

pytest.importorskip("opentelemetry.sdk")  # the `otel` extra, which scripts/test installs

pytestmark = pytest.mark.embedded


class OtlpReceiver:
    """A minimal OTLP/HTTP trace receiver: POST /v1/traces, protobuf ExportTraceServiceRequest."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans: list[Any] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope in resource_spans.scope_spans:
                        for span in scope.spans:
                            receiver.spans.append((service, span))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1/traces"

    def stop(self) -> None:
        self.server.shutdown()


def attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        out[attribute.key] = (
            [v.string_value for v in value.array_value.values] if kind == "array_value" else getattr(value, kind)
        )
    return out


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    from responses_api.engine import tracing

    otlp = OtlpReceiver()
    assert tracing.configure(otlp.endpoint)
    try:
        yield otlp
    finally:
        tracing.shutdown()
        otlp.stop()


def test_a_tool_loop_is_one_trace_with_genai_spans(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    tools_env,
    receiver: OtlpReceiver,
) -> None:
    from responses_api.engine import tracing

    scripted.enqueue(
        MODEL,
        Reply(
            tool_calls=[call("get_weather", {"city": "Oslo"}, "call_1")],
            usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        ),
        Reply(text="Sunny in Oslo.", usage={"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}),
    )
    response = gateway.openai().responses.create(
        model=MODEL,
        input="Weather in Oslo?",
        tools=[{"type": "function", "name": "get_weather"}],
        max_output_tokens=200,
        temperature=0.5,
    )
    assert response.output_text == "Sunny in Oslo."
    tracing.flush()
    spans = {span.name: (service, span) for service, span in receiver.spans}
    assert set(spans) == {f"invoke_agent {MODEL}", f"chat {MODEL}", "execute_tool get_weather"}, list(spans)
    service, root = spans[f"invoke_agent {MODEL}"]
    assert service["service.name"] == "open-responses-gateway"
    assert attributes(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "open-responses-gateway",
        "gen_ai.agent.name": MODEL,
        "gen_ai.request.model": MODEL,
        "gen_ai.response.id": response.id,
        "gen_ai.request.max_tokens": 200,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.usage.input_tokens": 31,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ["completed"],
    }
    model_calls = [span for _, span in receiver.spans if span.name == f"chat {MODEL}"]
    assert len(model_calls) == 2
    first, second = sorted(model_calls, key=lambda s: s.start_time_unix_nano)
    assert first.kind == 3  # SPAN_KIND_CLIENT
    assert attributes(first)["gen_ai.operation.name"] == "chat"
    assert attributes(first)["gen_ai.provider.name"] == "scripted"
    assert attributes(first)["server.address"] == "127.0.0.1"
    assert (attributes(first)["gen_ai.usage.input_tokens"], attributes(first)["gen_ai.usage.output_tokens"]) == (11, 3)
    assert attributes(first)["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (attributes(second)["gen_ai.usage.input_tokens"], attributes(second)["gen_ai.usage.output_tokens"]) == (
        20,
        4,
    )
    _, tool = spans["execute_tool get_weather"]
    assert attributes(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
    }
    for span in (first, second, tool):  # one trace, each a child of the response's span
        assert span.trace_id == root.trace_id and span.parent_span_id == root.span_id
    assert (
        first.end_time_unix_nano <= tool.start_time_unix_nano <= tool.end_time_unix_nano <= second.start_time_unix_nano
    )


def test_a_failed_upstream_call_is_an_error_span(
    gateway: Gateway, scripted: ScriptedUpstream, receiver: OtlpReceiver
) -> None:
    from responses_api.engine import tracing

    scripted.enqueue(MODEL, Reply(status=500, error_body={"error": {"message": "boom"}}))
    reply = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "x"})
    assert reply.status_code == 502
    tracing.flush()
    by_name = {span.name: span for _, span in receiver.spans}
    call_span, root = by_name[f"chat {MODEL}"], by_name[f"invoke_agent {MODEL}"]
    assert call_span.status.code == 2 and attributes(call_span)["error.type"] == "upstream_error"  # STATUS_CODE_ERROR
    assert root.status.code == 2 and attributes(root)["gen_ai.response.finish_reasons"] == ["failed"]


def test_without_an_exporter_no_sdk_is_loaded() -> None:
    """(The `mcp` package imports the OpenTelemetry API for itself; the SDK, its exporter and
    span processing are this module's, and stay out.)"""
    import subprocess

    code = (
        "import os, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'project.settings'; "
        "os.environ['DEBUG'] = '1'; django.setup(); import responses_api.api.views, responses_api.engine.run, sys; "
        "from responses_api.engine import tracing; assert not tracing.enabled(); "
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout
