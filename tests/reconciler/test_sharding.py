"""Reconciler replicas sharing the runtimes: rendezvous placement (pure), and real replicas killed mid-run."""

import asyncio
import collections
import contextlib
import datetime
import functools
import hashlib
import json
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from clients import kube, leases
from contract import events, ids
from devenv import landscape as landscape_mod
from devenv import net, process
from reconciler import manager, per_runtime, settings, sharding, workqueue
from reconciler.shared import Shared

from ..waiting import eventually
from .conftest import Kcp, delete_durables

SHARDS = 8


def test_every_shard_has_one_holder_and_a_membership_change_moves_only_the_shards_it_must() -> None:
    """Rendezvous placement: all replicas compute the same answer; a replica leaving hands over only its own
    shards, a replica joining takes only shards (none move between the others)."""
    three = sharding.placement(64, ["r0", "r1", "r2"])
    assert three == sharding.placement(64, ["r2", "r0", "r1", "r0"])
    assert set(three.values()) == {"r0", "r1", "r2"} and len(three) == 64
    two = sharding.placement(64, ["r0", "r2"])
    assert {s for s in three if three[s] != two[s]} == {s for s in three if three[s] == "r1"}
    four = sharding.placement(64, ["r0", "r1", "r2", "r3"])
    assert all(four[s] in (three[s], "r3") for s in three) and "r3" in four.values()
    assert sharding.placement(4, []) == {}


def test_a_runtime_keeps_its_shard_across_processes_and_versions() -> None:
    """A changed hash would move every runtime at once during a rolling upgrade (two owners each)."""
    assert sharding.shard_of("skr-1", 16) == int.from_bytes(hashlib.sha256(b"skr-1").digest()[:8]) % 16
    ownership = sharding.Ownership(16)
    assert not ownership.owns("skr-1") and not ownership.owns(None)
    ownership.hold(sharding.shard_of("skr-1", 16))
    assert ownership.owns("skr-1") and ownership.owns(None) == (sharding.SINGLETON_SHARD in ownership.held)
    assert sharding.Ownership().owns("anything") and sharding.Ownership().owns(None)


