"""Exporting opledger's spans: the OpenTelemetry SDK set up from the standard ``OTEL_*``
variables, when the ``opledger[otel]`` extra is installed and the environment asks for it.

``opledger worker`` and ``opledger serve`` call :func:`configure_tracing` at start and the
function it returns at exit. Nothing is set up (and the API stays a no-op) unless
``OTEL_TRACES_EXPORTER`` is ``otlp`` or ``console``, or it is unset and
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; nor when
``OTEL_SDK_DISABLED=true``, nor when the process already has a tracer provider. The exporter
is OTLP over HTTP (protobuf), configured by its own variables (endpoint, headers, timeout); a
``BatchSpanProcessor`` (``OTEL_BSP_*``) sends the spans; ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the process (default service name ``opledger-<command>``).

Source: OpenTelemetry SDK environment variables specification; issue 31 item 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import structlog

log = structlog.get_logger("opledger.tracing")

EXPORTERS = ("otlp", "console")
"""The values of ``OTEL_TRACES_EXPORTER`` this process acts on (``none`` turns tracing off)."""


def wanted_exporter(env: Mapping[str, str]) -> str | None:
    """The span exporter ``env`` asks for (``otlp`` or ``console``), or None. Pure."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        return named if named in EXPORTERS else None
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return "otlp" if any(env.get(name, "").strip() for name in endpoints) else None


def configure_tracing(service: str, env: Mapping[str, str] | None = None) -> Callable[[], None]:
    """Set the global tracer provider as ``env`` (default: ``os.environ``) asks.

    Args:
        service: the default ``service.name`` (``opledger-worker``, ``opledger-serve``).
        env: the environment to read.

    Returns:
        What to call at exit: flushes and shuts the provider down (a no-op when nothing was
        set up). A missing SDK or an unsupported exporter name is logged, never fatal.
    """
    env = os.environ if env is None else env
    named = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    exporter_name = wanted_exporter(env)
    if exporter_name is None:
        if named and named != "none" and named not in EXPORTERS:
            log.warning("tracing off: unsupported OTEL_TRACES_EXPORTER", exporter=named, supported=list(EXPORTERS))
        return _nothing
    from opentelemetry import trace

    if type(trace.get_tracer_provider()).__name__ != "ProxyTracerProvider":
        log.info("tracing: this process already has a tracer provider; using it")
        return _nothing
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        exporter: SpanExporter
        if exporter_name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            exporter = ConsoleSpanExporter()
    except ImportError as exc:
        log.warning("tracing off: the OpenTelemetry SDK is not installed (pip install 'opledger[otel]')",
                    missing=exc.name)
        return _nothing
    attributes = {} if env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "") \
        else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing on", exporter=exporter_name, service=env.get("OTEL_SERVICE_NAME") or service)
    return provider.shutdown


def _nothing() -> None:
    return None
