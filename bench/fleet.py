"""The KCP side at fleet size (10,000 runtimes) on one machine, with a runtime side made cheap.

Runtimes are namespaces on two real SKR apiservers, each with its own Kyma CR and kubeconfig
Secret in KCP and its own client certificate. No watcher runs: this process edits a runtime's
object and posts the change event itself, over mTLS with that runtime's certificate, as its
watcher would (retrying 429/503 as the watcher does). The listener, NATS and the reconciler
replicas (sharded by Leases) are the real processes. Every runtime gets a SyncResource with one
CreateAndSync ConfigMap, and one group SyncResource puts a second ConfigMap into all of them.
Then:

- convergence: until every runtime has both objects;
- steady drift: --drift-rate edits/s for --drift-seconds, each reset timed from the apiserver's
  answer to the edit to the object being back (seen on a watch of the apiservers); an edit the
  apiserver throttles, fails or that times out is tried again (edit_retries), one refused for good
  or not taken within 300 s is listed (edits_failed);
- burst: --burst edits at once, drained (all_edits_made_s: when the last edit was answered);
- ModuleTemplate: a new template in KCP until the reconcilers made a pass for every runtime;
- faults (--kill): during a second steady-drift window one reconciler replica and the listener
  are SIGKILLed (the listener restarted after 3 s): every edit must still be reset, and no
  synced object may be deleted (DELETED events on the watch are counted); shards_taken_over_s is
  when no shard Lease named the killed replica any more (read once a second);
- resources: CPU seconds and RSS of every KCP component, busy and after --idle-seconds of rest
  (idle runtime clients and connections released), with the clients (held, and retired but still
  open) and connections left; and the cores each process (the apiservers, etcd and this load
  generator too) used in each timed window, to tell a saturated machine from a slow component;
  and each replica's SyncResource reconciles a second and their mean wall time in the drift and
  burst windows ("reconciles_until_reset"), to tell queueing (fewer reconciles a second than edits
  offered) from slow reconciles.

Edits are offered at --drift-rate whatever this process's loop latency: what is due is started at
once (a fleet's watchers do not slow down for KCP). How late this process started them
("started_late_p99_s": the task created, its PATCH may wait for a connection) tells whether the
generator kept up; the latencies count from the apiserver's answer to each edit.

    python bench/fleet.py --runtimes 10000 --reconcilers 2 --kill
"""

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import random
import signal
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from scale import edit_configmap, name_of, nats_credentials, register, shard_holders, usage

from clients import informer, kube
from contract import events, ids, wire
from devenv import landscape, net, process, testbin
from devenv import nats as nats_mod
from pki import authority
from reconciler import crds

SYNCED = "kyma-project.io/synced-by=kyma-sync"
EDIT_DEADLINE = 300.0
"""An edit the SKR apiserver has not taken within this long counts as failed (a run must end)."""
GROUP_ITEM = "fleet-wide"


class Runtimes:
    """Each simulated runtime's certificate, as its watcher would hold it: an SSL context per runtime."""

    def __init__(self, directory: Path, ca: authority.Authority, bundle: Path, names: list[str]) -> None:
        self._directory, self._ca, self._bundle = directory, ca, bundle
        self._contexts: dict[str, ssl.SSLContext] = {}
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            pair = ca.issue_runtime(name, lifetime=datetime.timedelta(days=1))
            (directory / f"{name}.crt").write_bytes(pair.cert_pem)
            (directory / f"{name}.key").write_bytes(pair.key_pem)

    def context(self, runtime: str) -> ssl.SSLContext:
        found = self._contexts.get(runtime)
        if found is None:
            found = self._contexts[runtime] = ssl.create_default_context(cafile=str(self._bundle))
            found.load_cert_chain(self._directory / f"{runtime}.crt", self._directory / f"{runtime}.key")
        return found


