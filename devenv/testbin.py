"""kube-apiserver and etcd binaries: found in a per-user cache, or built from the Go module proxy.

The cache lives outside the repo (keyed by Kubernetes version) so fresh clones — CI runs in one —
reuse a build; Go's own module and build caches make a rebuild after a cache loss mostly linking.
"""

import dataclasses
import logging
import os
import subprocess
from pathlib import Path

from devenv import errors

K8S_VERSION = "v1.34.4"
_BUILD_SCRIPT = Path(__file__).with_name("build-testbin.sh")

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Binaries:
    directory: Path

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"

    def complete(self) -> bool:
        return all(os.access(path, os.X_OK) for path in (self.kube_apiserver, self.etcd))


HELM_MODULE = "helm.sh/helm/v3/cmd/helm"
HELM_VERSION = "v3.19.0"


def ensure_helm(*, directory: Path, version: str = HELM_VERSION) -> Path:
    """helm (for chart tests) built from the Go module proxy into ``directory``, once."""
    helm = directory / version / "helm"
    if os.access(helm, os.X_OK):
        return helm
    log.warning("building helm %s into %s (takes minutes, once)", version, helm.parent)
    result = subprocess.run(
        ["go", "install", f"{HELM_MODULE}@{version}"], env={**os.environ, "GOBIN": str(helm.parent)}, check=False
    )
    if result.returncode != 0 or not os.access(helm, os.X_OK):
        raise errors.TestbinBuildError(
            f"building helm {version} failed (exit {result.returncode}); the go output above says why"
        )
    return helm


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kyma-sync" / "testbin"


def configured() -> Binaries:
    """The binaries the environment points at, built into the cache if it points nowhere.

    ``KYMA_SYNC_TESTBIN`` (ours; built there if missing), else ``KUBEBUILDER_ASSETS`` — the
    directory controller-runtime's envtest and setup-envtest use, so a machine that has them needs
    no build (never built into: it is another tool's directory) — else the per-user cache.
    """
    if ours := os.environ.get("KYMA_SYNC_TESTBIN"):
        return ensure(directory=Path(ours))
    if envtest := os.environ.get("KUBEBUILDER_ASSETS"):
        return ensure(directory=Path(envtest), build=False)
    return ensure(directory=default_cache_root() / K8S_VERSION)


def ensure(*, directory: Path, version: str = K8S_VERSION, build: bool = True) -> Binaries:
    """The binaries in ``directory``, building them there first if they are missing."""
    binaries = Binaries(directory)
    if binaries.complete():
        return binaries
    if not build:
        raise errors.TestbinMissingError(
            f"kube-apiserver/etcd {version} not found in {directory}; "
            f"build them with: {_BUILD_SCRIPT} {version} {directory}"
        )
    log.warning("building kube-apiserver and etcd %s into %s (takes minutes, once)", version, directory)
    result = subprocess.run(["bash", str(_BUILD_SCRIPT), version, str(directory)], check=False)
    if result.returncode != 0 or not binaries.complete():
        raise errors.TestbinBuildError(
            f"building kube-apiserver/etcd {version} failed (exit {result.returncode}); the go output above says why"
        )
    return binaries
