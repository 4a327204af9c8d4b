"""What every command line has: --version, --log-level, --trace-exporter; and the set-up they drive."""

import argparse
import importlib.metadata

from observability import logs, tracing


def version() -> str:
    try:
        return importlib.metadata.version("kyma-sync")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")


def add_arguments(parser: argparse.ArgumentParser, *, log_level: str = "INFO") -> None:
    """--version, --log-level and --trace-exporter (default: as the OTEL_* variables say)."""
    add_version(parser)
    parser.add_argument("--log-level", default=log_level, help=f"default {log_level}")
    parser.add_argument(
        "--trace-exporter",
        choices=tracing.EXPORTERS,
        default=None,
        help="where spans go; default: OTEL_TRACES_EXPORTER, else otlp when OTEL_EXPORTER_OTLP_ENDPOINT "
        "(or ..._TRACES_ENDPOINT) is set, else none",
    )


def set_up(args: argparse.Namespace, *, service_name: str) -> None:
    """Logs first (so a tracing configuration error is logged), then traces."""
    logs.configure(level=args.log_level)
    tracing.configure(service_name=service_name, exporter=args.trace_exporter)
