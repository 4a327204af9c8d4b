"""Many runtimes on one machine: convergence, drift-reset latency, events/s, resources.

Simulated runtimes are namespaces on two real SKR apiservers: each has its own Kyma CR and
kubeconfig Secret in KCP, its own client certificate (CN = its name, checked by the listener),
and its own watcher agent (Lease, checkpoint, watches scoped to its namespace); agents share
watcher-host processes. The listener, the reconciler and NATS are the real processes. Each
runtime gets a SyncResource with one CreateAndSync ConfigMap. Then:

- convergence: time until every runtime has its object;
- drift: every runtime's object is edited by a "user" (a burst); the time from each edit to its
  reset by the pipeline gives p50/p95/p99 and the end-to-end events/s;
- ModuleTemplate fan-out: a new template in KCP, and the time until the reconciler has made a
  pass for every runtime (runtimes share two apiservers here, so after the first pass per
  apiserver the copy is already there: this times the fan-out, not N separate writes);
- faults (--faults): NATS, the listener and the reconciler are SIGKILLed and restarted, and a
  runtime apiserver stopped and started, each during a drift burst; every edit must still be
  reset (events lost must be 0), and the time to recover is reported;
- resources: CPU seconds, steady-state cores and RSS of every component (run two scales and take
  the difference for the cost per runtime: each process has a base).

    python bench/scale.py --runtimes 100 --faults
"""

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from certs import stores
from clients import kube, leases
from contract import wire
from devenv import landscape, net, process, testbin
from pki import authority, kubeconfigs
from reconciler import crds, sharding

_TICKS = os.sysconf("SC_CLK_TCK")
MERGE = "application/merge-patch+json"


def usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process; RSS 0 for one that has exited."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    rss = next(
        (
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        ),
        0,
    )
    return (int(stat[11]) + int(stat[12])) / _TICKS, rss / 1024


async def edit_configmap(api: client.ApiClient, namespace: str, value: str) -> dict[str, Any]:
    """What a user's kubectl does to a runtime's synced ConfigMap ``cm``: its data merge-patched, under a field
    manager of its own; the object as edited."""
    return await kube.request(
        api,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/cm",
        body={"data": {"state": value}},
        query=[("fieldManager", "kubectl")],
        content_type=MERGE,
    )


def name_of(n: int) -> str:
    return f"rt-{n:05d}"


