"""Events/s and CPU seconds per 1,000 events for one watcher process on this machine.

A real etcd + kube-apiserver and a minimal mTLS sink (the listener's HTTP contract: 202 per
event) run in this process's landscape; `kyma-watcher` runs as its own process so its CPU time
can be read from /proc. Two phases:
- burst: N labelled ConfigMaps exist before the watcher starts; it lists them and delivers N
  RESYNC events (pure pipeline throughput).
- live: the watcher runs while N more ConfigMaps are created (bounded by apiserver write speed).
Then the footprint a runtime pays, against 1 % of a node (--node-cores, --node-mib): a second
watcher process campaigns as a follower (what a Deployment's second replica and each further
DaemonSet pod cost), and the leader is measured at a steady --drift-per-second edits.

    python bench/watcher_throughput.py --objects 2000
"""

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from aiohttp import web
from kubernetes_asyncio import client

from clients import kube
from contract import wire
from devenv import kube as kube_mod
from devenv import net, testbin
from pki import pki

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def create_many(core: client.CoreV1Api, namespace: str, prefix: str, count: int) -> None:
    semaphore = asyncio.Semaphore(32)

    async def one(n: int) -> None:
        async with semaphore:
            await core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"{prefix}-{n}", labels={"bench": "true"}),
                    data={"payload": "v" * 256},
                ),
            )

    await asyncio.gather(*(one(n) for n in range(count)))


