"""Listener configuration: a YAML file validated into these models at start-up."""

import ipaddress
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from clients import bus
from contract import ids, wire
from kit import files, loops

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
UpstreamComponentField = Annotated[str, AfterValidator(lambda v: ids.check_dns_label(v, what="upstream component"))]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerTlsSettings(_Section):
    cert_file: Path = Field(description="the listener's serving certificate (PEM)")
    key_file: Path = Field(description="its private key (PEM)")


class TrustSettings(_Section):
    client_ca_file: Path = Field(description="PEM bundle of runtime CAs; holds old and new CA during a CA rotation")
    crl_file: Path | None = Field(default=None, description="PEM CRLs of those CAs")
    reload_interval_seconds: float = Field(
        default=10, gt=0, description="how often certificate, CA and CRL files are re-read"
    )


class ProxySettings(_Section):
    """Behind an ingress that terminates TLS and forwards the verified client certificate."""

    enabled: bool = False
    client_cert_header: str = Field(
        default="X-Forwarded-Client-Cert",
        description="header with the client certificate: Envoy/Istio X-Forwarded-Client-Cert (Cert=...), "
        "or nginx's URL-encoded PEM ($ssl_client_escaped_cert)",
    )
    trusted_proxies: tuple[IPNetwork, ...] = Field(
        default=(),
        description="the proxies' own addresses (or narrow networks: at least /24 for IPv4, /64 for IPv6) "
        "whose forwarded certificate header is believed; anyone else sending it is refused",
    )

    @model_validator(mode="after")
    def _proxies_named(self) -> Self:
        if self.enabled and not self.trusted_proxies:
            raise ValueError("proxy mode needs at least one trusted_proxies address")
        wide = [str(n) for n in self.trusted_proxies if n.prefixlen < (24 if n.version == 4 else 64)]
        if wide:
            raise ValueError(
                f"trusted_proxies must be the proxies' addresses or narrow networks, not {wide}: anyone in "
                "such a range could claim any runtime's identity"
            )
        return self


class RateLimitSettings(_Section):
    events_per_second: float = Field(default=100, gt=0, description="sustained rate per runtime")
    burst: int = Field(default=500, ge=1, description="events a runtime may send at once")


class NatsSettings(_Section):
    servers: tuple[str, ...] = Field(min_length=1)
    credentials: bus.Credentials = Field(
        default=bus.Credentials(), description="the listener's NATS identity (nkey seed), the NATS CA, its inbox prefix"
    )
    publish_timeout_seconds: float = Field(default=5, gt=0)
    stream_full_retry_seconds: float = Field(
        default=10, gt=0, description="Retry-After when the event stream is at its limit"
    )


class IdentitySettings(_Section):
    """What a runtime certificate's CN is."""

    source: Literal["kyma-name", "runtime-id"] = Field(
        default="kyma-name",
        description="kyma-name: the CN is the runtime's Kyma name (kyma-certs' default); runtime-id: the CN is the "
        "kyma-project.io/runtime-id label of its Kyma CR (upstream lifecycle-manager's, kyma-certs --identity "
        "runtime-id), mapped to the Kyma name from a cache of KCP's Kyma CRs",
    )
    kcp_kubeconfig: Path | None = Field(
        default=None, description="runtime-id: kubeconfig to read Kyma CRs with (default: in-cluster service account)"
    )
    kyma_namespace: str = Field(default=wire.KCP_NAMESPACE, description="runtime-id: where the Kyma CRs are")


class ListenerSettings(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=8443, ge=0, le=65535, description="event port (mTLS); 0 picks a free one")
    management_port: int = Field(default=9090, ge=0, le=65535, description="plain-HTTP /healthz, /readyz and /metrics")
    modules: tuple[ids.ModuleNameField, ...] = Field(
        min_length=1, description="modules events may be routed to; others are refused with 422"
    )
    runtime_modules: dict[ids.RuntimeIdField, tuple[ids.ModuleNameField, ...]] = Field(
        default_factory=dict,
        description="per runtime, the modules it may report (others are refused with 403), so one runtime "
        "cannot inject events for a module it does not run",
    )
    default_runtime_modules: tuple[ids.ModuleNameField, ...] = Field(
        default=(wire.SYNC_MODULE,), description="what a runtime not in runtime_modules may report"
    )
    tls: ServerTlsSettings | None = Field(
        default=None, description="serve HTTPS with client-certificate auth (required unless proxy mode)"
    )
    trust: TrustSettings
    proxy: ProxySettings = ProxySettings()
    rate_limit: RateLimitSettings = RateLimitSettings()
    nats: NatsSettings
    shutdown_grace_seconds: float = Field(default=10, ge=0, description="drain time on SIGTERM")
    keepalive_seconds: float = Field(
        default=30,
        gt=0,
        description="a watcher's connection idle this long is closed: held connections follow activity, not the "
        "fleet (an idle watcher reconnects for its heartbeat, once a minute)",
    )
    identity: IdentitySettings = IdentitySettings()
    event_loop: loops.EventLoop = Field(
        default=loops.DEFAULT,
        description="uvloop: sockets and TLS in libuv (about 9 % more events per core in "
        "bench/listener_throughput.py); asyncio: the standard library's loop",
    )
    upstream_components: dict[UpstreamComponentField, ids.ModuleNameField] = Field(
        default_factory=dict,
        description="for runtimes still running Kyma's upstream runtime-watcher: its <component> in "
        "POST /v2/<component>/event (a Watcher CR's manager, lifecycle-manager for KLM's) -> the module its "
        "events go to; empty (the default): every component is refused with 404, so the upstream endpoint is "
        "opened only for a migration",
    )

    @model_validator(mode="after")
    def _upstream_modules_known(self) -> Self:
        unknown = sorted(set(self.upstream_components.values()) - set(self.modules))
        if unknown:
            raise ValueError(f"upstream_components name modules not in modules: {unknown}")
        return self

    @model_validator(mode="after")
    def _tls_or_proxy(self) -> Self:
        if self.tls is None and not self.proxy.enabled:
            raise ValueError("configure tls (direct mTLS) or enable proxy mode")
        allowed = {m for listed in self.runtime_modules.values() for m in listed} | set(self.default_runtime_modules)
        unknown = sorted(allowed - set(self.modules))
        if unknown:
            raise ValueError(f"runtime_modules/default_runtime_modules name modules not in modules: {unknown}")
        return self

    def may_report(self, runtime: str, module: str) -> bool:
        return module in self.runtime_modules.get(runtime, self.default_runtime_modules)


def load(path: Path) -> ListenerSettings:
    return files.load_yaml(path, ListenerSettings, what="listener config")
