"""How long a killed reconciler replica's shards stay without a holder.

Starts a real KCP apiserver and two reconciler replicas (processes, sharding on, no controllers and no NATS: only
the shard Leases at work), then --rounds times: waits until the two hold every shard between them, waits a random
part of a renew interval (a kill falls anywhere in a replica's round), SIGKILLs one (alternately), and polls the
shard Leases every 50 ms until none names the killed replica and none is free; then restarts it. Prints each
take-over and their p50 and maximum, in seconds from the kill. A replica takes a lease over once it has seen it
unchanged for the lease duration, so the figure is the duration plus how late the survivor saw the last renewal
and how late it looked again after the expiry.

    python bench/takeover.py --rounds 10
"""

import argparse
import asyncio
import functools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import yaml
from scale import shard_holders

from clients import kube
from contract import wire
from devenv import kube as kube_mod
from devenv import net, process, testbin
from reconciler import settings

REPLICAS = ("r0", "r1")


async def _until(check: Callable[[], Awaitable[bool]], *, interval: float, what: str) -> None:
    deadline = time.perf_counter() + 120
    while True:
        if await check():
            return
        if time.perf_counter() > deadline:
            raise SystemExit(f"not within 120 s: {what}")
        await asyncio.sleep(interval)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="kills (default 10)")
    args = parser.parse_args()
    defaults = settings.ShardingSettings()
    work = Path(tempfile.mkdtemp(prefix="kyma-bench-takeover-"))
    print(f"working in {work}", file=sys.stderr)
    binaries = testbin.ensure(directory=testbin.default_cache_root() / testbin.K8S_VERSION)
    kcp_cluster = kube_mod.KubeCluster(name="kcp", workdir=work / "kcp", binaries=binaries)
    kcp_cluster.start()
    replicas: dict[str, process.ManagedProcess] = {}
    ports = {identity: net.free_port() for identity in REPLICAS}
    try:
        await asyncio.to_thread(kcp_cluster.wait_ready)
        async with await kube.api_client(kcp_cluster.admin_kubeconfig()) as kcp:
            await kube.ensure_namespace(kcp, wire.KCP_NAMESPACE)  # where the Leases are
        for identity in REPLICAS:
            config = work / f"{identity}.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "management_port": ports[identity],
                        "sharding": {"enabled": True, "identity": identity},
                        "sync_resources": {"enabled": False},
                        "module_templates": {"enabled": False},
                        "kyma": {"enabled": False},
                    }
                )
            )
            kubeconfig = str(kcp_cluster.admin_kubeconfig_path)
            replicas[identity] = process.ManagedProcess(
                name=identity,
                argv=[sys.executable, "-m", "reconciler.cli", "--config", str(config), "--kcp-kubeconfig", kubeconfig],
                log_path=work / f"{identity}.log",
            )
            replicas[identity].start()
        async with await kube.api_client(kcp_cluster.admin_kubeconfig()) as kcp:
            taken: list[float] = []
            for round_ in range(args.rounds):
                for identity in REPLICAS:
                    probe = functools.partial(net.http_ok, f"http://{net.LOOPBACK}:{ports[identity]}/readyz")
                    await asyncio.to_thread(replicas[identity].wait_ready, probe, timeout=60)

                async def shared() -> bool:
                    holders = await shard_holders(kcp)
                    return set(holders) == set(REPLICAS) and len(holders) == defaults.shards

                await _until(shared, interval=0.2, what="both replicas holding shards")
                await asyncio.sleep(random.uniform(0, defaults.renew_interval_seconds))
                victim = REPLICAS[round_ % len(REPLICAS)]
                killed = time.perf_counter()
                await asyncio.to_thread(replicas[victim].kill)

                async def taken_over(victim: str = victim) -> bool:
                    holders = await shard_holders(kcp)
                    return victim not in holders and None not in holders

                await _until(taken_over, interval=0.05, what="the shards taken over")
                taken.append(round(time.perf_counter() - killed, 2))
                print(
                    f"round {round_ + 1}: {victim} killed, its shards taken over after {taken[-1]} s", file=sys.stderr
                )
                replicas[victim].start()
        print(
            json.dumps(
                {
                    "lease_duration_seconds": defaults.lease_duration_seconds,
                    "renew_interval_seconds": defaults.renew_interval_seconds,
                    "shards": defaults.shards,
                    "taken_over_s": taken,
                    "p50_s": round(statistics.median(taken), 2),
                    "max_s": max(taken),
                },
                indent=2,
            )
        )
    finally:
        for replica in replicas.values():
            replica.stop()
        kcp_cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
