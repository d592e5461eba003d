"""Traces and metrics exported over OTLP/HTTP: a collector on loopback receives the request span
(child of the client's `traceparent`) and the turn's spans under it, and the metric families under
the names `/metrics` shows; with no endpoint, no SDK at all."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.e2e.harness import ROOT, ServerProcess, free_port, user_message
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(90)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
GRPC_TRACE_ID = "5cf92f3577b34da6a3ce929d0e0e4737"
GRPC_PORT = free_port()
CLIENT_SPAN_ID = "00f067aa0ba902b7"


class Collector:
    """A minimal OTLP/HTTP collector: POST /v1/traces and /v1/metrics, protobuf bodies."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.metrics: dict[str, float] = {}  # name -> latest sum (or count, for a histogram)
        self.services: set[str] = set()
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/metrics":
                    collector.take_metrics(body)
                    self.answer(ExportMetricsServiceResponse().SerializeToString())
                    return
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    for resource_spans in request.resource_spans:
                        for attribute in resource_spans.resource.attributes:
                            if attribute.key == "service.name":
                                collector.services.add(attribute.value.string_value)
                        for scope_spans in resource_spans.scope_spans:
                            collector.spans.extend(scope_spans.spans)
                self.answer(ExportTraceServiceResponse().SerializeToString())

            def answer(self, answer: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def take_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        points = metric.sum.data_points or metric.histogram.data_points
                        total = 0.0
                        for point in points:
                            if metric.HasField("histogram"):
                                total += point.count
                            else:
                                total += point.as_double or point.as_int
                        self.metrics[metric.name] = total

    def in_trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.trace_id.hex() == trace_id]


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    collector = Collector()
    collector.thread.start()
    try:
        yield collector
    finally:
        collector.httpd.shutdown()
        collector.httpd.server_close()


@pytest.fixture(scope="module")
def traced_server(fake_llm, collector: Collector) -> Iterator[ServerProcess]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "A2A_GRPC_PORT": str(GRPC_PORT),
    }
    server = ServerProcess(fake_llm.base_url, env=env).start()
    try:
        yield server
    finally:
        server.cleanup()


def is_request_span(span: Span) -> bool:
    """The server span of the client's request (its parent: the client's span)."""
    return (
        span.kind == Span.SpanKind.SPAN_KIND_SERVER and span.parent_span_id.hex() == CLIENT_SPAN_ID
    )


def wait_for(
    collector: Collector, names: set[str], timeout_s: float = 20, trace_id: str = TRACE_ID
) -> list[Span]:
    """The client's trace once it holds `names` and the request span (which ends after the
    response is sent, so it can come in a later export batch than the turn's spans)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        spans = collector.in_trace(trace_id)
        if names <= {span.name for span in spans} and any(map(is_request_span, spans)):
            return spans
        time.sleep(0.1)
    raise AssertionError(f"spans received: {[(s.name, s.trace_id.hex()) for s in collector.spans]}")


def send_message(text: str) -> dict[str, Any]:
    """A JSON-RPC SendMessage body (blocking: the answer comes with the task)."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": user_message(text)},
    }


def test_the_request_and_turn_spans_reach_the_collector_in_the_clients_trace(
    traced_server: ServerProcess, collector: Collector, fake_llm, marker: str
) -> None:
    fake_llm.script(text("traced answer", when_user_contains=marker))
    body = send_message(f"trace me {marker}")
    headers = {"A2A-Version": "1.0", "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"}
    with httpx.Client(base_url=traced_server.url, trust_env=False, timeout=30) as client:
        reply = client.post("/", json=body, headers=headers).json()
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply

    spans = wait_for(collector, {"agent.turn", "llm.call"})
    by_id = {span.span_id.hex(): span for span in spans}
    (request_span,) = [span for span in spans if is_request_span(span)]
    assert request_span.name.startswith("POST"), request_span.name
    (turn,) = [span for span in spans if span.name == "agent.turn"]
    ancestors = []
    parent = turn.parent_span_id.hex()
    while parent in by_id:
        ancestors.append(parent)
        parent = by_id[parent].parent_span_id.hex()
    assert request_span.span_id.hex() in ancestors, (ancestors, request_span)
    (llm_call,) = [span for span in spans if span.name == "llm.call"]
    assert llm_call.parent_span_id == turn.span_id
    assert collector.services == {"a2a-agent-server"}


def test_a_grpc_call_has_its_server_span_in_the_clients_trace_above_the_turn(
    traced_server: ServerProcess, collector: Collector, fake_llm, marker: str
) -> None:
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    fake_llm.script(text("traced over gRPC", when_user_contains=marker))
    request = a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=marker, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=marker)]
        )
    )
    metadata = (
        ("a2a-version", "1.0"),
        ("traceparent", f"00-{GRPC_TRACE_ID}-{CLIENT_SPAN_ID}-01"),
    )
    with grpc.insecure_channel(f"127.0.0.1:{GRPC_PORT}") as channel:
        reply = a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, metadata=metadata)
    assert reply.task.status.state == a2a_pb2.TASK_STATE_COMPLETED

    spans = wait_for(collector, {"agent.turn"}, trace_id=GRPC_TRACE_ID)
    by_id = {span.span_id.hex(): span for span in spans}
    (call_span,) = [span for span in spans if is_request_span(span)]
    assert call_span.name == "lf.a2a.v1.A2AService/SendMessage"
    (turn,) = [span for span in spans if span.name == "agent.turn"]
    ancestors, parent = [], turn.parent_span_id.hex()
    while parent in by_id:
        ancestors.append(parent)
        parent = by_id[parent].parent_span_id.hex()
    assert call_span.span_id.hex() in ancestors


def test_metrics_reach_the_collector_under_the_names_of_the_metrics_endpoint(
    traced_server: ServerProcess, collector: Collector, fake_llm, marker: str
) -> None:
    fake_llm.script(text("measured answer", when_user_contains=marker))
    body = send_message(f"measure me {marker}")
    with httpx.Client(base_url=traced_server.url, trust_env=False, timeout=30) as client:
        reply = client.post("/", json=body).json()
        assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply
        exposition = client.get("/metrics").text
    wanted = {"a2a_requests", "a2a_task_state_changes", "a2a_turn_duration_seconds",
              "a2a_model_call_duration_seconds", "a2a_model_tokens"}  # fmt: skip
    deadline = time.monotonic() + 20
    while not wanted <= set(collector.metrics) and time.monotonic() < deadline:
        time.sleep(0.1)
    with collector.lock:
        received = dict(collector.metrics)
    assert wanted <= set(received), sorted(received)
    families = {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE")}
    for name in received:  # a counter's family is exposed as `<name>_total`
        assert {name, f"{name}_total"} & families, f"{name} is not a family of /metrics"
    assert received["a2a_requests"] >= 1
    assert received["a2a_turn_duration_seconds"] >= 1  # one observation at least


NO_ENDPOINT = """
import asyncio, json, sys
from opentelemetry import trace
from app.main import create_app
from app.settings import Settings

async def main():
    app = create_app(Settings())
    async with app.router.lifespan_context(app):
        provider = type(trace.get_tracer_provider()).__name__
    sdk = sorted(name for name in sys.modules if name.startswith("opentelemetry.sdk"))
    print(json.dumps({"provider": provider, "sdk": sdk}))

asyncio.run(main())
"""


def test_without_an_endpoint_no_provider_is_installed_and_the_sdk_is_not_loaded() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", NO_ENDPOINT], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"provider": "ProxyTracerProvider", "sdk": []}, seen
