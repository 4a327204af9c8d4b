"""Reconciler replicas share the runtimes: shards held by Leases, placed by rendezvous hashing.

A runtime belongs to shard ``sha256(runtime) % shards``; each shard is a Lease in KCP, and only
its holder reconciles that shard's runtimes (watcher events about other runtimes are acked and
left to their owner). Shard 0's holder also runs the controllers whose keys name no single
runtime (the SyncResource controller: one pass writes a SyncResource's records and status). Who
should hold a shard is decided by rendezvous hashing over the live replicas — each keeps a
member Lease — so every replica computes the same answer and a membership change moves only the
shards of the replica that came or went (as Argo CD's cluster sharding or Kafka's sticky
assignment: balance without a coordinator).

Exclusivity comes from the Leases, not from agreement: a shard is taken only when it is free,
released, or its holder has not renewed it for the lease duration — measured on this replica's
own clock from when it last saw the lease change (client-go's observed time, immune to clock
skew between replicas). A holder that cannot renew gives the shard up, cancelling its running
reconciles, a renew interval before anyone may take it; a shard given away because a new
replica should hold it is released only after its running reconciles finished (or were
cancelled after the hand-over grace). The new holder reconciles all of the shard's keys from the
start: reconciles are level-based, so whatever events the old holder had not finished are
covered. A killed replica's shards are taken over after the lease duration.
"""

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from clients import kube, leases
from kit import aio
from reconciler import settings as settings_mod

log = logging.getLogger(__name__)

ROLE_LABEL = "reconciler.kyma-project.io/lease"
GROUP_LABEL = "reconciler.kyma-project.io/group"
SINGLETON_SHARD = 0


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def shard_of(runtime: str, shards: int) -> int:
    """The shard of a runtime: stable across processes and versions (not Python's salted hash)."""
    return _hash(runtime) % shards


