"""OpenTelemetry traces; the W3C trace context travels in HTTP and NATS headers.

A process installs one TracerProvider at its entry point (``configure``); libraries only ask
for tracers, so without configuration spans are no-ops and cost next to nothing.
"""

from collections.abc import Mapping, MutableMapping
from typing import Literal

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

Exporter = Literal["none", "console"]


def configure(*, service_name: str, exporter: Exporter = "none") -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def inject(carrier: MutableMapping[str, str]) -> None:
    """Write the current span's context into ``carrier`` (HTTP or NATS headers)."""
    propagate.inject(carrier)


def extract(carrier: Mapping[str, str]) -> context.Context:
    return propagate.extract(carrier)
