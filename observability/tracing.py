"""OpenTelemetry traces; the W3C trace context travels in HTTP and NATS headers.

A process installs one TracerProvider at its entry point (``configure``); libraries only ask
for tracers, so without configuration spans are no-ops and cost next to nothing.

Configuration is OpenTelemetry's own: ``OTEL_TRACES_EXPORTER`` (otlp, console, none),
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (OTLP over HTTP/protobuf),
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER`` and ``OTEL_SDK_DISABLED`` mean what they mean for every other service a
platform team runs (``OTEL_TRACES_EXPORTER`` may list several; the OTLP protocol is http/protobuf,
and a process told to use another says so rather than sending HTTP to a gRPC port). One deliberate difference: with no exporter named and no OTLP endpoint set,
nothing is exported (the standard default, otlp to localhost:4318, would only log connection
errors in a cluster without a collector).
"""

import os
from collections.abc import Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Token
from typing import Literal

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

Exporter = Literal["none", "console", "otlp"]
EXPORTERS: tuple[Exporter, ...] = ("none", "console", "otlp")
_OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class TracingConfigError(ValueError):
    """An OTEL_* variable names something this process cannot do."""


def exporters_from_environment(environ: Mapping[str, str] = os.environ) -> tuple[Exporter, ...]:
    """The exporters the standard variables ask for (see the module text for the one difference)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.strip() != "http/protobuf":
        raise TracingConfigError(
            f"OTLP protocol {protocol!r}: this process exports OTLP over HTTP (http/protobuf, port 4318 by convention)"
        )
    named = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not named:
        return ("otlp",) if any(environ.get(variable) for variable in _OTLP_ENDPOINTS) else ()
    unknown = [n for n in named if n not in EXPORTERS]
    if unknown:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER names {unknown}: this process exports to {EXPORTERS}")
    return tuple(dict.fromkeys(n for n in named if n != "none"))  # type: ignore[misc]  # checked just above


class _UnexportedTracerProvider(TracerProvider):
    """The provider of a process that exports nothing: its spans exist for their ids, which its log lines carry."""


def configure(
    *,
    service_name: str,
    exporter: Exporter | None = None,
    environ: Mapping[str, str] = os.environ,
    processors: Sequence[SpanProcessor] = (),
    install: bool = True,
) -> TracerProvider:
    """The process's TracerProvider (installed globally unless ``install`` is false); ``exporter`` None means: as
    the environment says; ``processors``: more places spans go (a test's memory)."""
    chosen = exporters_from_environment(environ) if exporter is None else (exporter,)
    # OTEL_SERVICE_NAME, when set, names the service (the resource detector reads it).
    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    exporting = bool({"console", "otlp"} & set(chosen)) or bool(processors)
    # Exporting nothing, a process records no span of its own (a recorded span cost the listener ~10 % of its
    # time per event) but honours a sampled caller's, so the trace id runs on through it (its own span, never
    # exported, is a gap between its caller's and the next process's). OTEL_TRACES_SAMPLER wins.
    sampler = None if exporting or environ.get("OTEL_TRACES_SAMPLER") else sampling.ParentBased(sampling.ALWAYS_OFF)
    provider = (TracerProvider if exporting else _UnexportedTracerProvider)(
        resource=Resource.create(attributes), sampler=sampler
    )
    if "console" in chosen:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    if "otlp" in chosen:
        # Imported here: protobuf and the HTTP client load only in processes that export.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    for processor in processors:
        provider.add_span_processor(processor)
    if install:
        trace.set_tracer_provider(provider)
    return provider


def server_span(
    tracer: trace.Tracer, name: str, carrier: Mapping[str, str], *, provider: trace.TracerProvider | None = None
) -> AbstractContextManager[trace.Span]:
    """``with server_span(tracer, name, request.headers) as span:`` a server span under the caller's trace, current
    while the block runs. Where the process (``provider``: the global one) exports nothing, the span is made current
    by a plain context manager: OpenTelemetry's two generator-based ones, there to record exceptions nobody would
    see, took 5 % of the listener's time per event (py-spy)."""
    parent = propagate.extract(carrier)
    if isinstance(provider or trace.get_tracer_provider(), _UnexportedTracerProvider):
        return _Current(tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER))
    return tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.SERVER)


class _Current(AbstractContextManager[trace.Span]):
    __slots__ = ("_span", "_token")
    _token: Token[context.Context]

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def __enter__(self) -> trace.Span:
        # Onto the current context, as OpenTelemetry's use_span does: the caller's context also holds its baggage,
        # which a client chooses and which must not ride on into every message published here.
        self._token = context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, *exc_info: object) -> None:
        context.detach(self._token)
        self._span.end()


def inject(carrier: MutableMapping[str, str]) -> None:
    """Write the current span's context into ``carrier`` (HTTP or NATS headers)."""
    propagate.inject(carrier)


def extract(carrier: Mapping[str, str]) -> context.Context:
    return propagate.extract(carrier)
