"""Logs carry the trace; the exporter follows the standard OTEL_* variables; every registry has process metrics."""

import importlib.metadata
import io
import json
import logging

import pytest
from opentelemetry import trace

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
        ({}, "none"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "none"),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, "none"),
    ],
)
def test_the_exporter_is_what_the_standard_variables_say(environ: dict[str, str], expected: str) -> None:
    assert tracing.exporter_from_environment(environ) == expected


def test_an_exporter_we_do_not_have_is_a_configuration_error() -> None:
    with pytest.raises(tracing.TracingConfigError, match="zipkin"):
        tracing.exporter_from_environment({"OTEL_TRACES_EXPORTER": "zipkin"})


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
