"""How long a kyma-certs renewal pass over many runtimes takes: can 10,000 renew within a token's life?

Simulated runtimes: N master kubeconfig Secrets in a real KCP apiserver, all pointing at one real
runtime apiserver; every runtime costs what it costs in production (a client, a read of its
certificate, a key pair, a signature and a write when due). They share that apiserver's one
certificate Secret, so the pass is measured one runtime at a time (concurrent writers of one object
would conflict, and each would find another's certificate there — real runtimes never do): the
figure is a floor, concurrency only adds to it. Prints runtimes/s and what 10,000 runtimes would
take (a 2-core machine running both apiservers too).

    python bench/rotation.py --runtimes 500
"""

import argparse
import asyncio
import datetime
import tempfile
import time
from pathlib import Path

from certs import rotation, stores
from clients import kube
from contract import wire
from devenv import kube as kube_mod
from devenv import testbin
from pki import authority, kubeconfigs


async def _register(kcp: kube.ApiClient, runtime_kubeconfig: dict[str, object], count: int) -> None:
    await kube.ensure_namespace(kcp, wire.KCP_NAMESPACE)
    slots = asyncio.Semaphore(32)

    async def one(n: int) -> None:
        async with slots:
            await stores.write_secret(
                kcp,
                namespace=wire.KCP_NAMESPACE,
                name=f"kubeconfig-sim-{n}",
                data={wire.KUBECONFIG_KEY: kubeconfigs.dump(runtime_kubeconfig).encode()},
                labels={wire.KYMA_NAME_LABEL: f"sim-{n}"},
            )

    await asyncio.gather(*(one(n) for n in range(count)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", type=int, default=500, help="simulated runtimes (default 500)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kyma-bench-rotation-"))
    binaries = testbin.configured()
    clusters = [kube_mod.KubeCluster(name=name, workdir=work / name, binaries=binaries) for name in ("kcp", "skr")]
    for cluster in clusters:
        cluster.start()
    try:
        for cluster in clusters:
            cluster.wait_ready()
        kcp_cluster, skr_cluster = clusters
        async with await kube.api_client(kcp_cluster.admin_kubeconfig()) as kcp:
            await _register(kcp, skr_cluster.admin_kubeconfig(), args.runtimes)
            store = stores.DirectoryStore(work / "ca")
            await store.write(authority.Authority.create("bench-ca").to_files())
            renewing = rotation.RotationSettings(
                certificate_lifetime=datetime.timedelta(days=30), renew_fraction=0.0, concurrency=1
            )
            started = time.perf_counter()
            report = await rotation.rotate_once(kcp=kcp, store=store, settings=renewing)
            took = time.perf_counter() - started
            rate = len(report.certificates) / took
            print(
                f"{args.runtimes} simulated runtimes. Renewal pass (every certificate issued and written, one at a "
                f"time): {took:.1f} s, {rate:.1f} runtimes/s, failures {len(report.failures)}; "
                f"10,000 runtimes ~{10_000 / rate / 60:.1f} min"
            )
    finally:
        for cluster in clusters:
            cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
