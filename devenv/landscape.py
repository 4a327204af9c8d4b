"""The whole local landscape: NATS, one KCP and N SKR clusters, started in parallel."""

import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from devenv import kube, nats, testbin
from eventbus import layout as eventbus_layout

log = logging.getLogger(__name__)

DEFAULT_RUNTIMES = ("skr-1", "skr-2")


@dataclasses.dataclass
class Landscape:
    workdir: Path
    nats: nats.NatsServer
    kcp: kube.KubeCluster
    runtimes: dict[str, kube.KubeCluster]

    def clusters(self) -> Iterator[kube.KubeCluster]:
        yield self.kcp
        yield from self.runtimes.values()

    def describe(self) -> dict[str, Any]:
        return {
            "nats": self.nats.url,
            "nats_tls_ca": str(self.nats.credentials().ca_file),
            "nats_credentials": {
                identity.name: str(self.nats.credentials(identity.name).nkey_seed_file)
                for identity in eventbus_layout.load(self.nats.directory).identities
            },
            "kcp": {"server": self.kcp.server, "kubeconfig": str(self.kcp.admin_kubeconfig_path)},
            "runtimes": {
                name: {"server": cluster.server, "kubeconfig": str(cluster.admin_kubeconfig_path)}
                for name, cluster in self.runtimes.items()
            },
            "logs": str(self.workdir),
        }

    def stop(self) -> None:
        for cluster in self.clusters():
            cluster.stop()
        self.nats.stop()


def start(
    *,
    workdir: Path,
    binaries: testbin.Binaries,
    runtimes: Sequence[str] = DEFAULT_RUNTIMES,
) -> Landscape:
    """Start everything and wait until all of it is ready; on failure, stop what started."""
    landscape = Landscape(
        workdir=workdir,
        nats=nats.NatsServer(workdir=workdir / "nats"),
        kcp=kube.KubeCluster(name="kcp", workdir=workdir / "kcp", binaries=binaries),
        runtimes={name: kube.KubeCluster(name=name, workdir=workdir / name, binaries=binaries) for name in runtimes},
    )
    began = time.monotonic()
    try:
        landscape.nats.start()
        for cluster in landscape.clusters():
            cluster.start()
        landscape.nats.prepare()
        for cluster in landscape.clusters():
            cluster.wait_ready()
            log.info("%s ready at %s", cluster.name, cluster.server)
    except BaseException:
        landscape.stop()
        raise
    log.info("landscape ready in %.1fs", time.monotonic() - began)
    return landscape
