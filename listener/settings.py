"""Listener configuration: a YAML file validated into these models at start-up."""

import ipaddress
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clients import bus
from contract import ids
from kit import files

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


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
        default="X-Forwarded-Client-Cert", description="header with the URL-encoded PEM certificate"
    )
    trusted_proxies: tuple[IPNetwork, ...] = Field(
        default=(), description="addresses whose forwarded certificate header is believed"
    )

    @model_validator(mode="after")
    def _proxies_named(self) -> Self:
        if self.enabled and not self.trusted_proxies:
            raise ValueError("proxy mode needs at least one trusted_proxies network")
        return self


class RateLimitSettings(_Section):
    events_per_second: float = Field(default=100, gt=0, description="sustained rate per runtime")
    burst: int = Field(default=500, ge=1, description="events a runtime may send at once")


class NatsSettings(_Section):
    servers: tuple[str, ...] = Field(min_length=1)
    publish_timeout_seconds: float = Field(default=5, gt=0)
    stream: bus.StreamSettings = bus.StreamSettings()


class ListenerSettings(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=8443, ge=0, le=65535, description="event port (mTLS); 0 picks a free one")
    management_port: int = Field(default=9090, ge=0, le=65535, description="plain-HTTP /healthz, /readyz and /metrics")
    modules: tuple[ids.ModuleNameField, ...] = Field(
        min_length=1, description="modules events may be routed to; others are refused with 422"
    )
    tls: ServerTlsSettings | None = Field(
        default=None, description="serve HTTPS with client-certificate auth (required unless proxy mode)"
    )
    trust: TrustSettings
    proxy: ProxySettings = ProxySettings()
    rate_limit: RateLimitSettings = RateLimitSettings()
    nats: NatsSettings
    shutdown_grace_seconds: float = Field(default=10, ge=0, description="drain time on SIGTERM")

    @model_validator(mode="after")
    def _tls_or_proxy(self) -> Self:
        if self.tls is None and not self.proxy.enabled:
            raise ValueError("configure tls (direct mTLS) or enable proxy mode")
        return self


def load(path: Path) -> ListenerSettings:
    return files.load_yaml(path, ListenerSettings, what="listener config")
