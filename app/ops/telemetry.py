"""Trace and metric export: off unless an OTLP endpoint is configured, then the OpenTelemetry SDK.

Metrics: with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) set, the app's
metric families (app.ops.metrics) are also recorded on a meter whose reader pushes them over
OTLP/HTTP every OTEL_METRIC_EXPORT_INTERVAL ms (60 s by default), under the same names as on
`/metrics`.

With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, the app gets
request spans from `opentelemetry-instrumentation-fastapi` (the client's `traceparent` as their
parent) and, at startup, a global SDK `TracerProvider` whose `BatchSpanProcessor` sends spans to
the OTLP/HTTP exporter; the turn spans (agent.tracing) start under the request span. Every other
`OTEL_*` variable (headers, timeout, sampler, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_BSP_*`, `OTEL_SDK_DISABLED`, `OTEL_PYTHON_FASTAPI_EXCLUDED_URLS`) is read by the SDK itself.
Without an endpoint, the SDK is not even imported: the spans stay the API's no-ops.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fastapi import FastAPI

from app.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

logger = logging.getLogger(__name__)

SERVICE_NAME = "a2a-agent-server"


def instrument(app: FastAPI, settings: Settings) -> None:
    """Request spans for every HTTP request, when tracing is on (before the app starts)."""
    if not settings.tracing_enabled:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # No tracer provider given: the instrumentation's proxy tracer uses the global one that
    # `start_tracing` installs at startup.
    FastAPIInstrumentor.instrument_app(app)


def start_tracing(settings: Settings, *, version: str) -> TracerProvider | None:
    """Install the SDK provider with the OTLP/HTTP exporter; None when tracing is off."""
    if not settings.tracing_enabled:
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=_resource(version))
    exporter = OTLPSpanExporter()  # endpoint, headers, timeout, compression from OTEL_*
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.info(
        "tracing=<otlp> endpoint=<%s> | exporting spans",
        settings.otel_exporter_otlp_traces_endpoint or settings.otel_exporter_otlp_endpoint,
    )
    return provider


def stop_tracing(provider: TracerProvider | None) -> None:
    """Flush the spans still queued and stop the exporter (at shutdown)."""
    if provider is not None:
        provider.shutdown()


def start_metrics(settings: Settings, *, version: str) -> MeterProvider | None:
    """A meter provider whose reader pushes over OTLP/HTTP; None when no endpoint is set. Not
    installed globally: only the app's Metrics record on it."""
    if not settings.otlp_metrics_enabled:
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())  # interval: OTEL_METRIC_*
    logger.info(
        "metrics=<otlp> endpoint=<%s> | exporting metrics",
        settings.otel_exporter_otlp_metrics_endpoint or settings.otel_exporter_otlp_endpoint,
    )
    return MeterProvider(metric_readers=[reader], resource=_resource(version))


def stop_metrics(provider: MeterProvider | None) -> None:
    """Push the last figures and stop the reader (at shutdown)."""
    if provider is not None:
        provider.shutdown()


def _resource(version: str) -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME as SERVICE_NAME_KEY
    from opentelemetry.sdk.resources import SERVICE_VERSION, Resource

    resource = Resource.create({SERVICE_VERSION: version})  # + OTEL_RESOURCE_ATTRIBUTES, ...
    if str(resource.attributes.get(SERVICE_NAME_KEY, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME_KEY: SERVICE_NAME}))
    return resource
