"""Reconciler replicas share the runtimes: shards held by Leases, placed by rendezvous hashing.

A runtime belongs to shard ``sha256(runtime) % shards``; each shard is a Lease in KCP, and only
its holder reconciles that shard's runtimes (watcher events about other runtimes are acked and
left to their owner). Shard 0's holder also runs what belongs to no single runtime: every pass of
a group SyncResource. Who
should hold a shard is decided by rendezvous hashing over the live replicas — each keeps a
member Lease — so every replica computes the same answer and a membership change moves only the
shards of the replica that came or went (as Argo CD's cluster sharding or Kafka's sticky
assignment: balance without a coordinator).

Exclusivity comes from the Leases, not from agreement: a shard is taken only when it is free,
released, or its holder has not renewed it for the lease duration — measured on this replica's
own clock from when it last saw the lease change (client-go's observed time, immune to clock
skew between replicas). A holder that cannot renew gives the shard up a renew interval before anyone
may take it: no new work on it from then, and its running reconciles are cancelled as soon as the
controllers' loop gets to it (the Leases live on a thread of their own); a shard given away because
a new replica should hold it is released only after its running reconciles finished (if that wait
fails, the lease is left to expire and they are cancelled). The new holder reconciles all of the
shard's keys from the start: reconciles are level-based, so whatever events the old holder had not
finished are covered. Before those, it reconciles the keys it heard events and changes about lately
while they were another's (``WorkQueue.add_turned_away``): what changed while a shard had no live
owner waits seconds, not the pass. A killed replica's shards are taken over after the lease duration.
"""

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Set
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from clients import kube, leases
from kit import aio
from reconciler import settings as settings_mod

log = logging.getLogger(__name__)

ROLE_LABEL = "reconciler.kyma-project.io/lease"
GROUP_LABEL = "reconciler.kyma-project.io/group"
SINGLETON_SHARD = 0
_AFTER_EXPIRY = 0.05
"""A round meant for a lease's expiry comes this long after it, so that the lease is seen free."""
_RENEWALS_AT_ONCE = 16
"""Shard renewals sent together: a replica may hold up to 256, and KCP's priority and fairness or the client's
connection pool would queue the rest past their time bound."""
T = TypeVar("T")


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
        self.held: frozenset[int] = frozenset()
        """Written by the lease thread, read on the controllers' loop: replaced, never changed in place."""

    def hold(self, shard: int) -> None:
        self.held = self.held | {shard}

    def drop(self, shard: int) -> None:
        self.held = self.held - {shard}

    def owns(self, runtime: str | None) -> bool:
        """A key about ``runtime``, or (None) a key about no single runtime."""
        return self.among(runtime, self.held)

    def among(self, runtime: str | None, shards: Set[int]) -> bool:
        """Whether a key about ``runtime`` (None: no single runtime) belongs to one of ``shards``."""
        if self.shards is None:
            return True
        return (SINGLETON_SHARD if runtime is None else shard_of(runtime, self.shards)) in shards


Acquired = Callable[[set[int]], None]
"""Shards were acquired: reconcile their keys from the start (``Controller.shards_acquired``)."""
Releasing = Callable[[float | None], Coroutine[Any, Any, None]]
"""Stop working on what is no longer owned: running reconciles get the given seconds (None: as long as they take,
each within its reconcile timeout), then are cancelled."""
Ready = Callable[[], str | None]
"""None when this replica can do its part (caches synced, its durables granted), else why not: only a ready replica
is a member."""