def _scrape(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://{net.LOOPBACK}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{net.LOOPBACK}:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def _replicas(configs: dict[str, Path], kubeconfig: Path, workdir: Path) -> Iterator[dict[str, process.ManagedProcess]]:
    running = {
        identity: process.ManagedProcess(
            name=identity,
            argv=[sys.executable, "-m", "reconciler.cli", "--config", str(path), "--kcp-kubeconfig", str(kubeconfig)],
            log_path=workdir / f"{identity}.log",
        )
        for identity, path in configs.items()
    }
    try:
        yield running
    finally:
        for replica in running.values():
            replica.stop()


@contextlib.asynccontextmanager
async def _sampling(kcp: Kcp, name: str) -> AsyncIterator[list[str]]:
    """Every 0.1 s, the synced ConfigMap in every runtime: any absence or new uid (deleted, recreated) is noted."""
    anomalies: list[str] = []
    uids = {runtime: (await _configmap(kcp, runtime, name))["metadata"]["uid"] for runtime in kcp.skrs}

    async def sample() -> None:
        while True:
            for runtime, uid in uids.items():
                found = await kcp.configmap_in(runtime, name)
                if found is None or found["metadata"]["uid"] != uid:
                    anomalies.append(f"{runtime}: {'absent' if found is None else 'recreated'}")
            await asyncio.sleep(0.1)

    sampling = asyncio.create_task(sample())
    try:
        yield anomalies
    finally:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling


async def _configmap(kcp: Kcp, runtime: str, name: str) -> dict[str, Any]:
    found = await kcp.configmap_in(runtime, name)
    assert found is not None, f"{name} in {runtime}"
    return found


async def _holder(kcp: Kcp, prefix: str, shard: int) -> str | None:
    lease = await kube.get_or_none(kcp.api, leases.LEASES.object_path(kcp.namespace, f"{prefix}-shard-{shard}"))
    spec = (lease or {}).get("spec") or {}
    renewed = spec.get("renewTime")
    live = renewed and datetime.datetime.fromisoformat(renewed).timestamp() + spec["leaseDurationSeconds"] > time.time()
    return str(spec["holderIdentity"]) if spec.get("holderIdentity") and live else None  # one clock here: wall time


@pytest.mark.integration
async def test_replicas_share_the_runtimes_and_a_killed_one_is_taken_over_without_double_work(
    landscape: landscape_mod.Landscape, kcp: Kcp, pipeline: Callable[..., Any], tmp_path: Path
) -> None:
    """Three real replicas (processes) hold all shards between them. The one holding the singleton shard (passes
    over every runtime) is killed (SIGKILL: nothing released); a change made right then is applied by the replica
    taking shard 0 over; a drift event reaches it through its own durable. A SyncResource for one runtime is then
    reconciled by that runtime's owner alone. The synced ConfigMap is sampled throughout:
    never absent, never recreated."""
    prefix, durables = f"t{uuid.uuid4().hex[:6]}", f"test-{uuid.uuid4().hex[:6]}"
    ports = {identity: net.free_port() for identity in ("r0", "r1", "r2")}
    configs = {}
    for identity, port in ports.items():
        configs[identity] = tmp_path / f"{identity}.yaml"
        configs[identity].write_text(
            yaml.safe_dump(
                {
                    "management_port": port,
                    "shutdown_grace_seconds": 2,
                    "nats": {
                        "servers": [landscape.nats.url],
                        "credentials": json.loads(landscape.nats.credentials().model_dump_json()),
                        "durable_prefix": durables,
                    },
                    "sharding": {
                        "enabled": True,
                        "identity": identity,
                        "shards": SHARDS,
                        "namespace": kcp.namespace,
                        "lease_prefix": prefix,
                    },
                    "sync_resources": {"enabled": True, "namespace": kcp.namespace, "resync_seconds": 3600},
                    "module_templates": {"enabled": False},
                    "kyma": {"enabled": False},
                }
            )
        )
    item = kcp.configmap("shared", {"k": "v1"})
    try:
        with _replicas(configs, landscape.kcp.admin_kubeconfig_path, tmp_path) as replicas:

            async def start(identity: str) -> None:
                replicas[identity].start()
                await asyncio.to_thread(
                    replicas[identity].wait_ready, functools.partial(_ready, ports[identity]), timeout=60
                )

            def held(identities: list[str]) -> float:
                return sum(_scrape(ports[i], "kyma_reconciler_shards_held") for i in identities)

            await asyncio.gather(start("r0"), start("r1"))
            await eventually(lambda: held(["r0", "r1"]) == SHARDS, timeout=30, what="two replicas hold every shard")
            await start("r2")  # joins: the others hand it its shards
            placed_on_three = collections.Counter(sharding.placement(SHARDS, list(ports)).values())
            await eventually(  # each holding exactly its own: no hand-over under way when shard 0's holder is read
                lambda: all(held([i]) == placed_on_three[i] for i in ports), timeout=30, what="shards handed to r2"
            )
            await kcp.create("shared", {"target": {"selector": {}}, "items": [item]})
            await eventually(lambda: _state_is(kcp, "shared", "Ready"), timeout=30, what="synced")
            async with _sampling(kcp, "shared") as anomalies:
                victim = await _holder(kcp, prefix, sharding.SINGLETON_SHARD)
                assert victim in replicas
                await asyncio.to_thread(replicas[victim].kill)
                killed_at = asyncio.get_running_loop().time()
                await kcp.patch_spec("shared", {"items": [kcp.configmap("shared", {"k": "v2"})]})
                survivors = [i for i in replicas if i != victim]
                await eventually(lambda: _taken_over(kcp, prefix, survivors), timeout=60, what="shard 0 taken over")
                took_over = asyncio.get_running_loop().time() - killed_at
                await eventually(lambda: _everywhere(kcp, "shared", "v2"), timeout=60, what="the change applied")
                applied = asyncio.get_running_loop().time() - killed_at
                await eventually(lambda: held(survivors) == SHARDS, timeout=30, what="the survivors hold every shard")
                placed = sharding.placement(SHARDS, survivors)
                owner = placed[sharding.shard_of("skr-1", SHARDS)]
                assert owner != placed[sharding.SINGLETON_SHARD], "the identities are chosen so that these differ"
                async with pipeline(_synced_configmaps(kcp), ["kyma-sync"]):
                    await kube.request(
                        kcp.skrs["skr-1"],
                        "PATCH",
                        f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps/shared",
                        body={"data": {"k": "drifted"}},
                        query=[("fieldManager", "kubectl")],
                        content_type="application/merge-patch+json",
                    )
                    await eventually(lambda: _everywhere(kcp, "shared", "v2"), timeout=30, what="the drift reset")
                # A SyncResource for skr-1 alone is wholly skr-1's owner's, not the singleton shard holder's.
                singleton = placed[sharding.SINGLETON_SHARD]
                before = {
                    i: _scrape(ports[i], "kyma_reconciler_reconciles_total", controller="sync_resources")
                    for i in survivors
                }
                await kcp.create("single", {"kyma": "skr-1", "items": [kcp.configmap("single", {"k": "v"})]})
                await eventually(lambda: _state_is(kcp, "single", "Ready"), timeout=30, what="single synced")
                after = {
                    i: _scrape(ports[i], "kyma_reconciler_reconciles_total", controller="sync_resources")
                    for i in survivors
                }
                assert after[owner] > before[owner] and after[singleton] == before[singleton]
            print(
                f"shard 0 taken over {took_over:.1f}s after the kill; the change made then applied after {applied:.1f}s"
            )
            assert anomalies == [], "the synced objects were never deleted nor recreated"
    finally:
        await delete_durables(landscape, prefix=durables)


async def _state_is(kcp: Kcp, name: str, state: str) -> bool:
    return await kcp.state(name) == state


async def _taken_over(kcp: Kcp, prefix: str, survivors: list[str]) -> bool:
    return await _holder(kcp, prefix, sharding.SINGLETON_SHARD) in survivors


async def _everywhere(kcp: Kcp, name: str, value: str) -> bool:
    for runtime in kcp.skrs:
        found = await kcp.configmap_in(runtime, name)
        if found is None or (found.get("data") or {}).get("k") != value:
            return False
    return True


def _synced_configmaps(kcp: Kcp) -> list[dict[str, Any]]:
    return [
        {
            "version": "v1",
            "resource": "configmaps",
            "namespaces": [kcp.runtime_namespace],
            "label_selector": "kyma-project.io/synced-by=kyma-sync",
            "module": "kyma-sync",
        }
    ]


def _sharding(kcp: Kcp, *, lease: float, renew: float) -> settings.ShardingSettings:
    """Short leases in a prefix of the test's own: in-process replicas, no other test's leases in sight."""
    return settings.ShardingSettings(
        enabled=True,
        shards=SHARDS,
        namespace=kcp.namespace,
        lease_prefix=f"p{uuid.uuid4().hex[:6]}",
        lease_duration_seconds=lease,
        renew_interval_seconds=renew,
    )


class FreezableProxy:
    """A TCP relay to KCP that can stop passing bytes: a replica cut off from KCP, its requests hanging."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._connecting: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, net.LOOPBACK, 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        connecting = asyncio.current_task()
        assert connecting is not None
        self._connecting.add(connecting)  # a replica's lease thread may still connect while the proxy stops
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        finally:
            self._connecting.discard(connecting)
        self._writers.append(up_writer)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await source.read(65536):
                    await self.flowing.wait()
                    sink.write(data)
                    await sink.drain()

        for task in (asyncio.create_task(pipe(reader, up_writer)), asyncio.create_task(pipe(up_reader, writer))):
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def stop(self) -> None:
        """Every relayed connection closed, both ends, before the test's loop ends (no socket left to the GC)."""
        assert self._server is not None
        self._server.close()
        for task in [*self._connecting, *self._pipes]:
            task.cancel()
        await asyncio.gather(*self._connecting, *self._pipes, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        for writer in self._writers:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await self._server.wait_closed()


def _keeper(
    api: kube.ApiClient, config: settings.ShardingSettings, identity: str, ownership: sharding.Ownership
) -> Any:
    """A replica's lease keeping alone, driven round by round (``_tick``) by the test: always ready, nothing to
    hand over."""

    async def releasing(grace: float | None) -> None:
        return None

    return sharding._LeaseKeeper(
        api,
        config,
        identity=identity,
        ownership=ownership,
        metrics=sharding.ShardMetrics(CollectorRegistry()),
        acquired=lambda gained: None,
        releasing=releasing,
        ready=lambda: True,
    )


@contextlib.asynccontextmanager
async def _replica(
    api: kube.ApiClient,
    config: Any,
    identity: str,
    overlaps: list[str],
    others: list[sharding.Ownership],
    registry: CollectorRegistry | None = None,
    **kw: Any,
) -> AsyncIterator[tuple[sharding.Ownership, "asyncio.Task[None]"]]:
    """A replica's shard keeping alone (the controllers are the manager's business): on every acquisition it
    notes any shard another replica still holds — the overlap that must never happen."""
    ownership = sharding.Ownership(config.shards)

    def acquired(gained: set[int]) -> None:
        overlaps.extend(
            f"{identity} took {s} still held elsewhere" for o in others if o is not ownership for s in gained & o.held
        )

    async def releasing(grace: float | None) -> None:
        return None

    kw.setdefault("releasing", releasing)
    shards = sharding.Shards(
        api,
        config.model_copy(update={"identity": identity}),
        identity=identity,
        ownership=ownership,
        registry=registry or CollectorRegistry(),
        acquired=acquired,
        **kw,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(shards.run(stop=stop))
    others.append(ownership)
    try:
        yield ownership, task
    finally:
        stop.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(task, 20)


@pytest.mark.integration
async def test_a_holder_cut_off_from_kcp_gives_its_shards_up_before_another_takes_them(
    landscape: landscape_mod.Landscape, kcp: Kcp
) -> None:
    """Replica a reaches KCP through a relay that then stops passing bytes (its requests hang, nothing fails
    fast); b takes every shard over, and never one a still holds. A replica that is not ready holds nothing
    until it is. Back in touch, a is handed shards again, again never one b still holds."""
    config = _sharding(kcp, lease=4, renew=1)
    kubeconfig = landscape.kcp.admin_kubeconfig()
    server = urllib.parse.urlsplit(kubeconfig["clusters"][0]["cluster"]["server"])
    proxy = FreezableProxy((server.hostname or net.LOOPBACK, server.port or 443))
    port = await proxy.start()
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://{net.LOOPBACK}:{port}"
    overlaps: list[str] = []
    owners: list[sharding.Ownership] = []
    ready = False
    try:
        async with (
            await kube.api_client(kubeconfig) as relayed,
            _replica(relayed, config, "a", overlaps, owners) as (a, _),
            _replica(kcp.api, config, "b", overlaps, owners) as (b, _),
            _replica(kcp.api, config, "c", overlaps, owners, ready=lambda: None if ready else "not yet") as (c, _),
        ):
            await eventually(lambda: len(a.held) + len(b.held) == SHARDS and bool(a.held and b.held), what="shared")
            assert not c.held, "an unready replica holds nothing"
            proxy.flowing.clear()
            cut_at = asyncio.get_running_loop().time()
            await eventually(lambda: len(b.held) == SHARDS, timeout=30, what="b holding every shard")
            print(f"b held every shard {asyncio.get_running_loop().time() - cut_at:.1f}s after a was cut off")
            assert not a.held
            proxy.flowing.set()
            ready = True
            await eventually(lambda: bool(a.held and c.held), timeout=30, what="a back, c ready: both handed shards")
            await eventually(lambda: len(a.held) + len(b.held) + len(c.held) == SHARDS, what="each shard once")
    finally:
        proxy.flowing.set()
        await proxy.stop()
    assert overlaps == []


@pytest.mark.integration
async def test_a_hand_over_that_fails_cancels_the_reconciles_of_the_shards_it_gives_up(
    landscape: landscape_mod.Landscape, kcp: Kcp
) -> None:
    """a holds every shard; b joins, so a hands b's shards over, waiting for their reconciles, and that wait fails
    (its controllers' loop gone, say): the leases are left to expire, and the reconciles still running on those
    shards are cancelled at once, not left to run on while b takes the shards."""
    config = _sharding(kcp, lease=3, renew=0.5)
    overlaps: list[str] = []
    owners: list[sharding.Ownership] = []
    asked: list[float | None] = []

    async def releasing(grace: float | None) -> None:
        asked.append(grace)
        if grace is None:
            raise RuntimeError("the controllers' loop is gone")

    async with _replica(kcp.api, config, "a", overlaps, owners, releasing=releasing) as (a, _):
        await eventually(lambda: len(a.held) == SHARDS, timeout=30, what="a holding every shard")
        async with _replica(kcp.api, config, "b", overlaps, owners) as (b, _):
            await eventually(lambda: bool(b.held), timeout=30, what="b handed shards")
            assert None in asked, "a tried to hand its shards over"
            assert 0 in asked, "and, failing, cancelled their reconciles"
    assert overlaps == []


@pytest.mark.integration
async def test_a_replica_whose_loop_is_busy_for_longer_than_a_lease_keeps_its_shards(
    landscape: landscape_mod.Landscape, kcp: Kcp
) -> None:
    """The controllers' loop blocked for twice the lease duration (at 10,000 runtimes a relist or a burst of
    reconciles did that): the shard leases are renewed meanwhile from their own thread, so no replica gives a
    shard up or takes another's — the work waits, the membership does not."""
    config = _sharding(kcp, lease=3, renew=0.5)
    overlaps: list[str] = []
    owners: list[sharding.Ownership] = []
    registries = [CollectorRegistry(), CollectorRegistry()]
    async with (
        _replica(kcp.api, config, "a", overlaps, owners, registries[0]) as (a, _),
        _replica(kcp.api, config, "b", overlaps, owners, registries[1]) as (b, _),
    ):
        placed = sharding.placement(SHARDS, ["a", "b"])
        before = tuple(frozenset(s for s, holder in placed.items() if holder == name) for name in "ab")
        await eventually(lambda: (a.held, b.held) == before, timeout=30, what="each holding its placed shards")
        time.sleep(config.lease_duration_seconds * 2)  # noqa: ASYNC251 -- the busy loop is the point
        await asyncio.sleep(config.renew_interval_seconds * 2)  # a watchdog that saw its renewals late fires now
        lost = [r.get_sample_value("kyma_reconciler_shard_handovers_total", {"how": "lost"}) or 0 for r in registries]
        assert lost == [0, 0], "no shard given up for late renewals"
        assert (a.held, b.held) == before
    assert overlaps == []


@pytest.mark.integration
async def test_a_replica_restarted_under_its_name_waits_out_the_leases_of_its_previous_process(
    landscape: landscape_mod.Landscape, kcp: Kcp
) -> None:
    """A pod replaced under the same name (a StatefulSet) while its predecessor may still be finishing a reconcile:
    a shard Lease held under that name is not simply taken as "ours" — it is waited out like any other."""
    config = _sharding(kcp, lease=3, renew=0.5)
    predecessor = leases.Lease(
        kcp.api,
        kcp.namespace,
        f"{config.lease_prefix}-shard-{sharding.SINGLETON_SHARD}",
        identity="a",
        duration_seconds=config.lease_duration_seconds,
        labels={sharding.GROUP_LABEL: config.lease_prefix, sharding.SHARDS_LABEL: str(SHARDS)},
    )
    assert await predecessor.try_acquire()
    overlaps: list[str] = []
    async with _replica(kcp.api, config, "a", overlaps, []) as (a, _):
        started = asyncio.get_running_loop().time()
        await eventually(lambda: len(a.held) == SHARDS - 1, timeout=30, what="every shard but the predecessor's")
        assert sharding.SINGLETON_SHARD not in a.held
        await eventually(lambda: sharding.SINGLETON_SHARD in a.held, timeout=30, what="the predecessor's shard")
        waited = asyncio.get_running_loop().time() - started
        assert waited >= config.lease_duration_seconds, "held only once unchanged for the lease duration"


class _Recording(per_runtime.RuntimeKeyed):
    """A controller whose reconcile only notes its key: what a replica runs, in which order."""

    def __init__(self, shared: Shared, runtimes: list[str]) -> None:
        super().__init__(shared, settings.ControllerSettings(workers=1), name="recording")
        self.modules = frozenset({"kyma-sync"})
        self.runtimes = [ids.RuntimeId(r) for r in runtimes]
        self.runs: list[str] = []

    def all_keys(self) -> list[ids.RuntimeId]:
        return self.runtimes

    def keys_for_event(self, event: events.ChangeEvent) -> list[ids.RuntimeId]:
        return [ids.RuntimeId(event.runtime)]

    async def reconcile(self, key: ids.RuntimeId) -> workqueue.Result:
        self.runs.append(key)
        await asyncio.sleep(0.001)
        return workqueue.Result()


def _drift_event(runtime: str) -> events.ChangeEvent:
    return events.ChangeEvent.create(
        runtime=ids.runtime_id(runtime),
        module=ids.module_name("kyma-sync"),
        target=events.WatchedObject(
            group="", version="v1", resource="configmaps", kind="ConfigMap", namespace="ns", name="cm", uid="u1"
        ),
        resource_version="1",
        change_type=events.ChangeType.MODIFIED,
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}},
        observed_at=datetime.datetime.now(datetime.UTC),
    )


@pytest.mark.integration
async def test_a_replica_taking_a_shard_over_first_reconciles_what_it_heard_of_while_the_shard_had_no_owner(
    kcp_api: kube.ApiClient,
) -> None:
    """Every replica hears every watcher event and acks those of runtimes it does not own. An event about a
    runtime of a killed replica, heard before its shard was taken over, is reconciled first once it is: not after
    the pass over all the shard's runtimes (at 10,000 runtimes that pass took minutes, and the fault window's
    p99 with it: 229 s)."""
    config = settings.ReconcilerSettings(sharding=settings.ShardingSettings(enabled=True, identity="r0", shards=SHARDS))
    shared = Shared.build(kcp_api, config, CollectorRegistry())
    shard = sharding.shard_of("rt-0", SHARDS)
    in_shard = [r for n in range(1, 400) if sharding.shard_of(r := f"rt-{n}", SHARDS) == shard]
    recording = _Recording(shared, [*in_shard, "rt-0"])  # the pass comes to rt-0 last
    manager_ = manager.Manager(shared, [recording])
    stop = asyncio.Event()
    running = asyncio.create_task(recording.queue.run(stop=stop))
    try:
        await asyncio.sleep(0)
        assert await manager_.dispatch(_drift_event("rt-0")) is None, "not ours yet: acked, left to its owner"
        assert recording.runs == []
        shared.ownership.hold(shard)
        recording.shards_acquired({shard})
        await eventually(lambda: len(recording.runs) == len(in_shard) + 1, timeout=30, what="the shard's pass")
        assert recording.runs[0] == "rt-0"
        assert sorted(recording.runs[1:]) == sorted(in_shard)
    finally:
        stop.set()
        await running


@pytest.mark.integration
async def test_a_lease_is_looked_at_again_when_it_falls_free_not_a_renew_interval_later(kcp: Kcp) -> None:
    """A shard lease its holder stopped renewing (killed) is taken in the round right after it expires: that round
    is brought forward from the renew interval. Here the holder's lease lasts 1 s and rounds come every 4 s: the
    round after the first is due within a second and a bit, and takes the shard. (At 10,000 runtimes, 15.2 s
    passed from a kill to the last shard taken, with 10 s leases and 2 s rounds.)"""
    config = _sharding(kcp, lease=10, renew=4).model_copy(update={"identity": "a"})
    labels = {
        sharding.GROUP_LABEL: config.lease_prefix,
        sharding.SHARDS_LABEL: str(SHARDS),
        sharding.ROLE_LABEL: "shard",
    }
    ghost = leases.Lease(
        kcp.api, kcp.namespace, f"{config.lease_prefix}-shard-3", identity="ghost", duration_seconds=1, labels=labels
    )
    assert await ghost.take(None)
    ownership = sharding.Ownership(SHARDS)
    keeper = _keeper(kcp.api, config, "a", ownership)
    await keeper._tick()
    assert ownership.held == frozenset(range(SHARDS)) - {3}, "every shard but the one still held"
    pause = keeper._pause()
    assert pause < config.renew_interval_seconds, "the next round waits for the lease, not the interval"
    await asyncio.sleep(pause)
    await keeper._tick()
    assert 3 in ownership.held
    assert keeper._pause() == config.renew_interval_seconds, "nothing of anyone else's left to wait for"


@pytest.mark.integration
async def test_replicas_whose_lease_namespace_does_not_exist_are_not_ready_and_say_why(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Replicas started with a sharding namespace that does not exist held nothing and reported ready (found
    writing bench/takeover.py): /readyz now names the namespace. They keep trying their member Leases meanwhile, so
    once the namespace is created they share the shards and are ready, without a restart — each having tried every
    shard Lease while it saw itself alone, including those the other holds now."""
    missing = f"leases-{uuid.uuid4().hex[:6]}"
    prefix = f"p{uuid.uuid4().hex[:6]}"

    def config(identity: str) -> dict[str, Any]:
        return {
            "enabled": True,
            "identity": identity,
            "shards": SHARDS,
            "namespace": missing,
            "lease_prefix": prefix,
            "lease_duration_seconds": 3,
            "renew_interval_seconds": 0.5,
        }

    async with run_controller(sharding=config("a")) as a, run_controller(sharding=config("b")) as b:
        await eventually(
            lambda: all(f"namespace {missing}" in (r.readiness() or "") for r in (a, b)), what="the namespace named"
        )
        await kube.ensure_namespace(kcp.api, missing)
        await eventually(lambda: a.readiness() is None and b.readiness() is None, what="ready once it exists")
        await eventually(
            lambda: (
                len(a.shared.ownership.held | b.shared.ownership.held) == SHARDS
                and not a.shared.ownership.held & b.shared.ownership.held
                and bool(a.shared.ownership.held)
                and bool(b.shared.ownership.held)
            ),
            what="the shards shared",
        )


@pytest.mark.integration
async def test_a_missing_lease_namespace_stops_being_reported_once_the_member_lease_is_written(kcp: Kcp) -> None:
    """While the namespace is missing a replica that sees itself alone tries every shard Lease, and each fails as
    its member Lease does. Once the namespace exists another replica may take those shards first; this one never
    tries them again, yet its problem is over as soon as its member Lease is written."""
    config = _sharding(kcp, lease=3, renew=0.5).model_copy(update={"namespace": f"leases-{uuid.uuid4().hex[:6]}"})
    a_owns, b_owns = sharding.Ownership(SHARDS), sharding.Ownership(SHARDS)
    a, b = _keeper(kcp.api, config, "a", a_owns), _keeper(kcp.api, config, "b", b_owns)
    await a._tick()
    assert config.namespace in (a.problem() or "")
    await kube.ensure_namespace(kcp.api, config.namespace)
    await b._tick()
    assert b_owns.held == frozenset(range(SHARDS)), "alone, b takes every shard"
    await a._tick()
    assert a.problem() is None
