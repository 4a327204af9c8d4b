"""``kyma-devenv``: bring up the local landscape (NATS, KCP, runtimes) on loopback."""

import argparse
import asyncio
import json
import logging
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from contract import ids
from devenv import demo, errors, landscape, testbin
from kit import aio
from observability import cli as observability_cli
from observability import logs

log = logging.getLogger("kyma-devenv")


def _binaries(args: argparse.Namespace) -> testbin.Binaries:
    return testbin.ensure(directory=Path(args.testbin)) if args.testbin else testbin.configured()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-devenv",
        description="Run a real local Kyma landscape: NATS JetStream, a KCP apiserver and "
        "runtime (SKR) apiservers, each with its own etcd and CA, all on 127.0.0.1.",
    )
    parser.add_argument(
        "--testbin",
        help="directory holding kube-apiserver and etcd, built there if missing (default: $KYMA_SYNC_TESTBIN, "
        "else $KUBEBUILDER_ASSETS as setup-envtest leaves it, else "
        f"~/.cache/kyma-sync/testbin/{testbin.K8S_VERSION}, built there on first use)",
    )
    observability_cli.add_version(parser)
    parser.add_argument("--log-level", default="INFO", help="log level (default: INFO)")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start the landscape and keep it running until Ctrl-C")
    up.add_argument(
        "--runtimes",
        default=",".join(landscape.DEFAULT_RUNTIMES),
        help="comma-separated runtime (Kyma) names, one apiserver each (default: %(default)s)",
    )
    up.add_argument("--workdir", help="where state and logs go (default: a new temp directory)")
    up.add_argument(
        "--exit-when-ready",
        action="store_true",
        help="print the endpoints and stop again at once (a start-up check)",
    )

    demo_cmd = commands.add_parser(
        "demo",
        help="the whole pipeline (NATS, KCP + 2 runtimes, listener, watchers, reconciler) and a "
        "SyncResource + VpcPeering scenario with timings; Ctrl-C stops everything",
    )
    demo_cmd.add_argument("--workdir", help="where state and logs go (default: a new temp directory)")
    demo_cmd.add_argument("--exit-when-done", action="store_true", help="stop after the scenario (for CI)")

    commands.add_parser("build-testbin", help="build kube-apiserver, etcd and helm now (once per version)")
    return parser


def _runtime_names(raw: str) -> list[str]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if not names:
        raise ValueError("--runtimes needs at least one name")
    return [ids.runtime_id(name) for name in names]


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def _up(args: argparse.Namespace) -> None:
    runtimes = _runtime_names(args.runtimes)
    binaries = _binaries(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kyma-sync-"))
    running = landscape.start(workdir=workdir, binaries=binaries, runtimes=runtimes)
    try:
        print("control plane up")
        print(json.dumps(running.describe(), indent=2))
        sys.stdout.flush()
        if not args.exit_when_ready:
            print("Ctrl-C stops everything", file=sys.stderr)
            _wait_for_signal()
    finally:
        running.stop()
        log.info("landscape stopped")


def _demo(args: argparse.Namespace) -> None:
    binaries = _binaries(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kyma-sync-demo-"))
    running = landscape.start(workdir=workdir, binaries=binaries)
    print("control plane up")
    print(json.dumps(running.describe(), indent=2), flush=True)

    async def wait() -> None:
        if not args.exit_when_done:
            print("Ctrl-C stops everything", file=sys.stderr, flush=True)
            await aio.stop_on_signals().wait()

    try:
        asyncio.run(demo.run(running, wait=wait))
    finally:
        running.stop()
        log.info("landscape stopped")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(level=args.log_level, json_lines=False)
    try:
        if args.command == "build-testbin":
            _binaries(args)
            testbin.ensure_helm(directory=testbin.default_cache_root() / "tools")
        elif args.command == "demo":
            _demo(args)
        else:
            _up(args)
    except (errors.DevenvError, ValueError, TimeoutError, RuntimeError) as exc:
        print(f"kyma-devenv: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
