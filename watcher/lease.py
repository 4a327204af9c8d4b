"""Leader election with a coordination.k8s.io/v1 Lease: one active sender per runtime.

The same protocol as client-go's leaderelection: the holder renews ``renewTime`` every renew
interval; anyone may take over a lease not renewed for ``leaseDurationSeconds``; every write
carries the resourceVersion read, so two candidates can never both win. A leader that cannot
renew in time stops leading before another can have taken over. On a clean stop the lease is
released at once so that a follower takes over without waiting out the duration.
"""

import asyncio
import datetime
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from clients import kube
from kit import aio
from watcher import config

log = logging.getLogger(__name__)

Lead = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    def __init__(self, api: client.ApiClient, settings: config.LeaseSettings, *, identity: str) -> None:
        self._api = client.CoordinationV1Api(api)
        self._settings = settings
        self.identity = identity
        self.leading = False

    async def run(self, *, stop: asyncio.Event, lead: Lead) -> None:
        """Campaign until ``stop``; while leader, run ``lead(lost)``, which must return once lost is set."""
        while not stop.is_set():
            if not await self._try_acquire():
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
                await self._release()
            else:
                log.warning("lost leadership", extra={"identity": self.identity})

    async def _read(self) -> client.V1Lease | None:
        try:
            return await self._api.read_namespaced_lease(self._settings.name, self._settings.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _spec(self, *, acquired: datetime.datetime, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self._settings.duration_seconds)),
            acquire_time=acquired,
            renew_time=_now(),
            lease_transitions=transitions,
        )

    async def _try_acquire(self) -> bool:
        try:
            lease = await self._read()
            if lease is None:
                await self._api.create_namespaced_lease(
                    self._settings.namespace,
                    client.V1Lease(
                        metadata=client.V1ObjectMeta(name=self._settings.name, namespace=self._settings.namespace),
                        spec=self._spec(acquired=_now(), transitions=0),
                    ),
                )
                return True
            spec = lease.spec
            holder = spec.holder_identity
            if holder and holder != self.identity and not self._expired(spec):
                return False
            transitions = (spec.lease_transitions or 0) + (holder != self.identity)
            lease.spec = self._spec(
                acquired=spec.acquire_time if holder == self.identity else _now(), transitions=transitions
            )
            await self._api.replace_namespaced_lease(self._settings.name, self._settings.namespace, lease)
            return True
        except kube.API_ERRORS as exc:
            error = kube.translate(exc)
            if error.status not in (409, 404):
                log.warning("lease unavailable", extra={"status": error.status, "reason": error.reason})
            return False

    @staticmethod
    def _expired(spec: client.V1LeaseSpec) -> bool:
        if spec.renew_time is None:
            return True
        return spec.renew_time + datetime.timedelta(seconds=spec.lease_duration_seconds or 0) < _now()

    async def _renew_until_lost(self, stop: asyncio.Event) -> None:
        # Give up strictly before the lease can expire, so two leaders never overlap.
        deadline_margin = self._settings.renew_interval_seconds / 2
        last_renewal = asyncio.get_running_loop().time()
        while not await aio.sleep_unless(stop, self._settings.renew_interval_seconds):
            renewed = await self._renew()
            if renewed is None:
                return
            if renewed:
                last_renewal = asyncio.get_running_loop().time()
                continue
            silent = asyncio.get_running_loop().time() - last_renewal
            if silent > self._settings.duration_seconds - deadline_margin:
                return

    async def _renew(self) -> bool | None:
        """True when renewed, False when it failed for now, None when someone else holds it."""
        try:
            lease = await self._read()
            if lease is None or lease.spec.holder_identity != self.identity:
                return None
            lease.spec.renew_time = _now()
            await self._api.replace_namespaced_lease(self._settings.name, self._settings.namespace, lease)
            return True
        except kube.API_ERRORS as exc:
            log.warning("lease renewal failed", extra={"error": repr(exc)})
            return False

    async def _release(self) -> None:
        try:
            lease = await self._read()
            if lease is None or lease.spec.holder_identity != self.identity:
                return
            # client-go's release: no holder, so the next candidate need not wait out the duration.
            lease.spec = client.V1LeaseSpec(
                lease_duration_seconds=1, lease_transitions=lease.spec.lease_transitions
            )
            await self._api.replace_namespaced_lease(self._settings.name, self._settings.namespace, lease)
            log.info("released leadership", extra={"identity": self.identity})
        except kube.API_ERRORS as exc:
            log.warning("lease release failed; a follower takes over after the lease expires", extra={"error": repr(exc)})
