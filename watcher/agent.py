"""The watcher process: configuration reloads, leader election, the pipeline while leader.

Followers stay warm — configuration loaded, API client and health endpoints up, campaigning for
the lease — and start the pipeline the moment they win it. A configuration change restarts the
pipeline, which relists against the checkpoint: nothing is lost across the restart, and a
module unpaused gets what changed meanwhile as RESYNC.
"""

import asyncio
import logging
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from clients import kube
from contract import watch_sets
from kit import aio
from observability import endpoints
from observability import metrics as observability_metrics
from watcher import config, lease, metrics, pipeline

log = logging.getLogger(__name__)

_CONFIG_POLL_SECONDS = 1.0
_WATCH_SET_POLL_SECONDS = 3.0
"""How often KCP's watch set is read from the runtime: a pause decided in KCP takes effect within seconds."""


class Agent:
    def __init__(
        self,
        *,
        config_path: Path,
        api: kube.ApiClient,
        identity: str,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._config_path = config_path
        self._api = api
        self._base = config.load(config_path)
        self._watch_set: watch_sets.WatchSet | None = None
        self._progress: pipeline.Progress | None = None
        self.settings = self._base
        self.metrics = metrics.WatcherMetrics(registry or observability_metrics.component_registry())
        self.elector = lease.LeaderElector(api, self.settings.lease, identity=identity)
        self._reconfigured = asyncio.Event()
        self.management_url: str | None = None

    @property
    def leading(self) -> bool:
        return self.elector.leading

    async def run(self, *, stop: asyncio.Event) -> None:
        runner = web.AppRunner(
            endpoints.management_app(self.metrics.registry, self.readiness, configuration=self.configuration),
            access_log=None,
        )
        await runner.setup()
        try:
            if self.settings.management_port is not None:
                await web.TCPSite(runner, "0.0.0.0", self.settings.management_port).start()
                host, port = runner.addresses[0][:2]
                self.management_url = f"http://{host}:{port}"
            await self._refresh_watch_set()  # lead with KCP's watch set from the start, when there is one
            self._apply()
            async with asyncio.TaskGroup() as group:
                group.create_task(self._follow_config(stop=stop))
                group.create_task(self.elector.run(stop=stop, lead=self._lead))
        finally:
            await runner.cleanup()

    def readiness(self) -> str | None:
        """Leader: ready once every source has listed. Follower: ready while it can reach the Lease (to take over)."""
        if self.elector.leading:
            progress = self._progress
            if progress is None or progress.unlisted():
                waiting = "?" if progress is None else f"{progress.unlisted()} of {progress.sources}"
                return f"leading; sources not listed yet: {waiting}"
            return None
        if not self.elector.reachable:
            return "cannot reach the apiserver's Lease: not ready to take over"
        return None

    def configuration(self) -> dict[str, object]:
        """What this watcher runs with now (file and KCP's watch set merged) and the watch set's revision."""
        return {
            "watch_set_revision": self._watch_set.revision if self._watch_set else None,
            "leading": self.elector.leading,
            "settings": self.settings.model_dump(mode="json"),
        }

    async def _lead(self, lost: asyncio.Event) -> None:
        self.metrics.leader.set(1)
        try:
            while not lost.is_set():
                self._reconfigured.clear()
                pipeline_stop = asyncio.Event()
                self._progress = pipeline.Progress()
                async with asyncio.TaskGroup() as group:
                    group.create_task(
                        pipeline.run(
                            api=self._api,
                            settings=self.settings,
                            watcher_metrics=self.metrics,
                            stop=pipeline_stop,
                            progress=self._progress,
                            watch_set_revision=self._watch_set.revision if self._watch_set else None,
                            # A new configuration: deliver what the old one detected first. Leadership lost: stop
                            # at once (the new leader's relist resends what is left).
                            drain_for=lambda: 0.0 if lost.is_set() else self.settings.delivery.drain_seconds,
                        )
                    )
                    await aio.wait_any(lost, self._reconfigured)
                    pipeline_stop.set()
        finally:
            self.metrics.leader.set(0)

    async def _follow_config(self, *, stop: asyncio.Event) -> None:
        """Re-read the file when it changes and KCP's watch set every few seconds; restart the pipeline on a change."""
        stamp = self._config_path.stat().st_mtime_ns
        asked = asyncio.get_running_loop().time()
        while not await aio.sleep_unless(stop, _CONFIG_POLL_SECONDS):
            try:
                current = self._config_path.stat().st_mtime_ns
                if current != stamp:
                    stamp = current
                    self._base = config.load(self._config_path)
            except (OSError, ValueError) as exc:
                log.error("new watcher configuration is invalid; keeping the old one", extra={"error": str(exc)})
            if asyncio.get_running_loop().time() - asked >= _WATCH_SET_POLL_SECONDS:
                asked = asyncio.get_running_loop().time()
                await self._refresh_watch_set()
            self._apply()

    async def _refresh_watch_set(self) -> None:
        """KCP's watch set for this runtime, if configured; on any trouble the last one stays."""
        central = self._base.central
        if central is None:
            self._watch_set = None
            return
        try:
            found = await kube.get_or_none(
                self._api, kube.CONFIGMAPS.object_path(central.namespace, central.config_map)
            )
            if found is None:
                return  # KCP has not written one yet (or is rewriting it): keep what we have
            watch_set = watch_sets.WatchSet.decode((found.get("data") or {})[watch_sets.DATA_KEY])
        except (kube.KubeError, KeyError, ValueError) as exc:
            log.warning("KCP's watch set is unreadable; keeping the last one", extra={"error": str(exc)})
            return
        if watch_set != self._watch_set:
            self._watch_set = watch_set
            self.metrics.watch_set.info({"revision": watch_set.revision})

    def _apply(self) -> None:
        updated = self._base.merged(self._watch_set)
        if updated != self.settings:
            revision = self._watch_set.revision if self._watch_set else None
            log.info("watcher configuration changed, restarting the pipeline", extra={"watch_set": revision})
            self.settings = updated
            self._reconfigured.set()