class CpuMeter:
    """The cores each process used over a window: one that starts in it counts from zero, one killed in it up to
    the last ``keep_figures`` before its kill."""

    def __init__(self, pids: Callable[[], dict[str, int]]) -> None:
        self._pids = pids
        self._start = self._sample()
        self._kept: dict[tuple[str, int], float] = {}

    def keep_figures(self) -> None:
        """Sample now: what a process about to be killed used counts until here."""
        self._kept |= self._sample()[1]

    def _sample(self) -> tuple[float, dict[tuple[str, int], float]]:
        cpu = {}
        for name, pid in self._pids().items():
            try:
                cpu[(name, pid)] = usage(pid)[0]
            except OSError:
                continue
        return time.perf_counter(), cpu

    def cores(self) -> dict[str, float]:
        (began, before), (now, after) = self._start, self._sample()
        after = self._kept | after
        used: dict[str, float] = {}
        for (name, pid), cpu in after.items():
            used[name] = used.get(name, 0.0) + cpu - before.get((name, pid), 0.0)
        return {name: round(seconds / (now - began), 2) for name, seconds in sorted(used.items())}


class ReconcileMeter:
    """What each replica's SyncResource controller did over a window: reconciles a second (every key: a runtime's
    pass, a group's, a status sum), how long one took (wall time, its requests' round trips included) and how many
    failed. Where the reconcilers take fewer a second than edits come, keys wait in their queues and events in their
    NATS consumers: the latency is queueing. A replica killed in the window is left out. Two scrapes a window (a
    scrape renders thousands of series at 10,000)."""

    _LABELS = 'controller="sync_resources"'

    def __init__(self, ports: dict[str, int]) -> None:
        self._ports = ports
        self._start = self._sample()

    def _sample(self) -> tuple[float, dict[str, tuple[float, float, float]]]:
        counts = {
            identity: (
                _summed(text, "kyma_reconciler_reconcile_seconds_count", self._LABELS),
                _summed(text, "kyma_reconciler_reconcile_seconds_sum", self._LABELS),
                _summed(text, "kyma_reconciler_reconciles_total", self._LABELS + ',outcome="error"'),
            )
            for identity, text in _scrape(self._ports).items()
        }
        return time.perf_counter(), counts

    def figures(self) -> dict[str, dict[str, float]]:
        (began, before), (now, after) = self._start, self._sample()
        figures = {}
        for identity in sorted(before.keys() & after.keys()):
            (count_0, seconds_0, failed_0), (count_1, seconds_1, failed_1) = before[identity], after[identity]
            reconciles = count_1 - count_0
            if reconciles < 0:
                continue  # restarted within the window: its counters began again
            figures[identity] = {
                "per_s": round(reconciles / (now - began), 1),
                "mean_s": round((seconds_1 - seconds_0) / reconciles, 3) if reconciles else 0.0,
                "failed": failed_1 - failed_0,
            }
        return figures


@dataclasses.dataclass(eq=False)  # one edit is one entry: found in its object's list by identity
class Edit:
    """One edit of a runtime's object: the value it wrote, when the apiserver answered, when the watch saw it undone.

    Timed from the answer, yet matched on the watch: the watch shows an object's states in order, so the
    edited value is seen before the reset that undoes it, whichever of the answer and the reset this process
    handles first (a reconcile under way for an earlier edit may undo this one before its answer is read).
    A reset seen before the answer counts as 0 s. A relist of the watch (after an error) shows only the
    current state: an edit whose value and reset both fell in that gap stays "not reset"."""

    value: str
    answered: float | None = None
    seen: bool = False
    reset: float | None = None


