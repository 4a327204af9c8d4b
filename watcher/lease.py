"""Leader election with a coordination.k8s.io/v1 Lease (``clients.leases``): one active sender per runtime.

A leader that cannot renew in time stops leading before another can have taken over. On a clean
stop the lease is released at once so that a follower takes over without waiting out the duration.
"""

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from clients import kube, leases
from kit import aio
from watcher import config

log = logging.getLogger(__name__)

Lead = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


class LeaderElector:
    def __init__(self, api: kube.ApiClient, settings: config.LeaseSettings, *, identity: str) -> None:
        self._settings = settings
        self._lease = leases.Lease(
            api, settings.namespace, settings.name, identity=identity, duration_seconds=settings.duration_seconds
        )
        self.identity = identity
        self.leading = False

    @property
    def reachable(self) -> bool:
        """Whether the last Lease request got an answer: a follower that can take over is ready."""
        return self._lease.reachable

    async def run(self, *, stop: asyncio.Event, lead: Lead) -> None:
        """Campaign until ``stop``; while leader, run ``lead(lost)``, which must return once lost is set."""
        while not stop.is_set():
            if not await self._lease.try_acquire():
                await aio.sleep_unless(stop, self._settings.renew_interval_seconds / 2)
                continue
            log.info("became leader", extra={"identity": self.identity, "lease": self._settings.name})
            self.leading = True
            lost = asyncio.Event()
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(lead(lost), name="leader-work")
                    await self._renew_until_lost(stop)
                    lost.set()
            finally:
                self.leading = False
            if stop.is_set():
                await self._lease.release()
                log.info("released leadership", extra={"identity": self.identity})
            else:
                log.warning("lost leadership", extra={"identity": self.identity})

    async def _renew_until_lost(self, stop: asyncio.Event) -> None:
        # Give up strictly before the lease can expire, so two leaders never overlap.
        deadline_margin = self._settings.renew_interval_seconds / 2
        last_renewal = asyncio.get_running_loop().time()
        while not await aio.sleep_unless(stop, self._settings.renew_interval_seconds):
            renewed = await self._lease.renew()
            if renewed is None:
                return
            if renewed:
                last_renewal = asyncio.get_running_loop().time()
                continue
            silent = asyncio.get_running_loop().time() - last_renewal
            if silent > self._settings.duration_seconds - deadline_margin:
                return