SHARDS_LABEL = "reconciler.kyma-project.io/shards"


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
    """Keeps this replica's member Lease and the shard Leases it should hold; tells the controllers.

    The leases are kept on a thread and event loop of their own, with a KCP client of their own: a controllers'
    loop busy for seconds (a relist of thousands of objects, a burst of reconciles) delays work, not the renewals
    that keep this replica's shards — on one loop, at 10,000 runtimes, every shard was given up and re-acquired
    over and over. The controllers' loop only mirrors readiness to the thread and hears from it.
    """

    def __init__(
        self,
        kcp: kube.ApiClient,
        config: settings_mod.ShardingSettings,
        *,
        identity: str,
        ownership: Ownership,
        registry: CollectorRegistry,
        acquired: Acquired,
        releasing: Releasing,
        ready: Ready = lambda: None,
    ) -> None:
        assert ownership.shards == config.shards
        self._kcp = kcp
        self._config = config
        self.identity = identity
        self._ownership = ownership
        self._metrics = ShardMetrics(registry)
        self._acquired = acquired
        self._releasing = releasing
        self._ready = ready
        self._ready_now = False
        """``ready()`` as last seen on the controllers' loop (it reads that loop's state, so it is called there)."""
        self._keeper: _LeaseKeeper | None = None

    def problem(self) -> str | None:
        """Why this replica cannot hold shards although ready, for ``/readyz``; None when nothing stands in its way.
        Not a part of ``ready``: a replica must keep trying its member Lease to find the problem gone."""
        return None if self._keeper is None else self._keeper.problem()

    async def run(self, *, stop: asyncio.Event) -> None:
        """Until ``stop`` (or cancelled); then every shard is handed over (renewed until its reconciles ended)."""
        controllers = asyncio.get_running_loop()
        leases_loop = asyncio.new_event_loop()
        leaving = asyncio.Event()  # bound to the lease thread's loop, where it is waited for and set
        kept: asyncio.Future[None] = controllers.create_future()

        def keep() -> None:
            outcome: BaseException | None = None
            try:
                with asyncio.Runner(loop_factory=lambda: leases_loop) as runner:
                    runner.run(self._keep(controllers, leaving))
            except BaseException as exc:  # told to the controllers' loop, which raises it from run()
                outcome = exc
            with contextlib.suppress(RuntimeError):  # the controllers' loop is gone: nobody waits any more
                controllers.call_soon_threadsafe(_settle, kept, outcome)

        # A daemon: a process whose controllers' loop ended abruptly must still exit (its leases then expire).
        threading.Thread(target=keep, name=f"shard-leases-{self.identity}", daemon=True).start()
        mirror = asyncio.create_task(self._mirror_readiness())
        stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([stopped, kept], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not kept.done():
                with contextlib.suppress(RuntimeError):  # the lease loop closed meanwhile
                    leases_loop.call_soon_threadsafe(leaving.set)
            try:
                await kept
            finally:
                mirror.cancel()

    async def _mirror_readiness(self) -> None:
        while True:
            why_not = self._ready()
            if (why_not is None) != self._ready_now:
                log.info(
                    "ready to hold shards" if why_not is None else "not ready to hold shards",
                    extra={"identity": self.identity, "why_not": why_not},
                )
            self._ready_now = why_not is None
            await asyncio.sleep(self._config.renew_interval_seconds / 4)

    async def _keep(self, controllers: asyncio.AbstractEventLoop, leaving: asyncio.Event) -> None:
        """On the lease thread, until ``leaving`` is set from the controllers' loop."""

        async def releasing(grace: float | None) -> None:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._releasing(grace), controllers))

        def acquired(gained: set[int]) -> None:
            controllers.call_soon_threadsafe(self._acquired, gained)

        async with kube.client_like(self._kcp) as api:
            keeper = _LeaseKeeper(
                api,
                self._config,
                identity=self.identity,
                ownership=self._ownership,
                metrics=self._metrics,
                acquired=acquired,
                releasing=releasing,
                ready=lambda: self._ready_now,
            )
            self._keeper = keeper
            await keeper.run(stop=leaving)


def _settle(future: "asyncio.Future[None]", outcome: BaseException | None) -> None:
    if future.done():
        return
    if outcome is None:
        future.set_result(None)
    else:
        future.set_exception(outcome)


