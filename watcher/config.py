"""Watcher configuration: a YAML file (mounted from a ConfigMap), re-read when it changes."""

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clients import kube
from contract import ids, watch_sets, wire
from kit import files


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WatchSpec(_Section):
    """One resource to watch, and the module its changes are routed to."""

    group: str = Field(default="", description='API group; "" for core')
    version: str
    resource: str = Field(description="plural resource name, e.g. configmaps")
    namespaces: tuple[str, ...] | None = Field(
        default=None, description="namespaces to watch; all namespaces when omitted"
    )
    label_selector: str = Field(
        description="only kyma-related objects are reported, so a selector is required",
        min_length=1,
    )
    module: ids.ModuleNameField
    ignore_fields: tuple[str, ...] = Field(
        default=(), description="dotted paths whose changes alone are noise, e.g. status"
    )

    @property
    def gvr(self) -> kube.Gvr:
        return kube.Gvr(self.group, self.version, self.resource)

    @property
    def key(self) -> str:
        """Identifies the watch in checkpoints; stable across config reloads."""
        scope = ",".join(self.namespaces) if self.namespaces else "*"
        return f"{self.gvr.api_version}/{self.resource}|{scope}|{self.label_selector}|{self.module}"


class ListenerEndpoint(_Section):
    url: str = Field(pattern=r"^https?://", description="base URL; events go to <url>/v1/events")


class TlsSettings(_Section):
    cert_file: Path = Field(description="the runtime's client certificate (renewed in place)")
    key_file: Path
    ca_file: Path = Field(description="CA bundle that signed the listener's certificate")


class DeliverySettings(_Section):
    senders: int = Field(default=4, ge=1, le=64, description="concurrent requests to the listener")
    queue_size: int = Field(default=10_000, ge=1, description="distinct objects pending; the watch waits when full")
    request_timeout_seconds: float = Field(default=10, gt=0)
    backoff_initial_seconds: float = Field(default=0.2, gt=0)
    backoff_max_seconds: float = Field(default=30, gt=0)
    heartbeat_seconds: float = Field(
        default=60, ge=1, description="how often the active watcher tells the listener it is alive"
    )
    keepalive_seconds: float = Field(
        default=15,
        gt=0,
        description="an idle connection to the listener is reused for this long (aiohttp's default, 15). Keep it "
        "a few seconds below the listener's keepalive_seconds (30 by default), or requests go out on "
        "connections the listener is closing: each is sent again at once (kyma_watcher_delivery_resent counts "
        "them), costing a request and a handshake. Above heartbeat_seconds on both sides, a runtime "
        "holds one connection: about 47 KiB of listener memory each, against a TLS handshake per heartbeat (at "
        "10,000 runtimes about 460 MiB against a third of a listener core)",
    )
    drain_seconds: float = Field(
        default=10,
        ge=0,
        description="on a configuration change, how long what was already detected may take to be delivered "
        "before the pipeline restarts (the checkpoint resends whatever is left)",
    )

    @model_validator(mode="after")
    def _retries_deduplicated(self) -> Self:
        # An event published whose answer was lost may be sent again at once (a closed connection), then after
        # the backoff: both within the window, or it could be stored twice.
        if 2 * self.request_timeout_seconds + self.backoff_max_seconds > wire.DEDUP_WINDOW_SECONDS:
            raise ValueError(
                f"2 x request_timeout_seconds + backoff_max_seconds must fit in JetStream's duplicate window "
                f"({wire.DEDUP_WINDOW_SECONDS:g}s), or a retried event could be stored twice"
            )
        return self


class LeaseSettings(_Section):
    namespace: str = "kyma-system"
    name: str = "kyma-watcher"
    duration_seconds: float = Field(default=6, gt=0, description="a leader silent this long is replaced")
    renew_interval_seconds: float = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _renew_within_duration(self) -> Self:
        if self.renew_interval_seconds >= self.duration_seconds:
            raise ValueError("renew_interval_seconds must be shorter than duration_seconds")
        return self


class CheckpointSettings(_Section):
    """Where the last delivered resourceVersions are kept, so a restart resends only changes."""

    namespace: str = "kyma-system"
    config_map: str = "kyma-watcher-checkpoint"
    interval_seconds: float = Field(default=2, gt=0)


class CentralSettings(_Section):
    """Where KCP writes this runtime's watch set (``contract.watch_sets``), merged into this configuration."""

    namespace: str = watch_sets.NAMESPACE
    config_map: str = watch_sets.CONFIG_MAP


class WatcherConfig(_Section):
    runtime: ids.RuntimeIdField = Field(description="this runtime's Kyma name (its certificate's CN)")
    listeners: tuple[ListenerEndpoint, ...] = Field(
        min_length=1, max_length=2, description="primary endpoint, and a second used when it is unreachable"
    )
    tls: TlsSettings
    watches: tuple[WatchSpec, ...] = Field(min_length=1)
    ignore_field_managers: tuple[str, ...] = Field(
        default=(wire.RECONCILER_FIELD_MANAGER,),
        description="writes by these field managers (our reconcilers) are not reported",
    )
    paused: bool = Field(default=False, description="report nothing from this runtime")
    paused_modules: tuple[ids.ModuleNameField, ...] = ()
    delivery: DeliverySettings = DeliverySettings()
    lease: LeaseSettings = LeaseSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    management_port: int | None = Field(
        default=9091,
        ge=0,
        le=65535,
        description="/healthz /readyz /metrics; none: no endpoint (many agents in one process)",
    )
    watch_timeout_seconds: int = Field(default=300, ge=5, description="server-side watch timeout")
    central: CentralSettings | None = Field(
        default=None,
        description="follow the watch set KCP derives for this runtime (synced kinds, Kyma CR, templates, mirrored "
        "kinds) and its pause flags, in addition to the watches listed here",
    )

    @model_validator(mode="after")
    def _unique_watches(self) -> Self:
        keys = [w.key for w in self.watches]
        if len(keys) != len(set(keys)):
            raise ValueError("two watches have the same resource, scope, selector and module")
        return self

    def connections_needed(self) -> int:
        """API connections held at once: one watch per resource and namespace, plus Lease and checkpoint."""
        watches = sum(len(w.namespaces) if w.namespaces else 1 for w in self.watches)
        return watches + 4

    def is_paused(self, module: str) -> bool:
        return self.paused or module in self.paused_modules

    def merged(self, watch_set: watch_sets.WatchSet | None) -> "WatcherConfig":
        """This configuration with KCP's watch set added (its watches, its pause flags)."""
        if watch_set is None:
            return self
        known = {w.key for w in self.watches}
        central = [
            WatchSpec(
                group=w.group,
                version=w.version,
                resource=w.resource,
                label_selector=w.label_selector,
                module=w.module,
                ignore_fields=w.ignore_fields,
            )
            for w in watch_set.watches
        ]
        added = []
        for watch in central:  # one watch per key: the first of two that differ only in ignored fields wins
            if watch.key not in known:
                known.add(watch.key)
                added.append(watch)
        return self.model_copy(
            update={
                "watches": (*self.watches, *added),
                "paused": self.paused or watch_set.paused,
                "paused_modules": tuple(sorted({*self.paused_modules, *watch_set.paused_modules})),
            }
        )


def load(path: Path) -> WatcherConfig:
    return files.load_yaml(path, WatcherConfig, what="watcher config")
