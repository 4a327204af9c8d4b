"""Reconciler configuration: one YAML file, one section per controller."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from certs import runtimes
from kit import files


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SyncResourcesSettings(_Section):
    enabled: bool = True
    namespace: str | None = Field(default=None, description="only SyncResources of this namespace (default: all)")
    restricted_kinds: tuple[str, ...] = Field(
        default=("v1/Secret",), description="apiVersion/Kind never synced, e.g. v1/Secret"
    )
    workers: int = Field(default=8, ge=1, description="SyncResources reconciled at once")
    max_concurrent_runtimes: int = Field(default=16, ge=1, description="runtimes one SyncResource writes to at once")
    per_runtime_concurrency: int = Field(default=8, ge=1, description="requests to one runtime at once")
    resync_seconds: float = Field(default=300, gt=0, description="safety-net full resync (with jitter)")


class MirroredKindSettings(_Section):
    group: str
    version: str
    kind: str
    resource: str = Field(description="plural resource name")
    module: str = Field(description="the module watchers route this kind's changes to")


class MirrorSettings(_Section):
    """SKR -> KCP mirroring of the listed kinds (their CRDs must exist in KCP and the runtimes)."""

    enabled: bool = False
    kinds: tuple[MirroredKindSettings, ...] = (
        MirroredKindSettings(
            group="cloud-resources.kyma-project.io", version="v1beta1", kind="VpcPeering",
            resource="vpcpeerings", module="cloud-manager",
        ),
    )
    namespace_prefix: str = Field(default="mirror-", description="KCP namespace of a runtime's mirrors: <prefix><runtime>")
    workers: int = Field(default=8, ge=1)
    resync_seconds: float = Field(default=300, gt=0)


class PerRuntimeSection(_Section):
    enabled: bool = True
    workers: int = Field(default=16, ge=1, description="runtimes written to at once (the fan-out bound)")
    resync_seconds: float = Field(default=300, gt=0)


class ReconcilerSettings(_Section):
    kyma_namespace: str = Field(default=runtimes.KCP_NAMESPACE, description="where the Kyma CRs are")
    kubeconfig_namespace: str = Field(
        default=runtimes.KUBECONFIG_NAMESPACE, description="where the reconcilers' runtime kubeconfig Secrets are"
    )
    kubeconfig_module: str = Field(
        default="kyma-sync", description="the reconcilers use Secrets <module>-kubeconfig-<runtime> minted by kyma-certs"
    )
    events_module: str = Field(default="kyma-sync", description="the module watchers route synced objects to")
    nats_servers: tuple[str, ...] = Field(default=(), description="NATS for watcher events; none: periodic resync only")
    durable_prefix: str = Field(
        default="kyma-reconciler", description="JetStream durable consumers are named <prefix>-<module>"
    )
    management_port: int = Field(default=9092, ge=0, le=65535)
    sync_resources: SyncResourcesSettings = SyncResourcesSettings()
    mirror: MirrorSettings = MirrorSettings()
    module_templates: PerRuntimeSection = PerRuntimeSection()
    kyma: PerRuntimeSection = PerRuntimeSection()


def load(path: Path) -> ReconcilerSettings:
    return files.load_yaml(path, ReconcilerSettings, what="reconciler config")
