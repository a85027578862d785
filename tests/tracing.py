"""Capturing opledger's spans in a test: an SDK tracer provider with an in-memory exporter,
given to ``ledger.tracing`` for the test only (the global provider is never set, so no other
test sees an SDK)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ledger import tracing


@dataclass
class Spans:
    """The spans finished so far, and the provider a test's own "host" spans come from."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name.startswith(prefix)]


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    try:
        yield Spans(provider=provider, exporter=exporter)
    finally:
        tracing.set_tracer_provider(None)
        provider.shutdown()


def texts_of(span: ReadableSpan) -> list[str]:
    """Everything a span carries as text: name, attributes, events, status description."""
    out = [span.name, span.status.description or ""]
    out.extend(f"{key}={value}" for key, value in (span.attributes or {}).items())
    for event in span.events:
        out.append(event.name)
        out.extend(f"{key}={value}" for key, value in (event.attributes or {}).items())
    for link in span.links:
        out.extend(f"{key}={value}" for key, value in (link.attributes or {}).items())
    return out
