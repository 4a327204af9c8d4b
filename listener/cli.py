"""``kyma-listener``: the KCP ingress endpoint for watcher events."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pydantic

from kit import aio, loops
from listener import server, settings
from observability import cli as observability_cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-listener",
        description="Accept change events from runtime watchers over mTLS and publish them to "
        "NATS JetStream. Answers 202 only after JetStream has acknowledged the event.",
    )
    parser.add_argument("--config", required=True, type=Path, help="listener YAML configuration")
    observability_cli.add_arguments(parser)
    parser.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    return parser


async def _serve(config: settings.ListenerSettings) -> None:
    await server.run(config, stop=aio.stop_on_signals())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        observability_cli.set_up(args, service_name="kyma-listener")
        config = settings.load(args.config)
    except (ValueError, pydantic.ValidationError) as exc:  # a TracingConfigError is a ValueError
        print(f"kyma-listener: invalid configuration: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        print("configuration is valid")
        return 0
    try:
        loops.run(_serve(config), loop=config.event_loop)
    except OSError as exc:
        print(f"kyma-listener: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
