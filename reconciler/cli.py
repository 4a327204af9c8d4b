"""``kyma-reconciler``: the KCP-side controllers (SyncResource, and the bidirectional flows)."""

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import pydantic
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config
from prometheus_client import CollectorRegistry

from clients import kube
from kit import aio
from observability import endpoints, logs, tracing
from reconciler import (
    kyma_sync,
    manager,
    mirror,
    module_templates,
    per_runtime,
    runtime_clients,
    settings,
    sync_controller,
    sync_resources,
)

log = logging.getLogger("kyma-reconciler")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-reconciler",
        description="Run the kyma-sync reconcilers against KCP — SyncResources, ModuleTemplates and the "
        "Kyma CR to runtimes, mirrored kinds from runtimes — driven by KCP watches, watcher events "
        "from NATS and a periodic resync.",
    )
    parser.add_argument("--config", type=Path, help="reconciler YAML configuration (default: built-in defaults)")
    parser.add_argument("--kcp-kubeconfig", type=Path, help="kubeconfig of KCP (default: in-cluster)")
    parser.add_argument(
        "--restricted-kinds",
        help="comma-separated apiVersion/Kind never synced (overrides the config; default v1/Secret)",
    )
    parser.add_argument(
        "--no-module-templates", action="store_true", help="do not copy ModuleTemplates into runtimes"
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--trace-exporter", choices=["none", "console"], default="none")
    return parser


def _settings(args: argparse.Namespace) -> settings.ReconcilerSettings:
    loaded = settings.load(args.config) if args.config else settings.ReconcilerSettings()
    if args.no_module_templates:
        loaded = loaded.model_copy(
            update={"module_templates": loaded.module_templates.model_copy(update={"enabled": False})}
        )
    if args.restricted_kinds is not None:
        kinds = tuple(k.strip() for k in args.restricted_kinds.split(",") if k.strip())
        loaded = loaded.model_copy(
            update={"sync_resources": loaded.sync_resources.model_copy(update={"restricted_kinds": kinds})}
        )
    return loaded


def build_manager(config: settings.ReconcilerSettings, *, kcp: client.ApiClient, registry: CollectorRegistry) -> manager.Manager:
    """The manager with every enabled controller."""
    shared = manager.Shared(
        kcp=kcp,
        clients=runtime_clients.RuntimeClients(
            kcp, module=config.kubeconfig_module, namespace=config.kubeconfig_namespace,
            per_runtime=config.sync_resources.per_runtime_concurrency,
        ),
        registry=registry,
        kyma_namespace=config.kyma_namespace,
    )
    controllers: list[manager.Controller] = []
    section = config.sync_resources
    if section.enabled:
        controllers.append(sync_controller.SyncResourceController(shared, sync_controller.ControllerSettings(
            namespace=section.namespace,
            events_module=config.events_module,
            workers=section.workers,
            resync_seconds=section.resync_seconds,
            sync=sync_resources.SyncSettings(
                restricted_kinds=frozenset(section.restricted_kinds),
                max_concurrent_runtimes=section.max_concurrent_runtimes,
            ),
        )))
    if config.mirror.enabled:
        controllers.append(mirror.MirrorController(shared, mirror.MirrorSettings(
            kinds=tuple(mirror.MirroredKind(**k.model_dump()) for k in config.mirror.kinds),
            namespace_prefix=config.mirror.namespace_prefix,
            workers=config.mirror.workers,
            resync_seconds=config.mirror.resync_seconds,
        )))
    for section_, controller_class in (
        (config.module_templates, module_templates.ModuleTemplateController),
        (config.kyma, kyma_sync.KymaController),
    ):
        if section_.enabled:
            controllers.append(controller_class(shared, per_runtime.PerRuntimeSettings(
                workers=section_.workers, resync_seconds=section_.resync_seconds,
            )))
    return manager.Manager(shared, controllers, manager.ManagerSettings(
        kubeconfig_module=config.kubeconfig_module, nats_servers=config.nats_servers,
        durable_prefix=config.durable_prefix,
    ))


async def run(config: settings.ReconcilerSettings, *, kcp: client.ApiClient, stop: asyncio.Event) -> None:
    registry = CollectorRegistry()
    runner = web.AppRunner(endpoints.management_app(registry, lambda: None), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "0.0.0.0", config.management_port).start()
        await build_manager(config, kcp=kcp, registry=registry).run(stop=stop)
    finally:
        await runner.cleanup()


async def _main(args: argparse.Namespace, config: settings.ReconcilerSettings) -> None:
    async with await kube.client_from(args.kcp_kubeconfig) as kcp:
        await run(config, kcp=kcp, stop=aio.stop_on_signals())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(level=args.log_level)
    try:
        config = _settings(args)
    except (ValueError, pydantic.ValidationError) as exc:
        print(f"kyma-reconciler: invalid configuration: {exc}", file=sys.stderr)
        return 2
    tracing.configure(service_name="kyma-reconciler", exporter=args.trace_exporter)
    try:
        asyncio.run(_main(args, config))
    except (OSError, kube.KubeAPIError, kube_config.ConfigException) as exc:
        print(f"kyma-reconciler: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
