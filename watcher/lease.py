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

from clients import kube
from kit import aio
from watcher import config

log = logging.getLogger(__name__)

Lead = Callable[[asyncio.Event], Coroutine[Any, Any, None]]

LEASES = kube.Gvr("coordination.k8s.io", "v1", "leases")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _micro_time(moment: datetime.datetime) -> str:
    """A MicroTime as the apiserver writes it: UTC, always six fractional digits."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: kube.ApiClient, settings: config.LeaseSettings, *, identity: str) -> None:
        self._api = api
        self._settings = settings
        self._path = LEASES.object_path(settings.namespace, settings.name)
        self.identity = identity
        self.leading = False
        self.reachable = False
        """Whether the last Lease request got an answer: a follower that can take over is ready."""

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

    async def _read(self) -> dict[str, Any] | None:
        return await kube.get_or_none(self._api, self._path)

    async def _replace(self, lease: dict[str, Any]) -> None:
        """Write ``lease`` back as read: its resourceVersion makes a concurrent writer's change a 409."""
        await kube.request(self._api, "PUT", self._path, body=lease)

    def _spec(self, *, acquired: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self._settings.duration_seconds)),
            "acquireTime": acquired,
            "renewTime": _micro_time(_now()),
            "leaseTransitions": transitions,
        }

    async def _try_acquire(self) -> bool:
        try:
            lease = await self._read()
            self.reachable = True
            if lease is None:
                await kube.request(
                    self._api,
                    "POST",
                    LEASES.path(self._settings.namespace),
                    body={
                        "apiVersion": LEASES.api_version,
                        "kind": "Lease",
                        "metadata": {"name": self._settings.name, "namespace": self._settings.namespace},
                        "spec": self._spec(acquired=_micro_time(_now()), transitions=0),
                    },
                )
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            if holder and holder != self.identity and not self._expired(spec):
                return False
            transitions = (spec.get("leaseTransitions") or 0) + (holder != self.identity)
            acquired = spec.get("acquireTime") if holder == self.identity else None
            lease["spec"] = self._spec(acquired=acquired or _micro_time(_now()), transitions=transitions)
            await self._replace(lease)
            return True
        except kube.KubeError as exc:
            if not isinstance(exc, (kube.ConflictError, kube.NotFoundError)):
                self.reachable = False
                log.warning("lease unavailable", extra={"status": exc.status, "reason": exc.reason})
            return False

    @staticmethod
    def _expired(spec: dict[str, Any]) -> bool:
        renewed = spec.get("renewTime")
        if renewed is None:
            return True
        duration = datetime.timedelta(seconds=spec.get("leaseDurationSeconds") or 0)
        return datetime.datetime.fromisoformat(renewed) + duration < _now()

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

    def _held(self, lease: dict[str, Any] | None) -> bool:
        return lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity

    async def _renew(self) -> bool | None:
        """True when renewed, False when it failed for now, None when someone else holds it."""
        try:
            lease = await self._read()
            if lease is None or not self._held(lease):
                return None
            lease["spec"]["renewTime"] = _micro_time(_now())
            await self._replace(lease)
            return True
        except kube.KubeError as exc:
            log.warning("lease renewal failed", extra={"error": repr(exc)})
            return False

    async def _release(self) -> None:
        try:
            lease = await self._read()
            if lease is None or not self._held(lease):
                return
            # client-go's release: no holder, so the next candidate need not wait out the duration.
            released: dict[str, Any] = {"leaseDurationSeconds": 1}
            if lease["spec"].get("leaseTransitions") is not None:
                released["leaseTransitions"] = lease["spec"]["leaseTransitions"]
            lease["spec"] = released
            await self._replace(lease)
            log.info("released leadership", extra={"identity": self.identity})
        except kube.KubeError as exc:
            log.warning(
                "lease release failed; a follower takes over after the lease expires", extra={"error": repr(exc)}
            )