class Resets:
    """A watch of the synced ConfigMaps on one apiserver: when each edited object is back, and deletions."""

    def __init__(self) -> None:
        self.edited: dict[tuple[str, str], list[Edit]] = {}
        """Edits not reset yet, per object: a reset after several edits of it undoes each (each timed)."""
        self.latencies: list[float] = []
        self.deleted: list[str] = []
        self.edit_retries = 0
        """Edit attempts the SKR apiserver throttled, failed (5xx) or that timed out here, each tried again: the
        runtime side's limit, not KCP's."""
        self.edits_failed: list[str] = []
        """Edits refused for good (the object gone: a deletion the watch counts too) or not taken within
        ``EDIT_DEADLINE``: not made, so not timed."""

    def window(self) -> None:
        """A new timed window: what an earlier one left (counted there as not reset) is not carried over."""
        self.edited.clear()
        self.latencies.clear()
        self.edit_retries = 0
        self.edits_failed = []

    async def listed(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            await self.changed("MODIFIED", item)

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "DELETED":
            self.deleted.append("/".join(key))
            return
        state = (obj.get("data") or {}).get("state")
        for edit in list(self.edited.get(key, ())):
            if state == edit.value:
                edit.seen = True
            elif state == "desired" and edit.seen and edit.reset is None:
                edit.reset = time.perf_counter()
                self._settle(key, edit)

    def made(self, key: tuple[str, str], value: str) -> Edit:
        edit = Edit(value)
        self.edited.setdefault(key, []).append(edit)
        return edit

    def answered(self, key: tuple[str, str], edit: Edit) -> None:
        edit.answered = time.perf_counter()
        self._settle(key, edit)

    def dropped(self, key: tuple[str, str], edit: Edit) -> None:
        self._forget(key, edit)

    @property
    def pending(self) -> int:
        return sum(len(edits) for edits in self.edited.values())

    def _settle(self, key: tuple[str, str], edit: Edit) -> None:
        if edit.answered is None or edit.reset is None:
            return
        self.latencies.append(max(0.0, edit.reset - edit.answered))
        self._forget(key, edit)

    def _forget(self, key: tuple[str, str], edit: Edit) -> None:
        edits = self.edited.get(key, [])
        if edit in edits:
            edits.remove(edit)
        if not edits:
            self.edited.pop(key, None)


async def post_event(
    session: aiohttp.ClientSession, url: str, runtimes: Runtimes, runtime: str, obj: dict[str, Any]
) -> None:
    """What the runtime's watcher does for an edit it saw: post it until the listener takes it."""
    metadata = obj["metadata"]
    event = events.ChangeEvent.create(
        runtime=ids.runtime_id(runtime),
        module=ids.module_name(wire.SYNC_MODULE),
        target=events.WatchedObject(
            group="",
            version="v1",
            resource="configmaps",
            kind="ConfigMap",
            namespace=metadata["namespace"],
            name=metadata["name"],
            uid=metadata["uid"],
        ),
        resource_version=metadata["resourceVersion"],
        change_type=events.ChangeType.MODIFIED,
        body={k: v for k, v in obj.items() if k != "metadata"}
        | {"metadata": {k: v for k, v in metadata.items() if k != "managedFields"}},
        observed_at=datetime.datetime.now(datetime.UTC),
    )
    body = events.encode(event)
    while True:
        try:
            async with session.post(
                url, data=body, ssl=runtimes.context(runtime), headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
                if response.status == 202:
                    return
                wait = float(response.headers.get("Retry-After", "1"))
        except aiohttp.ClientError:
            wait = 0.5
        await asyncio.sleep(wait)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", type=int, default=1000, help="simulated runtimes (default 1000)")
    parser.add_argument("--reconcilers", type=int, default=2, help="sharded reconciler replicas (default 2)")
    parser.add_argument("--drift-rate", type=float, default=200, help="steady edits per second (default 200)")
    parser.add_argument("--drift-seconds", type=float, default=30, help="steady drift window (default 30)")
    parser.add_argument("--burst", type=int, help="edits at once (default: one per runtime)")
    parser.add_argument("--kill", action="store_true", help="a reconciler and the listener killed in a drift window")
    parser.add_argument(
        "--reconciler-event-loop", choices=("uvloop", "asyncio"), default="uvloop", help="the reconcilers' loop"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=330,
        help="then idle this long before the memory is read (default 330: past a runtime client's idle time, 120 s, "
        "and the listener's keepalive; kept from when a retired client lingered 300 s, so the rows compare)",
    )
    args = parser.parse_args()
    if args.reconcilers > len(nats_mod.RECONCILER_REPLICAS):
        raise SystemExit(f"at most {len(nats_mod.RECONCILER_REPLICAS)} reconcilers (the bus declares that many)")
    work = Path(tempfile.mkdtemp(prefix="kyma-bench-fleet-"))
    print(f"working in {work}", file=sys.stderr)
    binaries = testbin.ensure(directory=testbin.default_cache_root() / testbin.K8S_VERSION)
    running = landscape.start(workdir=work, binaries=binaries, runtimes=("skr-a", "skr-b"))
    procs: dict[str, process.ManagedProcess] = {}
    names = [name_of(n) for n in range(args.runtimes)]
    hosts = {name: ("skr-a", "skr-b")[n % 2] for n, name in enumerate(names)}
    loop = asyncio.get_running_loop()
    # SIGTERM (a timeout, a pipeline's kill) ends the run as Ctrl-C does: the main task is cancelled, so the
    # `finally` below stops the landscape — its processes would go on using the cores the next run measures.
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)

    def pids() -> dict[str, int]:
        found = {name: managed.pid for name, managed in procs.items() if managed.pid}
        for cluster in running.clusters():
            found |= {f"{cluster.name}-{role}": pid for role, pid in cluster.pids().items()}
        if running.nats.pid:
            found["nats-server"] = running.nats.pid
        return found | {"load-generator": os.getpid()}

    def phase(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    try:
        async with await kube.api_client(running.kcp.admin_kubeconfig()) as kcp:
            skrs = {h: await kube.api_client(c.admin_kubeconfig(), connections=64) for h, c in running.runtimes.items()}
            started = time.perf_counter()
            await register(kcp, running, names, hosts)
            gate = asyncio.Semaphore(32)

            async def namespace(name: str) -> None:
                async with gate:
                    await kube.ensure_namespace(skrs[hosts[name]], name)

            await asyncio.gather(*(namespace(name) for name in names))
            phase(f"{len(names)} runtimes registered in {time.perf_counter() - started:.0f}s")
            ca = authority.Authority.create("fleet-ca")
            bundle = work / "bundle.crt"
            bundle.write_bytes(ca.to_files()[authority.BUNDLE])
            serving = ca.issue_server(["127.0.0.1"], lifetime=datetime.timedelta(days=1))
            (work / "srv.crt").write_bytes(serving.cert_pem)
            (work / "srv.key").write_bytes(serving.key_pem)
            runtimes = await asyncio.to_thread(Runtimes, work / "runtimes", ca, bundle, names)
            phase("runtime certificates issued")

            port, listener_management = net.free_port(), net.free_port()
            (work / "listener.yaml").write_text(
                yaml.safe_dump(
                    {
                        "host": "127.0.0.1",
                        "port": port,
                        "management_port": listener_management,
                        "modules": [wire.SYNC_MODULE],
                        "tls": {"cert_file": str(work / "srv.crt"), "key_file": str(work / "srv.key")},
                        "trust": {"client_ca_file": str(bundle)},
                        "nats": {"servers": [running.nats.url], "credentials": nats_credentials(running, "listener")},
                        "rate_limit": {"events_per_second": 100, "burst": 100},
                    }
                )
            )
            procs["listener"] = process.ManagedProcess(
                name="listener",
                argv=[sys.executable, "-m", "listener.cli", "--config", str(work / "listener.yaml")],
                log_path=work / "listener.log",
            )
            reconciler_ports = {}
            for identity in nats_mod.RECONCILER_REPLICAS[: args.reconcilers]:
                reconciler_ports[identity] = net.free_port()
                config = work / f"{identity}.yaml"
                config.write_text(
                    yaml.safe_dump(
                        {
                            "nats": {
                                "servers": [running.nats.url],
                                "credentials": nats_credentials(running, "reconciler"),
                            },
                            "management_port": reconciler_ports[identity],
                            "sync_resources": {"namespace": "bench", "resync_seconds": 3600, "workers": 16},
                            "module_templates": {
                                "enabled": True,
                                "resync_seconds": 3600,
                                "runtime_crds": "create-if-absent",
                            },
                            "kyma": {"enabled": False},
                            "sharding": {"enabled": True, "identity": identity},
                            "event_loop": args.reconciler_event_loop,
                        }
                    )
                )
                procs[identity] = process.ManagedProcess(
                    name=identity,
                    argv=[
                        sys.executable,
                        "-m",
                        "reconciler.cli",
                        "--config",
                        str(config),
                        "--kcp-kubeconfig",
                        str(running.kcp.admin_kubeconfig_path),
                        "--log-level",
                        "WARNING",
                    ],
                    log_path=work / f"{identity}.log",
                )
            for managed in procs.values():
                managed.start()
            procs["listener"].wait_ready(
                lambda: net.http_ok(f"http://127.0.0.1:{listener_management}/readyz"), timeout=60
            )
            setup_seconds = time.perf_counter() - started

            resets = Resets()
            stop_watching = asyncio.Event()
            watching = [
                asyncio.create_task(
                    informer.follow(
                        api, kube.CONFIGMAPS, namespace=None, label_selector=SYNCED, handler=resets, stop=stop_watching
                    )
                )
                for api in skrs.values()
            ]

            created = time.perf_counter()

            async def sync_resource(name: str, spec: dict[str, Any]) -> None:
                async with gate:
                    await kube.request(
                        kcp,
                        "POST",
                        crds.SYNC_RESOURCE.path("bench"),
                        body={
                            "apiVersion": crds.SYNC_RESOURCE.api_version,
                            "kind": "SyncResource",
                            "metadata": {"name": name, "namespace": "bench"},
                            "spec": spec,
                        },
                    )

            def configmap(name: str, namespace: str | None) -> dict[str, Any]:
                metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
                return {
                    "name": name,
                    "strategy": "CreateAndSync",
                    "resource": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": metadata,
                        "data": {"state": "desired"},
                    },
                }

            await asyncio.gather(
                *(sync_resource(name, {"kyma": name, "items": [configmap("cm", name)]}) for name in names),
                sync_resource(GROUP_ITEM, {"target": {"selector": {}}, "items": [configmap(GROUP_ITEM, "default")]}),
            )
            phase("SyncResources created")

            async def converged() -> int:
                total = 0
                for api in skrs.values():
                    listing = await kube.request(
                        api, "GET", "/api/v1/configmaps", query=[("labelSelector", SYNCED), ("limit", "0")]
                    )
                    total += sum(1 for i in listing["items"] if i["metadata"]["name"] == "cm")
                return total

            while True:
                have = await converged()
                group = await _group_ready(kcp, len(names))
                if have >= len(names) and group:
                    break
                if time.perf_counter() - created > 3600:
                    raise SystemExit(f"not converged within an hour: {have} of {len(names)}, group ready: {group}")
                await asyncio.sleep(2)
            convergence = time.perf_counter() - created
            group_status = (
                (await kube.get_or_none(kcp, crds.SYNC_RESOURCE.object_path("bench", GROUP_ITEM))) or {}
            ).get("status") or {}
            phase(f"converged in {convergence:.0f}s (group: {group_status.get('ready')} ready)")

            url = f"https://127.0.0.1:{port}{wire.EVENTS_PATH}"
            connector = aiohttp.TCPConnector(limit=512, keepalive_timeout=20)
            async with aiohttp.ClientSession(connector=connector) as session:
                counter = iter(range(10**9))

                async def drift(name: str) -> None:
                    """An edit, timed from when the apiserver answered it: 10,000 at once queue in this process and
                    on two SKR apiservers (a fleet has 10,000), which is not KCP's time. One the apiserver refuses
                    or that times out here is tried again: an edit dropped would not be measured at all."""
                    key = (name, "cm")
                    edit = resets.made(key, f"edited-{next(counter)}")
                    deadline = time.perf_counter() + EDIT_DEADLINE
                    while True:
                        try:
                            edited = await edit_configmap(skrs[hosts[name]], name, edit.value)
                            break
                        except kube.KubeError as exc:
                            transient = (
                                isinstance(exc, kube.UnreachableError | kube.ThrottledError) or exc.status >= 500
                            )
                            if not transient or time.perf_counter() > deadline:
                                resets.edits_failed.append(f"{name}: {exc}")
                                resets.dropped(key, edit)
                                return
                            resets.edit_retries += 1
                            # The failed attempt may have been applied, and undone: a new value, not a rewrite.
                            resets.dropped(key, edit)
                            edit = resets.made(key, f"edited-{next(counter)}")
                            await asyncio.sleep(getattr(exc, "retry_after", None) or 0.5)
                    resets.answered(key, edit)
                    await post_event(session, url, runtimes, name, edited)

                async def steady(
                    seconds: float,
                    rate: float,
                    *,
                    during: Callable[[CpuMeter], Coroutine[Any, Any, None]] | None = None,
                ) -> dict[str, Any]:
                    resets.window()
                    tasks: set[asyncio.Task[None]] = set()
                    reconciles = ReconcileMeter(reconciler_ports)  # scrapes, blocking: before the window starts
                    window_started = loop.time()
                    meter = CpuMeter(pids)
                    injected = asyncio.create_task(during(meter)) if during else None
                    n = 0
                    late: list[float] = []
                    # A loop busy with the edits in flight wakes late: start every edit that is due, not one
                    # per wake-up, or the rate offered is this process's limit instead of --drift-rate.
                    while (elapsed := loop.time() - window_started) < seconds:
                        while n < int(elapsed * rate) + 1:
                            late.append(elapsed - n / rate)
                            n += 1
                            task = asyncio.create_task(drift(random.choice(names)))
                            tasks.add(task)
                            task.add_done_callback(tasks.discard)
                        await asyncio.sleep(max(0.0, window_started + n / rate - loop.time()))
                    offered = n / (loop.time() - window_started)
                    await asyncio.gather(*tasks)
                    if injected:
                        await injected
                    await _until(lambda: not resets.edited, timeout=300)
                    summary = _summary(resets.latencies, edits=n, lost=resets.pending, seconds=seconds)
                    return summary | {
                        "edit_retries": resets.edit_retries,
                        "edits_failed": _some(resets.edits_failed),
                        "offered_per_s": round(offered, 1),
                        "started_late_p99_s": round(statistics.quantiles(late, n=100)[98], 2) if len(late) > 1 else 0,
                        "cores_until_reset": meter.cores(),
                        "reconciles_until_reset": reconciles.figures(),
                    }

                phase(f"steady drift, {args.drift_rate:g}/s for {args.drift_seconds:g}s")
                steady_result = await steady(args.drift_seconds, args.drift_rate)
                phase(f"steady: {steady_result}")
                burst_size = args.burst or len(names)
                resets.window()
                reconciles = ReconcileMeter(reconciler_ports)
                burst_started = time.perf_counter()
                meter = CpuMeter(pids)
                await asyncio.gather(*(drift(name) for name in random.sample(names, min(burst_size, len(names)))))
                edits_made = time.perf_counter() - burst_started
                await _until(lambda: not resets.edited, timeout=900)
                burst_result = _summary(
                    resets.latencies,
                    edits=burst_size,
                    lost=resets.pending,
                    seconds=time.perf_counter() - burst_started,
                ) | {
                    "all_edits_made_s": round(edits_made, 1),
                    "edit_retries": resets.edit_retries,
                    "edits_failed": _some(resets.edits_failed),
                    "cores_until_reset": meter.cores(),
                    "reconciles_until_reset": reconciles.figures(),
                }
                phase(f"burst: {burst_result}")

                before = sum(
                    _metric(
                        reconciler_ports,
                        "kyma_reconciler_reconciles_total",
                        'controller="module_templates",outcome="ok"',
                    ).values()
                )
                template_started = time.perf_counter()
                meter = CpuMeter(pids)
                await kube.request(
                    kcp,
                    "POST",
                    crds.MODULE_TEMPLATE.path(wire.KCP_NAMESPACE),
                    body={
                        "apiVersion": crds.MODULE_TEMPLATE.api_version,
                        "kind": "ModuleTemplate",
                        "metadata": {"name": "fleet-template", "namespace": wire.KCP_NAMESPACE},
                        "spec": {"version": "1.0.0"},
                    },
                )
                await _until(
                    lambda: (
                        sum(
                            _metric(
                                reconciler_ports,
                                "kyma_reconciler_reconciles_total",
                                'controller="module_templates",outcome="ok"',
                            ).values()
                        )
                        - before
                        >= len(names)
                    ),
                    timeout=900,
                    # A scrape renders every series, thousands per runtime-labelled metric: twice a second, a
                    # fifth to a third of each replica's CPU in the window (py-spy at 10,000 runtimes).
                    interval=2,
                )
                template_seconds = time.perf_counter() - template_started
                template_cores = meter.cores()
                phase(f"template passed to every runtime in {template_seconds:.0f}s, cores: {template_cores}")

                fault_result: dict[str, Any] = {}
                if args.kill:
                    victim = nats_mod.RECONCILER_REPLICAS[0]

                    taken_over: dict[str, float] = {}

                    async def faults(meter: CpuMeter) -> None:
                        await asyncio.sleep(args.drift_seconds / 3)
                        meter.keep_figures()
                        await asyncio.to_thread(procs[victim].kill)
                        killed = time.perf_counter()
                        await asyncio.to_thread(procs["listener"].kill)
                        taking_over = asyncio.create_task(_taken_over_from(kcp, victim))
                        await asyncio.sleep(3)
                        procs["listener"].start()
                        try:
                            await asyncio.wait_for(taking_over, timeout=300)
                        except TimeoutError:
                            return  # shards_taken_over_s: None
                        taken_over["s"] = round(time.perf_counter() - killed, 1)

                    deleted_before = len(resets.deleted)
                    fault_result = await steady(args.drift_seconds, args.drift_rate, during=faults)
                    fault_result["reconciler_killed"] = victim
                    fault_result["shards_taken_over_s"] = taken_over.get("s")
                    fault_result["synced_objects_deleted"] = len(resets.deleted) - deleted_before
                    phase(f"faults: {fault_result}")

            stop_watching.set()
            await asyncio.gather(*watching)
            kcp_pids = {name: managed.pid for name, managed in procs.items() if managed.pid}
            if running.nats.pid:
                kcp_pids["nats-server"] = running.nats.pid
            busy = {name: usage(pid) for name, pid in kcp_pids.items()}
            phase(f"idle for {args.idle_seconds:g}s: idle clients and connections are released")
            await asyncio.sleep(args.idle_seconds)
            components = {name: usage(pid) for name, pid in kcp_pids.items()}
            clients = _metric(reconciler_ports, "kyma_reconciler_runtime_clients")
            retired = _metric(reconciler_ports, "kyma_reconciler_runtime_clients_retired")
            connections = _metric({"listener": listener_management}, "kyma_listener_connections")
            print(
                json.dumps(
                    {
                        "runtimes": len(names),
                        "reconciler_replicas": args.reconcilers,
                        "reconciler_event_loop": args.reconciler_event_loop,
                        "setup_seconds": round(setup_seconds, 1),
                        "convergence_seconds": round(convergence, 1),
                        "group_ready_at_convergence": group_status.get("ready"),
                        "steady_drift": steady_result,
                        "burst": burst_result,
                        "module_template_all_runtimes_seconds": round(template_seconds, 1),
                        "module_template_cores": template_cores,
                        "faults": fault_result,
                        "synced_objects_deleted_in_all": len(resets.deleted),
                        "idle_seconds": args.idle_seconds,
                        "idle_runtime_clients_held": clients,
                        "idle_runtime_clients_retired_still_open": retired,
                        "idle_listener_connections": connections,
                        "components": {
                            name: {
                                "cpu_seconds": round(cpu, 1),
                                "busy_rss_mib": round(busy[name][1], 1),
                                "idle_rss_mib": round(rss, 1),
                                "idle_rss_kib_per_runtime": round(rss * 1024 / len(names), 1),
                            }
                            for name, (cpu, rss) in components.items()
                        },
                    },
                    indent=2,
                )
            )
            for api in skrs.values():
                await api.close()
    finally:
        for managed in reversed(list(procs.values())):
            managed.stop()
        running.stop()


async def _until(check: Callable[[], bool], *, timeout: float, interval: float = 0.2) -> None:
    """Until ``check`` holds or ``timeout`` passed (what did not happen shows in the figures)."""
    deadline = time.perf_counter() + timeout
    while True:
        if check() or time.perf_counter() > deadline:
            return
        await asyncio.sleep(interval)


async def _taken_over_from(kcp: kube.ApiClient, victim: str) -> None:
    """Until no shard Lease names ``victim`` as its holder, having named it (the kill comes just before): another
    replica took each over. Read from the Leases (one small list a second), not the survivor's metrics (a scrape
    renders thousands of series at 10,000)."""
    held_by_victim = False
    while True:
        try:
            holders = set(await shard_holders(kcp))
        except kube.KubeError:  # a saturated KCP: look again
            holders = set()
        held_by_victim |= victim in holders
        if held_by_victim and victim not in holders and None not in holders:
            return
        await asyncio.sleep(1)


async def _group_ready(kcp: kube.ApiClient, runtimes: int) -> bool:
    """The group SyncResource has made its pass over every runtime. Its one object per apiserver is shared by
    the thousands of runtimes simulated there (in a real fleet each runtime has its own), so some runtimes
    race to create the same object and report a conflict: its Ready count is reported, not awaited."""
    found = await kube.get_or_none(kcp, crds.SYNC_RESOURCE.object_path("bench", GROUP_ITEM))
    status = (found or {}).get("status") or {}
    return bool(status.get("runtimeCount") == runtimes and status.get("syncedGeneration") == 1)


def _scrape(ports: dict[str, int]) -> dict[str, str]:
    """Each reachable process's /metrics text (a killed one is left out)."""
    found = {}
    for identity, port in ports.items():
        try:
            found[identity] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            continue
    return found


def _summed(text: str, name: str, labels: str = "") -> float:
    """A metric's series carrying ``labels``, summed."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and line[len(name)] in " {" and labels in line
    )


def _metric(ports: dict[str, int], name: str, labels: str = "") -> dict[str, float]:
    """A metric (its series carrying ``labels``) summed per reconciler replica (a killed replica counts nothing)."""
    return {identity: _summed(text, name, labels) for identity, text in _scrape(ports).items()}


def _some(lines: list[str], shown: int = 5) -> list[str]:
    return lines[:shown] + ([f"... {len(lines) - shown} more"] if len(lines) > shown else [])


def _summary(latencies: list[float], *, edits: int, lost: int, seconds: float) -> dict[str, Any]:
    ordered = sorted(latencies)
    quantiles = statistics.quantiles(ordered, n=100) if len(ordered) >= 2 else ordered * 99 or [0.0] * 99
    return {
        "edits": edits,
        "reset": len(ordered),
        "not_reset": lost,
        "seconds": round(seconds, 1),
        "p50_s": round(quantiles[49], 2),
        "p99_s": round(quantiles[98], 2),
        "max_s": round(ordered[-1], 2) if ordered else None,
    }


if __name__ == "__main__":
    asyncio.run(main())
