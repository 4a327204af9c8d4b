"""Reconciler configuration: one YAML file, one section per concern, passed down as it is."""

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clients import bus, kube
from contract import wire
from kit import files, loops
from reconciler import kinds, tenancy


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ControllerSettings(_Section):
    """What every controller has: whether it runs, its workers, its safety-net resync."""

    enabled: bool = True
    workers: int = Field(default=8, ge=1, description="keys reconciled at once")
    resync_seconds: float = Field(default=300, gt=0, description="safety-net full resync (spread with jitter)")
    reconcile_timeout_seconds: float = Field(
        default=300, gt=0, description="one reconcile is abandoned after this long"
    )
    backoff_max_seconds: float = Field(
        default=300,
        gt=0,
        description="a failing key is retried after half a second, then twice as long each time, up to this",
    )


class SyncResourcesSettings(ControllerSettings):
    namespace: str | None = Field(default=None, description="only SyncResources of this namespace (default: all)")
    restricted_kinds: tuple[str, ...] = Field(
        default=("v1/Secret",),
        description="kinds never synced nor deleted, as [group/][version/]Kind (e.g. v1/Secret, "
        "rbac.authorization.k8s.io/ClusterRoleBinding); matched by group and kind",
    )
    protected_namespaces: tuple[str, ...] = Field(
        default=tenancy.DEFAULT_PROTECTED_NAMESPACES,
        description="runtime namespaces only a SyncBinding with allowPrivileged (or naming them in "
        "targetNamespaces) may write to",
    )
    secret_namespaces: tuple[str, ...] = Field(
        default=(),
        description="KCP namespaces whose SyncResources may take Secret data from KCP Secrets (secretRef); those "
        "Secrets must carry the label sync.kyma-project.io/source=true. Empty: secretRef is off",
    )
    runtime_timeout_seconds: float = Field(
        default=120,
        gt=0,
        description="one runtime's share of a reconcile is abandoned after this long, keeping the record of "
        "what it may have written (below reconcile_timeout_seconds, so the record is always saved)",
    )
    max_concurrent_runtimes: int = Field(default=16, ge=1, description="runtimes one SyncResource writes to at once")
    per_runtime_concurrency: int = Field(default=8, ge=1, description="requests to one runtime at once")

    @model_validator(mode="after")
    def _runtime_within_reconcile(self) -> Self:
        if self.runtime_timeout_seconds >= self.reconcile_timeout_seconds:
            raise ValueError("runtime_timeout_seconds must be below reconcile_timeout_seconds")
        return self

    @field_validator("restricted_kinds")
    @classmethod
    def _parseable(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            kinds.GroupKind.parse(entry)
        return value


class MirroredKindSettings(_Section):
    group: str
    version: str
    kind: str
    resource: str = Field(description="plural resource name")
    module: str = Field(description="the module watchers route this kind's changes to")

    @property
    def gvr(self) -> kube.Gvr:
        return kube.Gvr(self.group, self.version, self.resource)


class MirrorSettings(ControllerSettings):
    """SKR -> KCP mirroring of the listed kinds (their CRDs must exist in KCP and the runtimes)."""

    enabled: bool = False
    kinds: tuple[MirroredKindSettings, ...] = (
        MirroredKindSettings(
            group="cloud-resources.kyma-project.io",
            version="v1beta1",
            kind="VpcPeering",
            resource="vpcpeerings",
            module="cloud-manager",
        ),
    )
    namespace_prefix: str = Field(
        default="mirror-", description="KCP namespace of a runtime's mirrors: <prefix><runtime>"
    )
    held_warning_seconds: float = Field(
        default=300,
        gt=0,
        description="a mirror of an earlier object of a name, still being deleted this long (its manager's "
        "finalizers), holds back the new object's mirror: warned about once (a Warning Event on it, a warning log) "
        "and counted in kyma_reconciler_mirrors_held while it lasts",
    )


class PerRuntimeSettings(ControllerSettings):
    workers: int = Field(default=16, ge=1, description="runtimes written to at once (the fan-out bound)")
    runtime_crds: Literal["never", "create-if-absent"] = Field(
        default="never",
        description="the CRD of the kind this controller writes in runtimes (Kyma, ModuleTemplate) belongs to "
        "lifecycle-manager: never touched by default; create-if-absent creates it where missing (local landscapes, "
        "runtimes without lifecycle-manager), never replacing one that exists",
    )


class WatchSetSettings(ControllerSettings):
    """Per runtime, the watcher's watch set derived in KCP (``reconciler.watch_sets``)."""

    enabled: bool = Field(
        default=False,
        description="write each runtime's watch set (and a ClusterRole for it) into the runtime; the watcher follows "
        "it when its configuration has central",
    )
    watcher_service_account: str = Field(
        default="kyma-watcher", description="the watcher's ServiceAccount in kyma-system, granted the derived watches"
    )


class WatcherInstallSettings(ControllerSettings):
    """KCP installs, repairs and removes the watcher in every runtime (``reconciler.watcher_install``)."""

    enabled: bool = False
    resync_seconds: float = Field(
        default=60, gt=0, description="how soon a deleted or changed watcher object is repaired"
    )
    image: str = Field(default="kyma-sync:0.1.0", min_length=1)
    listeners: tuple[str, ...] = Field(
        default=(), max_length=2, description="the listener URL(s) watchers post to (primary, fallback)"
    )
    kind: Literal["Deployment", "DaemonSet"] = Field(
        default="Deployment",
        description="Deployment: two replicas spread by anti-affinity (one sender by the Lease, one ready); "
        "DaemonSet: one pod per node",
    )
    management_port: int = Field(default=9091, ge=1, le=65535)

    @model_validator(mode="after")
    def _listeners_when_enabled(self) -> Self:
        if self.enabled and not self.listeners:
            raise ValueError("watcher_install needs listeners: the URL(s) the watchers post to")
        return self


class NatsSettings(_Section):
    """Where watcher events come from; without servers only KCP watches and the resync trigger reconciles."""

    servers: tuple[str, ...] = Field(default=(), description="NATS URLs")
    credentials: bus.Credentials = Field(
        default=bus.Credentials(),
        description="the reconciler's NATS identity (nkey seed), the NATS CA, its inbox prefix",
    )
    durable_prefix: str = Field(
        default="kyma-reconciler", description="JetStream durable consumers are named <prefix>-<module>"
    )
    max_deliveries: int = Field(
        default=8, ge=1, description="deliveries of one event before it goes to the dead-letter subject"
    )
    ack_wait_seconds: float = Field(
        default=30,
        gt=0,
        description="JetStream redelivers an event unacked this long; kept alive while its reconcile runs",
    )
    max_in_flight: int = Field(default=256, ge=1, description="events being handled at once per module")


class ShardingSettings(_Section):
    """Several replicas share the runtimes (``reconciler.sharding``); off, one replica reconciles everything."""

    enabled: bool = False
    identity: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="this replica's name among its peers, stable across restarts (a StatefulSet pod name; the CLI "
        "defaults it to $POD_NAME): its Lease and its NATS durables <prefix>-<module>-<identity> carry it",
    )
    shards: int = Field(default=16, ge=1, le=256, description="runtimes are split into this many Lease-held shards")
    namespace: str = Field(default=wire.KCP_NAMESPACE, description="where the member and shard Leases are")
    lease_prefix: str = Field(
        default="kyma-reconciler",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$",
        description="Lease names start so (the chart: the release name)",
    )
    lease_duration_seconds: float = Field(
        default=10, gt=0, description="a replica silent this long loses its shards to the others"
    )
    renew_interval_seconds: float = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if 2 * self.renew_interval_seconds >= self.lease_duration_seconds:
            raise ValueError("renew_interval_seconds must be under half of lease_duration_seconds")
        return self


