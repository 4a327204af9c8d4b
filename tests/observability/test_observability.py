"""Logs carry the trace; the exporter follows the standard OTEL_* variables; every registry has process metrics."""

import importlib.metadata
import io
import json
import logging
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from observability import logs, metrics, tracing


def test_a_log_line_inside_a_span_carries_its_trace_and_span_ids() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.TraceContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("test.trace-ids")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with trace.get_tracer("test").start_as_current_span("work") as span:
            logger.warning("inside", extra={"key": "a/b"})
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    context = span.get_span_context()
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert inside["key"] == "a/b" and inside["message"] == "inside"
    assert "trace_id" not in outside and "span_id" not in outside


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, ()),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",)),
    ],
)
def test_the_exporters_are_what_the_standard_variables_say(environ: dict[str, str], expected: tuple[str, ...]) -> None:
    assert tracing.exporters_from_environment(environ) == expected


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, "grpc"),
    ],
)
def test_what_this_process_cannot_do_is_a_configuration_error(environ: dict[str, str], named: str) -> None:
    with pytest.raises(tracing.TracingConfigError, match=named):
        tracing.exporters_from_environment(environ)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the process collector reads /proc (Linux)")
def test_every_component_registry_exports_process_metrics() -> None:
    registry = metrics.component_registry()
    assert (registry.get_sample_value("process_resident_memory_bytes") or 0) > 0
    assert registry.get_sample_value("process_cpu_seconds_total") is not None


@pytest.mark.parametrize(
    "command", ["kyma-listener", "kyma-watcher", "kyma-reconciler", "kyma-certs", "kyma-eventbus", "kyma-devenv"]
)
def test_every_command_tells_its_version(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    [entry] = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == command]
    with pytest.raises(SystemExit) as exited:
        entry.load()(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"{command} {importlib.metadata.version('kyma-sync')}"


def test_a_process_exporting_nothing_records_no_span_yet_carries_a_sampled_callers_trace() -> None:
    """No exporter: a span started here for nobody is not recorded (it cost the listener per event); one under a
    sampled caller is, and what is passed on names the caller's trace, so a trace through this process stays whole."""
    provider = tracing.configure(service_name="quiet", exporter="none", environ={}, install=False)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("alone") as alone:
        assert not alone.is_recording()
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with tracer.start_as_current_span("served", context=tracing.extract({"traceparent": caller})) as served:
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
        assert served.is_recording()
    assert carrier["traceparent"].split("-")[1] == caller.split("-")[1]
    provider.shutdown()


UNSAMPLED_CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
SAMPLED_CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_server_span_where_nothing_is_exported_is_current_and_has_ids_for_the_logs() -> None:
    """Exporting nothing, the server span is started without OpenTelemetry's context managers: it is the current
    span in the block (log lines carry its ids), the caller's trace goes on through it, and it is gone after."""
    provider = tracing.configure(service_name="quiet", exporter="none", environ={}, install=False)
    tracer = provider.get_tracer("test")
    with tracing.server_span(tracer, "POST /x", {"traceparent": UNSAMPLED_CALLER}, provider=provider) as span:
        assert trace.get_current_span() is span
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
    [_, trace_id, span_id, _] = carrier["traceparent"].split("-")
    assert trace_id == UNSAMPLED_CALLER.split("-")[1]
    assert span_id == format(span.get_span_context().span_id, "016x") != UNSAMPLED_CALLER.split("-")[2]
    assert not span.is_recording()
    assert trace.get_current_span() is not span
    with tracing.server_span(tracer, "POST /x", {}, provider=provider) as alone:
        assert alone.get_span_context().is_valid, "a request without a caller's trace starts one"
    provider.shutdown()


def test_a_server_span_where_spans_are_exported_is_recorded_as_the_callers_child() -> None:
    """The tests' provider records (conftest): OpenTelemetry's own context manager, the span a SERVER span."""
    with tracing.server_span(trace.get_tracer("test"), "POST /x", {"traceparent": SAMPLED_CALLER}) as span:
        assert trace.get_current_span() is span
    assert isinstance(span, ReadableSpan)
    assert span.kind is trace.SpanKind.SERVER
    assert span.parent is not None and span.parent.span_id == int(SAMPLED_CALLER.split("-")[2], 16)


@pytest.mark.parametrize("exported", [True, False], ids=["exported", "not-exported"])
def test_a_server_span_hands_on_the_callers_trace_but_not_its_baggage(exported: bool) -> None:
    """Baggage is the client's to choose: what the listener publishes carries the trace, not the caller's baggage."""
    provider = None if exported else tracing.configure(service_name="quiet", exporter="none", environ={}, install=False)
    tracer = trace.get_tracer("test") if provider is None else provider.get_tracer("test")
    caller = {"traceparent": SAMPLED_CALLER, "baggage": "user=evil,x=1"}
    with tracing.server_span(tracer, "POST /x", caller, provider=provider):
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
    assert set(carrier) == {"traceparent"}
    assert carrier["traceparent"].split("-")[1] == SAMPLED_CALLER.split("-")[1]