async def wait_count(received: list[int], target: int, timeout: float = 300) -> float:
    started = time.perf_counter()
    while received[0] < target:
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"only {received[0]} of {target} events arrived")
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=2000, help="ConfigMaps per phase (default 2000)")
    parser.add_argument("--drift-per-second", type=float, default=5.0, help="steady edits/s for the footprint")
    parser.add_argument("--node-cores", type=float, default=4.0, help="reference node for the 1%% budget")
    parser.add_argument("--node-mib", type=float, default=16384.0, help="reference node memory (MiB)")
    parser.add_argument("--nodes", type=int, default=10, help="nodes a DaemonSet would run on")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kyma-bench-watcher-"))
    cluster = kube_mod.KubeCluster(
        name="bench-skr",
        workdir=work / "skr",
        binaries=testbin.ensure(directory=testbin.default_cache_root() / testbin.K8S_VERSION),
    )
    cluster.start()
    cluster.wait_ready()

    runtime_ca, server_ca = pki.create_ca("runtime-ca"), pki.create_ca("ingress-ca")
    serving, client_cert = (
        pki.loopback_server_cert(server_ca, common_name="sink"),
        pki.runtime_client_cert(runtime_ca, "bench"),
    )
    for name, data in {
        "server.crt": serving.cert_pem,
        "server.key": serving.key_pem,
        "runtime-ca.crt": runtime_ca.cert_pem,
        "ingress-ca.crt": server_ca.cert_pem,
        "client.crt": client_cert.cert_pem,
        "client.key": client_cert.key_pem,
    }.items():
        (work / name).write_bytes(data)
    received = [0]

    async def sink(request: web.Request) -> web.Response:
        await request.read()
        received[0] += 1
        return web.json_response({}, status=202)

    async def heartbeat(request: web.Request) -> web.Response:
        return web.Response(status=204)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(work / "server.crt", work / "server.key")
    context.load_verify_locations(work / "runtime-ca.crt")
    app = web.Application()
    app.router.add_post(wire.EVENTS_PATH, sink)
    app.router.add_post(wire.HEARTBEAT_PATH, heartbeat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = net.free_port()
    await web.TCPSite(runner, net.LOOPBACK, port, ssl_context=context).start()

    (work / "watcher.yaml").write_text(
        yaml.safe_dump(
            {
                "runtime": "bench",
                "listeners": [{"url": f"https://{net.LOOPBACK}:{port}"}],
                "tls": {
                    "cert_file": str(work / "client.crt"),
                    "key_file": str(work / "client.key"),
                    "ca_file": str(work / "ingress-ca.crt"),
                },
                "watches": [
                    {
                        "version": "v1",
                        "resource": "configmaps",
                        "namespaces": ["bench"],
                        "label_selector": "bench=true",
                        "module": "bench",
                    }
                ],
                "management_port": 0,
            }
        )
    )

    def start_watcher(identity: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "watcher.cli",
                "--config",
                str(work / "watcher.yaml"),
                "--kubeconfig",
                str(cluster.admin_kubeconfig_path),
                "--identity",
                identity,
                "--log-level",
                "WARNING",
            ],
        )

    watchers: list[subprocess.Popen[bytes]] = []
    try:
        async with await kube.api_client(cluster.admin_kubeconfig()) as api:
            core = client.CoreV1Api(api)
            for namespace in ("bench", "kyma-system"):
                await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
            await create_many(core, "bench", "burst", args.objects)
            watcher = start_watcher("leader")
            watchers.append(watcher)
            await asyncio.sleep(0)
            cpu_start = cpu_seconds(watcher.pid)
            burst_seconds = await wait_count(received, args.objects)
            cpu_burst = cpu_seconds(watcher.pid) - cpu_start

            await asyncio.sleep(3)  # settle: checkpoint written, queue empty
            cpu_before_live = cpu_seconds(watcher.pid)
            live_started = time.perf_counter()
            await create_many(core, "bench", "live", args.objects)
            await wait_count(received, 2 * args.objects)
            live_seconds = time.perf_counter() - live_started
            cpu_live = cpu_seconds(watcher.pid) - cpu_before_live

            idle_before = cpu_seconds(watcher.pid)
            await asyncio.sleep(10)
            idle_cpu = (cpu_seconds(watcher.pid) - idle_before) / 10

            follower = start_watcher("follower")
            watchers.append(follower)
            await asyncio.sleep(10)  # started, campaigning (the leader holds the Lease)
            window = 30.0
            leader_before, follower_before = cpu_seconds(watcher.pid), cpu_seconds(follower.pid)
            drifted_before, window_started = received[0], time.perf_counter()
            edits = int(window * args.drift_per_second)
            for n in range(edits):
                await core.patch_namespaced_config_map(f"live-{n % args.objects}", "bench", {"data": {"n": str(n)}})
                await asyncio.sleep(1 / args.drift_per_second)
            await wait_count(received, drifted_before + edits)
            elapsed = time.perf_counter() - window_started
            leader_cpu = (cpu_seconds(watcher.pid) - leader_before) / elapsed
            follower_cpu = (cpu_seconds(follower.pid) - follower_before) / elapsed
            leader_rss, follower_rss = rss_mib(watcher.pid), rss_mib(follower.pid)

            def node_share(cpu: float, mib: float) -> float:
                """The larger of a pod's CPU and memory share of the reference node, in percent."""
                share: float = max(cpu / args.node_cores, mib / args.node_mib)
                return round(100 * share, 3)

            print(
                json.dumps(
                    {
                        "objects_per_phase": args.objects,
                        "burst_events_per_second": round(args.objects / burst_seconds),
                        "burst_cpu_seconds_per_1000_events": round(cpu_burst / args.objects * 1000, 3),
                        "live_events_per_second": round(args.objects / live_seconds),
                        "live_cpu_seconds_per_1000_events": round(cpu_live / args.objects * 1000, 3),
                        "idle_cpu_fraction_of_a_core": round(idle_cpu, 4),
                        "watcher_rss_mib": round(rss_mib(watcher.pid), 1),
                        "footprint": {
                            "drift_edits_per_second": args.drift_per_second,
                            "leader_cpu_fraction_of_a_core": round(leader_cpu, 4),
                            "leader_rss_mib": round(leader_rss, 1),
                            "follower_cpu_fraction_of_a_core": round(follower_cpu, 4),
                            "follower_rss_mib": round(follower_rss, 1),
                            "reference_node": f"{args.node_cores:g} cores, {args.node_mib:g} MiB",
                            "leader_percent_of_the_node_it_runs_on": node_share(leader_cpu, leader_rss),
                            "follower_percent_of_the_node_it_runs_on": node_share(follower_cpu, follower_rss),
                            "deployment_runtime_total": {
                                "pods": 2,
                                "cpu_cores": round(leader_cpu + follower_cpu, 4),
                                "rss_mib": round(leader_rss + follower_rss, 1),
                            },
                            "daemonset_runtime_total": {
                                "pods": args.nodes,
                                "cpu_cores": round(leader_cpu + (args.nodes - 1) * follower_cpu, 4),
                                "rss_mib": round(leader_rss + (args.nodes - 1) * follower_rss, 1),
                            },
                        },
                        "note": "burst includes process start-up and the initial list",
                    },
                    indent=2,
                )
            )
    finally:
        for running in watchers:
            running.terminate()
            running.wait(timeout=15)
        await runner.cleanup()
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
