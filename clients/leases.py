"""coordination.k8s.io/v1 Leases held under an identity: client-go's resource lock, for every election of ours.

The holder renews ``renewTime``; anyone may take over a lease not renewed for its
``leaseDurationSeconds`` — timed on the candidate's own clock from when it last saw the lease
change (client-go's observed time: ``renewTime`` is the holder's clock, and nodes' clocks
differ); every write carries the resourceVersion read, so two candidates can never both win.
Releasing empties the holder, so the next candidate need not wait out the duration. Who uses a
lease decides what holding it means (the watcher's one sender, a reconciler's shard) and gives up
strictly before it can expire.
"""

import dataclasses
import datetime
import logging
import time
from typing import Any

from clients import kube

log = logging.getLogger(__name__)

LEASES = kube.Gvr("coordination.k8s.io", "v1", "leases")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def micro_time(moment: datetime.datetime) -> str:
    """A MicroTime as the apiserver writes it: UTC, always six fractional digits."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass
class _Seen:
    version: str
    since: float


class Observer:
    """Who holds leases by our clock: nobody once a lease went unchanged for its duration since we first saw it
    so, or was released."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def holder(self, lease: dict[str, Any]) -> str | None:
        expires_in = self.expires_in(lease)
        return None if expires_in is None or expires_in < 0 else str(lease["spec"]["holderIdentity"])

    def expires_in(self, lease: dict[str, Any]) -> float | None:
        """Seconds until the lease is free if it stays as it is now (negative: free already); None if nobody holds
        it. A candidate can look again right then rather than at its next round."""
        now = time.monotonic()
        name, version = lease["metadata"]["name"], lease["metadata"]["resourceVersion"]
        seen = self._seen.get(name)
        if seen is None or seen.version != version:
            seen = self._seen[name] = _Seen(version, now)
        spec = lease.get("spec") or {}
        if not spec.get("holderIdentity"):
            return None
        return seen.since + float(spec.get("leaseDurationSeconds") or 0) - now


@dataclasses.dataclass
class Lease:
    """One Lease object as one candidate sees it."""

    api: kube.ApiClient
    namespace: str
    name: str
    identity: str
    duration_seconds: float
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    reachable: bool = False
    """Whether the last request got an answer."""
    namespace_missing: bool = False
    """Whether the last attempt to create the lease found no namespace to create it in (said once, as an error:
    a candidate whose lease cannot exist never holds it, and would otherwise wait without a word)."""
    observer: Observer = dataclasses.field(default_factory=Observer)

    @property
    def path(self) -> str:
        return LEASES.object_path(self.namespace, self.name)

    def _spec(self, *, acquired: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.duration_seconds)),
            "acquireTime": acquired,
            "renewTime": micro_time(now()),
            "leaseTransitions": transitions,
        }

    async def try_acquire(self) -> bool:
        """Take the lease when it is free, expired (unchanged for its duration, by our clock) or already ours; False
        when another holds it or on error."""
        try:
            lease = await kube.get_or_none(self.api, self.path)
        except kube.KubeError as exc:
            self._failed(exc)
            return False
        self.reachable = True
        held_by = None if lease is None else self.observer.holder(lease)
        if held_by is not None and held_by != self.identity:
            return False
        return await self.take(lease)

    async def take(self, current: dict[str, Any] | None) -> bool:
        """Write ourselves as holder over ``current`` (None: create it), renewing it if ours already.

        The caller has decided it may (free, expired, ours); the write carries ``current``'s resourceVersion,
        so it fails (False) if anyone wrote the lease since it was read.
        """
        try:
            if current is None:
                await kube.request(
                    self.api,
                    "POST",
                    LEASES.path(self.namespace),
                    body={
                        "apiVersion": LEASES.api_version,
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels},
                        "spec": self._spec(acquired=micro_time(now()), transitions=0),
                    },
                )
            else:
                spec = current.get("spec") or {}
                held_by = spec.get("holderIdentity")
                transitions = (spec.get("leaseTransitions") or 0) + (held_by != self.identity)
                acquired = spec.get("acquireTime") if held_by == self.identity else None
                lease = {**current, "spec": self._spec(acquired=acquired or micro_time(now()), transitions=transitions)}
                await kube.request(self.api, "PUT", self.path, body=lease)
        except kube.KubeError as exc:
            # A create 404s where the namespace does not exist (or the apiserver serves no Leases there).
            if current is None and isinstance(exc, kube.NotFoundError):
                if not self.namespace_missing:
                    log.error(
                        "cannot create the lease: its namespace does not exist",
                        extra={"lease": self.name, "namespace": self.namespace, "reason": exc.reason},
                    )
                self.namespace_missing = self.reachable = True
                return False
            self.namespace_missing = False
            self._failed(exc)
            return False
        self.reachable = True
        self.namespace_missing = False
        return True

    def _failed(self, exc: kube.KubeError) -> None:
        if not isinstance(exc, (kube.ConflictError, kube.NotFoundError)):
            self.reachable = False
            log.warning("lease unavailable", extra={"lease": self.name, "status": exc.status, "reason": exc.reason})

    async def renew(self) -> bool | None:
        """True when renewed, False when it failed for now, None when someone else holds it."""
        try:
            lease = await kube.get_or_none(self.api, self.path)
        except kube.KubeError as exc:
            self._failed(exc)
            return False
        self.reachable = True
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return None
        return await self.take(lease)

    async def release(self) -> None:
        """Give the lease up at once (client-go's release: no holder); a failure leaves it to expire."""
        try:
            lease = await kube.get_or_none(self.api, self.path)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            released: dict[str, Any] = {"leaseDurationSeconds": 1}
            if lease["spec"].get("leaseTransitions") is not None:
                released["leaseTransitions"] = lease["spec"]["leaseTransitions"]
            lease["spec"] = released
            await kube.request(self.api, "PUT", self.path, body=lease)
        except kube.KubeError as exc:
            log.warning("lease release failed; it expires instead", extra={"lease": self.name, "error": repr(exc)})
