"""``kyma-reconciler``: the KCP-side controllers (SyncResource, and the bidirectional flows)."""

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pydantic
from aiohttp import web
from prometheus_client import CollectorRegistry

from clients import kube
from kit import aio, loops
from observability import cli as observability_cli
from observability import endpoints
from observability import metrics as observability_metrics
from reconciler import (
    kyma_sync,
    manager,
    mirror,
    module_templates,
    settings,
    sync_controller,
    watch_sets,
    watcher_install,
)
from reconciler.shared import Shared

log = logging.getLogger("kyma-reconciler")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-reconciler",
        description="Run the kyma-sync reconcilers against KCP — SyncResources, ModuleTemplates and the "
        "Kyma CR to runtimes, mirrored kinds from runtimes — driven by KCP watches, watcher events "
        "from NATS and a periodic resync. Serves /healthz, /readyz (ready once every cache has "
        "listed) and /metrics on the management port. SIGTERM stops intake and lets running "
        "reconciles finish within shutdown_grace_seconds.",
    )
    parser.add_argument("--config", type=Path, help="reconciler YAML configuration (default: built-in defaults)")
    parser.add_argument("--kcp-kubeconfig", type=Path, help="kubeconfig of KCP (default: in-cluster)")
    parser.add_argument(
        "--restricted-kinds",
        help="comma-separated kinds never synced nor deleted, as [group/][version/]Kind "
        "(overrides the config; default v1/Secret)",
    )
    parser.add_argument("--no-module-templates", action="store_true", help="do not copy ModuleTemplates into runtimes")
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME"),
        help="this replica's name when sharding is on (default: $POD_NAME; a StatefulSet pod name is stable)",
    )
    observability_cli.add_arguments(parser)
    return parser


def _settings(args: argparse.Namespace) -> settings.ReconcilerSettings:
    loaded = settings.load(args.config) if args.config else settings.ReconcilerSettings()
    overrides: dict[str, dict[str, object]] = {}
    if args.no_module_templates:
        overrides["module_templates"] = {"enabled": False}
    if args.identity and loaded.sharding.enabled:
        overrides["sharding"] = {"identity": args.identity}
    if args.restricted_kinds is not None:
        overrides["sync_resources"] = {
            "restricted_kinds": tuple(k.strip() for k in args.restricted_kinds.split(",") if k.strip())
        }
    if overrides:
        document = loaded.model_dump()
        for section, values in overrides.items():
            document[section].update(values)
        loaded = settings.ReconcilerSettings.model_validate(document)
    if loaded.sharding.enabled and loaded.sharding.identity is None:
        raise ValueError("sharding is on but this replica has no identity: pass --identity or set $POD_NAME")
    return loaded


def build_manager(
    config: settings.ReconcilerSettings, *, kcp: kube.ApiClient, registry: CollectorRegistry
) -> manager.Manager:
    """The manager with every enabled controller."""
    shared = Shared.build(kcp, config, registry)
    controllers: list[manager.AnyController] = []
    if config.sync_resources.enabled:
        controllers.append(
            sync_controller.SyncResourceController(shared, config.sync_resources, events_module=config.events_module)
        )
    if config.mirror.enabled:
        controllers.append(mirror.MirrorController(shared, config.mirror))
    if config.module_templates.enabled:
        controllers.append(
            module_templates.ModuleTemplateController(
                shared, config.module_templates, events_module=config.events_module
            )
        )
    if config.kyma.enabled:
        controllers.append(kyma_sync.KymaController(shared, config.kyma, events_module=config.events_module))
    if config.watch_sets.enabled:
        controllers.append(watch_sets.WatchSetController(shared, config.watch_sets))
    if config.watcher_install.enabled:
        controllers.append(watcher_install.WatcherInstallController(shared, config.watcher_install))
    return manager.Manager(shared, controllers)


async def run(config: settings.ReconcilerSettings, *, kcp: kube.ApiClient, stop: asyncio.Event) -> None:
    registry = observability_metrics.component_registry()
    running = build_manager(config, kcp=kcp, registry=registry)
    runner = web.AppRunner(endpoints.management_app(registry, running.readiness), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "0.0.0.0", config.management_port).start()
        await running.run(stop=stop)
    finally:
        await runner.cleanup()


async def _main(args: argparse.Namespace, config: settings.ReconcilerSettings) -> None:
    async with await kube.client_from(args.kcp_kubeconfig) as kcp:
        await run(config, kcp=kcp, stop=aio.stop_on_signals())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        observability_cli.set_up(args, service_name="kyma-reconciler")
        config = _settings(args)
    except (ValueError, pydantic.ValidationError) as exc:  # a TracingConfigError is a ValueError
        print(f"kyma-reconciler: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        loops.run(_main(args, config), loop=config.event_loop)
    except (OSError, kube.KubeError, kube.KubeconfigError) as exc:
        print(f"kyma-reconciler: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