class _LeaseKeeper:
    """The leases, on the loop it runs on. Renewing never waits for anything else: a shard being handed over stays
    held (and renewed) until its running reconciles finished, and a watchdog, not the renewal loop, gives up shards
    whose renewal is late."""

    def __init__(
        self,
        api: kube.ApiClient,
        config: settings_mod.ShardingSettings,
        *,
        identity: str,
        ownership: Ownership,
        metrics: ShardMetrics,
        acquired: Acquired,
        releasing: Releasing,
        ready: Callable[[], bool],
    ) -> None:
        self._api = api
        self._config = config
        self.identity = identity
        self._ownership = ownership
        self._acquired = acquired
        self._releasing = releasing
        self._ready = ready
        self._metrics = metrics
        labels = {GROUP_LABEL: config.lease_prefix, SHARDS_LABEL: str(config.shards)}
        self._member = self._lease(f"{config.lease_prefix}-member-{identity}", {**labels, ROLE_LABEL: "member"})
        self._shard_leases = [
            self._lease(f"{config.lease_prefix}-shard-{shard}", {**labels, ROLE_LABEL: "shard"})
            for shard in range(config.shards)
        ]
        self._renewed: dict[int, float] = {}
        """Held shards (draining ones too): when their last successful renewal was sent (our clock)."""
        self._draining: dict[int, asyncio.Task[None]] = {}
        self._observer = leases.Observer()
        self._cancelling: set[asyncio.Task[None]] = set()
        self._next_free_at: float | None = None
        """When (``time.monotonic``, the observer's clock) the first lease of another's, or of an earlier process,
        falls free as the last round saw it, unless renewed meanwhile: the next round comes then if sooner."""

    def problem(self) -> str | None:
        """Why no Lease can be created, as the last attempt found (read from the controllers' thread: one flag).
        The member Lease's, since it is tried every round while the replica is able: a shard Lease is tried again
        only while this replica should hold it, so its flag could outlive the problem."""
        if self._member.namespace_missing:
            return (
                f"no Lease can be created in namespace {self._config.namespace} (sharding.namespace):"
                " it does not exist, or the apiserver serves no Leases there"
            )
        return None

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
        """Until ``stop``; then hand every shard over (renewing until their reconciles ended) and leave."""
        watchdog = asyncio.create_task(self._watch_deadlines(stop))
        try:
            while not stop.is_set():
                await self._tick()
                await aio.sleep_unless(stop, self._pause())
            self._drain(sorted(set(self._renewed) - set(self._draining)))
            while self._draining:
                await self._tick(leaving=True)
                await asyncio.sleep(self._config.renew_interval_seconds)
        finally:
            watchdog.cancel()
            for task in self._draining.values():
                task.cancel()
            await asyncio.gather(watchdog, *self._draining.values(), return_exceptions=True)
            await self._bounded(self._member.release(), None)

    def _pause(self) -> float:
        """Until the next round: a renew interval, or less where a lease falls free sooner. A killed replica's
        shards are taken as soon as their leases expire, not up to a renew interval later (measured at 10,000
        runtimes: 15.2 s from the kill to the last shard taken, with a 10 s lease)."""
        if self._next_free_at is None:
            return self._config.renew_interval_seconds
        return min(self._config.renew_interval_seconds, max(self._next_free_at - time.monotonic(), 0.0) + _AFTER_EXPIRY)

    async def _bounded(self, call: Awaitable[T], failed: T) -> T:
        """A Lease request may take a renew interval at most: a hung one must not hold up the others."""
        try:
            async with asyncio.timeout(self._config.renew_interval_seconds):
                return await call
        except TimeoutError:
            log.warning("lease request timed out", extra={"identity": self.identity})
            return failed

    async def _tick(self, *, leaving: bool = False) -> None:
        self._next_free_at = None
        listed = await self._bounded(self._list(), None)
        if listed is None:
            return  # the watchdog gives shards up if this lasts
        holders = {name: self._observer.holder(lease) for name, lease in listed.items()}
        renewing = {self._member.name} | {self._shard_leases[shard].name for shard in self._renewed}
        expiries = [
            expires_in
            for name, lease in listed.items()
            if name not in renewing
            and holders[name] is not None  # held as of just now: one expiring since is looked at again at once
            and (expires_in := self._observer.expires_in(lease)) is not None
        ]
        self._next_free_at = time.monotonic() + max(min(expiries), 0.0) if expiries else None
        for shard in sorted(self._renewed):  # taken over meanwhile: ours no longer, whatever placement says
            holder = (listed.get(self._shard_leases[shard].name) or {}).get("spec", {}).get("holderIdentity")
            if holder != self.identity:
                log.warning("shard held by another replica", extra={"shard": shard, "holder": holder})
                self._lose([shard])
        members = self._members(listed, holders)
        able = not leaving and self._ready() and members is not None
        if able:
            await self._bounded(self._member.take(listed.get(self._member.name)), False)
        elif self._member.name in listed and holders[self._member.name] == self.identity:
            await self._bounded(self._member.release(), None)
        desired = placement(self._config.shards, members or set()) if able else {}
        self._drain([s for s in sorted(self._renewed) if desired.get(s) != self.identity and s not in self._draining])
        # At once, up to _RENEWALS_AT_ONCE: one after another, on a slow KCP a round grew by a request per shard,
        # and a peer saw each renewal that much later.
        at_once = asyncio.Semaphore(_RENEWALS_AT_ONCE)
        await asyncio.gather(
            *(
                self._renew(shard, listed.get(self._shard_leases[shard].name), at_once)
                for shard in sorted(self._renewed)
            )
        )
        gained = set()
        for shard, lease in enumerate(self._shard_leases):
            current = listed.get(lease.name)
            if shard in self._renewed or desired.get(shard) != self.identity:
                continue
            if current is not None and holders[lease.name] is not None:
                continue  # held (even under our name: a previous process of it, until it expires)
            sent = asyncio.get_running_loop().time()
            if await self._bounded(lease.take(current), False):
                log.info("shard acquired", extra={"shard": shard, "identity": self.identity})
                self._renewed[shard] = sent
                self._ownership.hold(shard)
                self._metrics.handovers.labels("acquired").inc()
                gained.add(shard)
        self._metrics.held.set(len(self._renewed))
        if gained:
            self._acquired(gained)

    async def _renew(self, shard: int, current: dict[str, Any] | None, at_once: asyncio.Semaphore) -> None:
        sent = asyncio.get_running_loop().time()  # before the write: the earliest a peer may time us from
        async with at_once:  # bounded once sent, not while waiting its turn
            renewed = await self._bounded(self._shard_leases[shard].take(current), False)
        # Given up meanwhile (handed over, lost): a late answer must not make it held again.
        if renewed and shard in self._renewed:
            self._renewed[shard] = max(self._renewed[shard], sent)

    def _members(self, listed: dict[str, dict[str, Any]], holders: dict[str, str | None]) -> set[str] | None:
        """The live members and this replica; None while a live member counts shards differently (a rolling
        update changing ``shards``: a runtime would have an owner under each count, so nobody takes any)."""
        members = {self.identity}
        for name, lease in listed.items():
            labels = lease["metadata"].get("labels") or {}
            holder = holders[name]
            if labels.get(ROLE_LABEL) != "member" or holder is None:
                continue
            if labels.get(SHARDS_LABEL) != str(self._config.shards):
                log.error(
                    "a live replica counts shards differently: holding none until all agree",
                    extra={"replica": holder, "its_shards": labels.get(SHARDS_LABEL), "ours": self._config.shards},
                )
                return None
            members.add(holder)
        self._metrics.members.set(len(members))
        return members

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

    async def _watch_deadlines(self, stop: asyncio.Event) -> None:
        """Shards not renewed for nearly a lease duration are given up at once, before anyone may take them."""
        deadline = self._config.lease_duration_seconds - self._config.renew_interval_seconds
        while True:
            await asyncio.sleep(self._config.renew_interval_seconds / 4)
            now = asyncio.get_running_loop().time()
            late = [shard for shard, renewed in self._renewed.items() if now - renewed > deadline]
            if late:
                log.warning("shard leases not renewed in time, giving them up", extra={"shards": late})
                self._lose(late)

    def _lose(self, shards: list[int]) -> None:
        """Shards another replica may hold already: their running reconciles are cancelled now, nothing released."""
        for shard in shards:
            self._ownership.drop(shard)
            self._renewed.pop(shard, None)
            draining = self._draining.pop(shard, None)
            if draining is not None:
                draining.cancel()
            self._metrics.handovers.labels("lost").inc()
        self._metrics.held.set(len(self._renewed))
        # Not waited for: a busy controllers' loop must not hold up the renewals of the other shards.
        cancelling = asyncio.create_task(self._releasing(0))
        self._cancelling.add(cancelling)
        cancelling.add_done_callback(self._cancelling.discard)

    def _drain(self, shards: list[int]) -> None:
        """Hand shards over: no new work on them now; their leases are released (and renewed until then) once
        their running reconciles have ended."""
        for shard in shards:
            self._ownership.drop(shard)
            self._draining[shard] = asyncio.create_task(self._release_when_drained(shard))

    async def _release_when_drained(self, shard: int) -> None:
        try:
            await self._releasing(None)
        except Exception:
            # Whether its reconciles ended is unknown: not released, no longer renewed — it expires, and whatever
            # still runs on it is cancelled now, as for a lost shard (its new holder may start within a lease).
            log.exception("shard hand-over failed; the lease is left to expire", extra={"shard": shard})
            self._renewed.pop(shard, None)
            try:
                await self._releasing(0)
            except Exception:
                log.exception("cancelling the reconciles of a shard handed over failed", extra={"shard": shard})
        else:
            if self._renewed.pop(shard, None) is not None:
                await self._bounded(self._shard_leases[shard].release(), None)
                self._metrics.handovers.labels("released").inc()
                log.info("shard handed over", extra={"shard": shard, "identity": self.identity})
        finally:
            self._draining.pop(shard, None)
            self._metrics.held.set(len(self._renewed))