def placement(shards: int, members: Iterable[str]) -> dict[int, str]:
    """Who should hold each shard: the member with the highest hash of (shard, member)."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    return {shard: max(ordered, key=lambda member: _hash(f"{shard}/{member}")) for shard in range(shards)}


class Ownership:
    """Which runtimes this replica reconciles now; unsharded, it owns them all."""

    def __init__(self, shards: int | None = None) -> None:
        self.shards = shards
        self.held: set[int] = set()

    @property
    def sharded(self) -> bool:
        return self.shards is not None

    def owns_runtime(self, runtime: str) -> bool:
        return self.shards is None or shard_of(runtime, self.shards) in self.held

    def owns_singletons(self) -> bool:
        return self.shards is None or SINGLETON_SHARD in self.held

    def owns(self, runtime: str | None) -> bool:
        """A key about ``runtime``, or (None) a key about no single runtime."""
        return self.owns_singletons() if runtime is None else self.owns_runtime(runtime)


Acquired = Callable[[], None]
Releasing = Callable[[float], Awaitable[None]]
"""Stop working on what is no longer owned; running reconciles get the given seconds, then are cancelled."""


@dataclasses.dataclass
class _Observed:
    """A lease as last seen: when (our clock) its resourceVersion last changed."""

    version: str
    since: float


class ShardMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.held = Gauge("kyma_reconciler_shards_held", "Shards this replica holds", registry=registry)
        self.members = Gauge(
            "kyma_reconciler_shard_members", "Live reconciler replicas this one sees", registry=registry
        )
        self.handovers = Counter(
            "kyma_reconciler_shard_handovers",
            "Shards taken or given up, by how (acquired, released, lost)",
            ["how"],
            registry=registry,
        )


class Shards:
    """Keeps this replica's member Lease and the shard Leases it should hold; tells the controllers."""

    def __init__(
        self,
        api: kube.ApiClient,
        config: settings_mod.ShardingSettings,
        *,
        identity: str,
        ownership: Ownership,
        registry: CollectorRegistry,
        acquired: Acquired,
        releasing: Releasing,
    ) -> None:
        assert ownership.shards == config.shards
        self._api = api
        self._config = config
        self.identity = identity
        self._ownership = ownership
        self._acquired = acquired
        self._releasing = releasing
        self._metrics = ShardMetrics(registry)
        labels = {GROUP_LABEL: config.lease_prefix}
        self._member = self._lease(f"{config.lease_prefix}-member-{identity}", {**labels, ROLE_LABEL: "member"})
        self._shard_leases = [
            self._lease(f"{config.lease_prefix}-shard-{shard}", {**labels, ROLE_LABEL: "shard"})
            for shard in range(config.shards)
        ]
        self._renewed: dict[int, float] = {}
        """Held shards: when each was last renewed (our clock)."""
        self._observed: dict[str, _Observed] = {}

    def _lease(self, name: str, labels: dict[str, str]) -> leases.Lease:
        return leases.Lease(
            self._api,
            self._config.namespace,
            name,
            identity=self.identity,
            duration_seconds=self._config.lease_duration_seconds,
            labels=labels,
        )

    async def run(self, *, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self._tick()
                await aio.sleep_unless(stop, self._config.renew_interval_seconds)
        finally:
            await self._give_up(sorted(self._renewed), grace=self._config.handover_grace_seconds, how="released")
            await self._member.release()

    async def _tick(self) -> None:
        listed = await self._list()
        if listed is None:
            await self._drop_silent()
            return
        await self._member.take(listed.get(self._member.name))
        # Every lease is looked at every tick: its silence is timed from the first tick it stopped changing.
        holders = {name: self._holder(name, lease) for name, lease in listed.items()}
        members = {self.identity} | {
            holder
            for name, lease in listed.items()
            if (lease["metadata"].get("labels") or {}).get(ROLE_LABEL) == "member"
            and (holder := holders[name]) is not None
        }
        self._metrics.members.set(len(members))
        desired = placement(self._config.shards, members)
        giving_away = [s for s in sorted(self._renewed) if desired[s] != self.identity]
        if giving_away:
            await self._give_up(giving_away, grace=self._config.handover_grace_seconds, how="released")
        gained = False
        for shard, lease in enumerate(self._shard_leases):
            current = listed.get(lease.name)
            if shard in self._renewed:
                await self._renew(shard, lease, current)
                continue
            # Held under our own name: a previous run of this replica (a StatefulSet runs one pod per name).
            free = current is None or holders[lease.name] in (None, self.identity)
            if desired[shard] == self.identity and free and await lease.take(current):
                log.info("shard acquired", extra={"shard": shard, "identity": self.identity})
                self._renewed[shard] = asyncio.get_running_loop().time()
                self._ownership.held.add(shard)
                self._metrics.handovers.labels("acquired").inc()
                gained = True
        await self._drop_silent()
        self._metrics.held.set(len(self._renewed))
        if gained:
            self._acquired()

    async def _list(self) -> dict[str, dict[str, Any]] | None:
        try:
            found = await kube.request(
                self._api,
                "GET",
                leases.LEASES.path(self._config.namespace),
                query=[("labelSelector", f"{GROUP_LABEL}={self._config.lease_prefix}")],
            )
        except kube.KubeError as exc:
            log.warning("shard leases unavailable", extra={"error": repr(exc)})
            return None
        return {lease["metadata"]["name"]: lease for lease in found.get("items") or []}

    def _holder(self, name: str, lease: dict[str, Any]) -> str | None:
        """Who holds ``lease`` by our clock: nobody once it went unchanged for its duration, or was released."""
        now = asyncio.get_running_loop().time()
        version = lease["metadata"]["resourceVersion"]
        seen = self._observed.get(name)
        if seen is None or seen.version != version:
            seen = self._observed[name] = _Observed(version, now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if not holder or now - seen.since > float(spec.get("leaseDurationSeconds") or 0):
            return None
        return str(holder)

    async def _renew(self, shard: int, lease: leases.Lease, current: dict[str, Any] | None) -> None:
        holder = (current or {}).get("spec", {}).get("holderIdentity")
        if current is not None and holder not in (None, "", self.identity):
            log.warning("shard taken by another replica", extra={"shard": shard, "holder": holder})
            await self._give_up([shard], grace=0, how="lost")
            return
        if await lease.take(current):
            self._renewed[shard] = asyncio.get_running_loop().time()

    async def _drop_silent(self) -> None:
        """Shards not renewed for nearly a lease duration are given up now, before anyone may take them."""
        deadline = self._config.lease_duration_seconds - self._config.renew_interval_seconds
        now = asyncio.get_running_loop().time()
        silent = [shard for shard, renewed in self._renewed.items() if now - renewed > deadline]
        if silent:
            log.warning("shard leases not renewed in time, giving them up", extra={"shards": silent})
            for shard in silent:
                self._ownership.held.discard(shard)
                del self._renewed[shard]
                self._metrics.handovers.labels("lost").inc()
            await self._releasing(0)

    async def _give_up(self, shards: list[int], *, grace: float, how: str) -> None:
        if not shards:
            return
        for shard in shards:
            self._ownership.held.discard(shard)
        await self._releasing(grace)
        for shard in shards:
            self._renewed.pop(shard, None)
            if how == "released":
                await self._shard_leases[shard].release()
            self._metrics.handovers.labels(how).inc()
        log.info("shards given up", extra={"shards": shards, "how": how, "identity": self.identity})
        self._metrics.held.set(len(self._renewed))
