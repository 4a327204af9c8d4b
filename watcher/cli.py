"""``kyma-watcher``: the change-detection agent of one runtime."""

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import pydantic

from clients import kube
from kit import aio
from observability import cli as observability_cli
from watcher import agent
from watcher import config as config_mod


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-watcher",
        description="Watch the configured resources of this runtime and post their changes to "
        "the KCP listener over mTLS. Run one per node; a Lease picks the single active sender.",
    )
    parser.add_argument("--config", required=True, type=Path, help="watcher YAML configuration (reloaded on change)")
    parser.add_argument(
        "--kubeconfig", type=Path, help="kubeconfig of the runtime (default: in-cluster service account)"
    )
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or socket.gethostname(),
        help="this candidate's name in the Lease (default: $POD_NAME, else the host name)",
    )
    observability_cli.add_arguments(parser)
    return parser


async def _run(args: argparse.Namespace) -> None:
    stop = aio.stop_on_signals()
    # Headroom over what the configuration needs now: a reload may add watches.
    connections = max(100, 2 * config_mod.load(args.config).connections_needed())
    async with await kube.client_from(args.kubeconfig, connections=connections) as api:
        await agent.Agent(config_path=args.config, api=api, identity=args.identity).run(stop=stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        observability_cli.set_up(args, service_name="kyma-watcher")
        asyncio.run(_run(args))
    except (OSError, kube.KubeconfigError) as exc:  # before ValueError: a KubeconfigError is one
        print(f"kyma-watcher: {exc}", file=sys.stderr)
        return 1
    except (ValueError, pydantic.ValidationError) as exc:
        print(f"kyma-watcher: invalid configuration: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