class ReconcilerSettings(_Section):
    kyma_namespace: str = Field(default=wire.KCP_NAMESPACE, description="where the Kyma CRs are")
    kubeconfig_namespace: str = Field(
        default=wire.KUBECONFIG_NAMESPACE, description="where the reconcilers' runtime kubeconfig Secrets are"
    )
    kubeconfig_module: str = Field(
        default=wire.SYNC_MODULE,
        description="the reconcilers use Secrets <module>-kubeconfig-<runtime> minted by kyma-certs",
    )
    events_module: str = Field(default=wire.SYNC_MODULE, description="the module watchers route synced objects to")
    kcp_lifecycle_manager_crds: Literal["never", "create-if-absent"] = Field(
        default="create-if-absent",
        description="lifecycle-manager's Kyma and ModuleTemplate CRDs in KCP: created at start where missing (a KCP "
        "without lifecycle-manager), never replacing existing ones; never: not touched",
    )
    nats: NatsSettings = NatsSettings()
    management_port: int = Field(default=9092, ge=0, le=65535)
    runtime_client_idle_seconds: float = Field(
        default=120,
        gt=0,
        description="a runtime's API client unused this long is closed (KCP memory follows activity, not the fleet)",
    )
    kubernetes_events_per_second: float = Field(
        default=10,
        gt=0,
        description="Kubernetes Events this replica writes into KCP, on average at most (each is an etcd write kept "
        "for the event TTL); besides, an object gets 25 at once, then one every 5 minutes. The rest are dropped and "
        "counted (kyma_reconciler_kubernetes_events_dropped_total)",
    )
    kubernetes_events_burst: int = Field(default=100, ge=1, description="Kubernetes Events written at once, at most")
    shutdown_grace_seconds: float = Field(
        default=25, ge=0, description="after SIGTERM, how long running reconciles may take to finish"
    )
    event_loop: loops.EventLoop = Field(
        default=loops.DEFAULT,
        description="uvloop: sockets and TLS in libuv (the reconciler's work is mostly TLS requests to apiservers); "
        "asyncio: the standard library's loop",
    )
    sync_resources: SyncResourcesSettings = SyncResourcesSettings()
    mirror: MirrorSettings = MirrorSettings()
    module_templates: PerRuntimeSettings = PerRuntimeSettings()
    kyma: PerRuntimeSettings = PerRuntimeSettings()
    watch_sets: WatchSetSettings = WatchSetSettings()
    watcher_install: WatcherInstallSettings = WatcherInstallSettings()
    sharding: ShardingSettings = ShardingSettings()


def load(path: Path) -> ReconcilerSettings:
    return files.load_yaml(path, ReconcilerSettings, what="reconciler config")