async def register(
    kcp: client.ApiClient, running: landscape.Landscape, names: list[str], hosts: dict[str, str]
) -> None:
    for namespace in (wire.KCP_NAMESPACE, wire.KUBECONFIG_NAMESPACE, "bench"):
        await kube.ensure_namespace(kcp, namespace)
    await crds.install(kcp, crds.kcp_crds())
    await crds.install_if_absent(kcp, crds.lifecycle_manager_crds())
    await kube.create_or_replace(
        kcp,
        crds.SYNC_BINDING.path(),
        {
            "apiVersion": crds.SYNC_BINDING.api_version,
            "kind": "SyncBinding",
            "metadata": {"name": "bench"},
            "spec": {"namespaces": ["bench"], "runtimeSelector": {}},
        },
    )
    semaphore = asyncio.Semaphore(16)

    async def one(name: str) -> None:
        async with semaphore:
            kubeconfig = running.runtimes[hosts[name]].admin_kubeconfig()
            await stores.write_secret(
                kcp,
                namespace=wire.KUBECONFIG_NAMESPACE,
                name=wire.module_kubeconfig_secret("kyma-sync", name),
                data={wire.KUBECONFIG_KEY: kubeconfigs.dump(kubeconfig).encode()},
                labels={wire.RUNTIME_LABEL: name, wire.MODULE_LABEL: "kyma-sync"},
            )
            await kube.request(
                kcp,
                "POST",
                crds.KYMA.path(wire.KCP_NAMESPACE),
                body={
                    "apiVersion": crds.KYMA.api_version,
                    "kind": "Kyma",
                    "metadata": {"name": name, "namespace": wire.KCP_NAMESPACE},
                    "spec": {"channel": "regular"},
                },
            )

    await asyncio.gather(*(one(n) for n in names))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", type=int, default=100, help="simulated runtimes (default 100)")
    parser.add_argument("--hosts", type=int, default=2, help="watcher-host processes (default 2)")
    parser.add_argument(
        "--faults", action="store_true", help="then kill/restart NATS, listener, reconciler, an apiserver"
    )
    parser.add_argument("--outage-seconds", type=float, default=3.0, help="how long each fault lasts (default 3)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="steady-state CPU sample (default 10)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kyma-bench-scale-"))
    binaries = testbin.ensure(directory=testbin.default_cache_root() / testbin.K8S_VERSION)
    running = landscape.start(workdir=work, binaries=binaries, runtimes=("skr-a", "skr-b"))
    procs: list[process.ManagedProcess] = []
    names = [name_of(n) for n in range(args.runtimes)]
    hosts = {name: ("skr-a", "skr-b")[n % 2] for n, name in enumerate(names)}
    started = time.perf_counter()
    try:
        async with await kube.api_client(running.kcp.admin_kubeconfig()) as kcp:
            skrs = {h: await kube.api_client(c.admin_kubeconfig()) for h, c in running.runtimes.items()}
            await register(kcp, running, names, hosts)
            for name in names:
                await kube.ensure_namespace(skrs[hosts[name]], name)
            ca = authority.Authority.create("bench-ca")
            bundle = work / "bundle.crt"
            bundle.write_bytes(ca.to_files()[authority.BUNDLE])
            serving = ca.issue_server(["127.0.0.1"], lifetime=datetime.timedelta(days=1))
            (work / "srv.crt").write_bytes(serving.cert_pem)
            (work / "srv.key").write_bytes(serving.key_pem)
            port, management = net.free_port(), net.free_port()
            (work / "listener.yaml").write_text(
                yaml.safe_dump(
                    {
                        "host": "127.0.0.1",
                        "port": port,
                        "management_port": management,
                        "modules": ["kyma-sync"],
                        "tls": {"cert_file": str(work / "srv.crt"), "key_file": str(work / "srv.key")},
                        "trust": {"client_ca_file": str(bundle)},
                        "nats": {"servers": [running.nats.url], "credentials": nats_credentials(running, "listener")},
                        "rate_limit": {"events_per_second": 1000, "burst": 1000},
                    }
                )
            )
            listener = process.ManagedProcess(
                name="listener",
                argv=[
                    sys.executable,
                    "-m",
                    "listener.cli",
                    "--config",
                    str(work / "listener.yaml"),
                    "--log-level",
                    "WARNING",
                ],
                log_path=work / "listener.log",
            )
            listener.start()
            procs.append(listener)
            listener.wait_ready(lambda: net.http_ok(f"http://127.0.0.1:{management}/readyz"), timeout=30)
            host_dirs: dict[str, tuple[Path, str]] = {}
            for n, name in enumerate(names):
                skr, host = hosts[name], f"{hosts[name]}-{(n // 2) % max(1, args.hosts // 2)}"
                directory = host_dirs.setdefault(host, (work / "hosts" / host, skr))[0]
                directory.mkdir(parents=True, exist_ok=True)
                pair = ca.issue_runtime(name, lifetime=datetime.timedelta(days=1))
                (directory / f"{name}.crt").write_bytes(pair.cert_pem)
                (directory / f"{name}.key").write_bytes(pair.key_pem)
                (directory / f"watcher-{name}.yaml").write_text(
                    yaml.safe_dump(
                        {
                            "runtime": name,
                            "listeners": [{"url": f"https://127.0.0.1:{port}"}],
                            "tls": {
                                "cert_file": str(directory / f"{name}.crt"),
                                "key_file": str(directory / f"{name}.key"),
                                "ca_file": str(bundle),
                            },
                            "watches": [
                                {
                                    "version": "v1",
                                    "resource": "configmaps",
                                    "namespaces": [name],
                                    "label_selector": "kyma-project.io/synced-by=kyma-sync",
                                    "module": "kyma-sync",
                                }
                            ],
                            "lease": {"namespace": name},
                            "checkpoint": {"namespace": name},
                            "management_port": None,
                            "delivery": {"senders": 1},
                        }
                    )
                )
            for host, (directory, skr) in host_dirs.items():
                managed = process.ManagedProcess(
                    name=f"watchers-{host}",
                    argv=[
                        sys.executable,
                        str(Path(__file__).with_name("watcher_host.py")),
                        "--configs",
                        str(directory),
                        "--kubeconfig",
                        str(running.runtimes[skr].admin_kubeconfig_path),
                    ],
                    log_path=work / f"watchers-{host}.log",
                )
                managed.start()
                procs.append(managed)
            reconciler_management = net.free_port()
            (work / "reconciler.yaml").write_text(
                yaml.safe_dump(
                    {
                        "nats": {"servers": [running.nats.url], "credentials": nats_credentials(running, "reconciler")},
                        "management_port": reconciler_management,
                        "sync_resources": {"namespace": "bench", "resync_seconds": 3600, "workers": 16},
                        "module_templates": {"enabled": True, "resync_seconds": 3600},
                        "kyma": {"enabled": False},
                    }
                )
            )
            reconciler = process.ManagedProcess(
                name="reconciler",
                argv=[
                    sys.executable,
                    "-m",
                    "reconciler.cli",
                    "--config",
                    str(work / "reconciler.yaml"),
                    "--kcp-kubeconfig",
                    str(running.kcp.admin_kubeconfig_path),
                    "--log-level",
                    "WARNING",
                ],
                log_path=work / "reconciler.log",
            )
            reconciler.start()
            procs.append(reconciler)
            setup_seconds = time.perf_counter() - started

            created = time.perf_counter()
            semaphore = asyncio.Semaphore(16)

            async def sync_resource(name: str) -> None:
                async with semaphore:
                    await kube.request(
                        kcp,
                        "POST",
                        crds.SYNC_RESOURCE.path("bench"),
                        body={
                            "apiVersion": crds.SYNC_RESOURCE.api_version,
                            "kind": "SyncResource",
                            "metadata": {"name": name, "namespace": "bench"},
                            "spec": {
                                "kyma": name,
                                "items": [
                                    {
                                        "name": "cm",
                                        "strategy": "CreateAndSync",
                                        "resource": {
                                            "apiVersion": "v1",
                                            "kind": "ConfigMap",
                                            "metadata": {"name": "cm", "namespace": name},
                                            "data": {"state": "desired"},
                                        },
                                    }
                                ],
                            },
                        },
                    )

            await asyncio.gather(*(sync_resource(name) for name in names))

            async def count_desired() -> int:
                total = 0
                for api in skrs.values():
                    listing = await kube.request(
                        api,
                        "GET",
                        "/api/v1/configmaps",
                        query=[("labelSelector", "kyma-project.io/synced-by=kyma-sync")],
                    )
                    total += sum(
                        1
                        for i in listing["items"]
                        if i["metadata"]["name"] == "cm" and (i.get("data") or {}).get("state") == "desired"
                    )
                return total

            while await count_desired() < len(names):
                if time.perf_counter() - created > 600:
                    raise SystemExit("convergence did not finish within 600s")
                await asyncio.sleep(0.2)
            convergence = time.perf_counter() - created
            await asyncio.sleep(5)  # watchers elected and synced

            async def edit_all(value: str) -> dict[str, float]:
                edited: dict[str, float] = {}

                async def edit(name: str) -> None:
                    async with semaphore:
                        edited[name] = time.perf_counter()
                        await edit_configmap(skrs[hosts[name]], name, value)

                await asyncio.gather(*(edit(name) for name in names))
                return edited

            async def resets(edited: dict[str, float], *, timeout: float) -> dict[str, float]:
                seen: dict[str, float] = {}
                deadline = time.perf_counter() + timeout
                while len(seen) < len(edited) and time.perf_counter() < deadline:
                    for api in skrs.values():
                        try:
                            listing = await kube.request(
                                api,
                                "GET",
                                "/api/v1/configmaps",
                                query=[("labelSelector", "kyma-project.io/synced-by=kyma-sync")],
                            )
                        except kube.KubeError:
                            continue
                        now = time.perf_counter()
                        for item in listing["items"]:
                            ns = item["metadata"]["namespace"]
                            if ns in edited and ns not in seen and (item.get("data") or {}).get("state") == "desired":
                                seen[ns] = now
                    await asyncio.sleep(0.05)
                return seen

            burst = time.perf_counter()
            edited_at = await edit_all("edited")
            reset_at = await resets(edited_at, timeout=300)
            burst_seconds = max(reset_at.values(), default=burst) - burst
            latencies = sorted(reset_at[n] - edited_at[n] for n in reset_at)
            quantiles = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else latencies * 99

            async def template_passes() -> float:
                """Per-runtime ModuleTemplate passes the reconciler completed (from its /metrics)."""
                url = f"http://127.0.0.1:{reconciler_management}/metrics"
                metrics = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: urllib.request.urlopen(url, timeout=5).read().decode()
                )
                return sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in metrics.splitlines()
                    if line.startswith('kyma_reconciler_reconciles_total{controller="module_templates",outcome="ok"}')
                )

            before_template = await template_passes()
            template_started = time.perf_counter()
            await kube.request(
                kcp,
                "POST",
                crds.MODULE_TEMPLATE.path(wire.KCP_NAMESPACE),
                body={
                    "apiVersion": crds.MODULE_TEMPLATE.api_version,
                    "kind": "ModuleTemplate",
                    "metadata": {"name": "bench-template", "namespace": wire.KCP_NAMESPACE},
                    "spec": {"version": "1.0.0"},
                },
            )
            while await template_passes() - before_template < len(names):
                if time.perf_counter() - template_started > 300:
                    break
                await asyncio.sleep(0.1)
            template_seconds = time.perf_counter() - template_started

            fault_results: dict[str, dict[str, Any]] = {}
            if args.faults:
                by_name = {p.name: p for p in procs}

                def restart_nats() -> None:
                    running.nats.start()
                    running.nats.wait_ready()

                def restart_listener() -> None:
                    by_name["listener"].start()
                    by_name["listener"].wait_ready(
                        lambda: net.http_ok(f"http://127.0.0.1:{management}/readyz"), timeout=30
                    )

                faults: dict[str, tuple[Any, Any, bool]] = {
                    # name: (break, repair, edit while broken? else right after the repair)
                    "nats": (running.nats.kill, restart_nats, True),
                    "listener": (by_name["listener"].kill, restart_listener, True),
                    "reconciler": (by_name["reconciler"].kill, by_name["reconciler"].start, True),
                    # While it is down nobody can edit its objects: edit right after it is back, so
                    # the watchers' and the reconciler's broken connections must have recovered.
                    "runtime-apiserver": (
                        running.runtimes["skr-a"].stop_apiserver,
                        running.runtimes["skr-a"].start_apiserver,
                        False,
                    ),
                }
                for fault, (break_it, repair, edit_while_broken) in faults.items():
                    break_it()
                    if edit_while_broken:
                        edited = await edit_all(f"edited-{fault}")
                    await asyncio.sleep(args.outage_seconds)
                    repair()
                    repaired = time.perf_counter()
                    if not edit_while_broken:
                        edited = await edit_all(f"edited-{fault}")
                    seen = await resets(edited, timeout=180)
                    fault_results[fault] = {
                        "edits": len(edited),
                        "events_lost": len(edited) - len(seen),
                        "outage_seconds": args.outage_seconds,
                        "recovered_all_seconds_after_repair": round(max(seen.values(), default=repaired) - repaired, 2),
                    }

            # Steady state: everything converged, nothing changing — what the landscape costs at rest.
            pids = {p.name: p.pid for p in procs if p.pid}
            if running.nats.pid:
                pids["nats-server"] = running.nats.pid
            idle_before = {name: usage(pid)[0] for name, pid in pids.items()}
            await asyncio.sleep(args.idle_seconds)
            idle_cores = {name: (usage(pid)[0] - idle_before[name]) / args.idle_seconds for name, pid in pids.items()}
            components = {name: usage(pid) for name, pid in pids.items()}
            print(
                json.dumps(
                    {
                        "runtimes": len(names),
                        "setup_seconds": round(setup_seconds, 1),
                        "convergence_seconds": round(convergence, 2),
                        "drift_edits": len(names),
                        "drift_resets_seen": len(reset_at),
                        "events_lost": len(names) - len(reset_at),
                        "drift_burst_events_per_second": round(len(reset_at) / burst_seconds, 1)
                        if burst_seconds
                        else None,
                        "drift_latency_p50_ms": round(quantiles[49] * 1000, 1),
                        "drift_latency_p95_ms": round(quantiles[94] * 1000, 1),
                        "drift_latency_p99_ms": round(quantiles[98] * 1000, 1),
                        "module_template_change_all_runtimes_seconds": round(template_seconds, 2),
                        "faults": fault_results,
                        "exited_components": [p.name for p in procs if not p.running],
                        "components": {
                            k: {
                                "cpu_seconds": round(c, 1),
                                "rss_mib": round(m, 1),
                                "idle_cores": round(idle_cores.get(k, 0.0), 3),
                            }
                            for k, (c, m) in components.items()
                        },
                    },
                    indent=2,
                )
            )
            for api in skrs.values():
                await api.close()
    finally:
        for managed in reversed(procs):
            managed.stop()
        running.stop()


if __name__ == "__main__":
    asyncio.run(main())


async def shard_holders(kcp: client.ApiClient) -> list[str | None]:
    """The holder each reconciler shard Lease in KCP names (None: released)."""
    listing, _ = await kube.list_objects(
        kcp, leases.LEASES, namespace=wire.KCP_NAMESPACE, label_selector=f"{sharding.ROLE_LABEL}=shard"
    )
    return [(lease.get("spec") or {}).get("holderIdentity") for lease in listing]


def nats_credentials(running: landscape.Landscape, identity: str) -> dict[str, object]:
    return running.nats.credentials(identity).model_dump(mode="json")
