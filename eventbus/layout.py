"""The event bus as declared: server settings, identities, streams; and the server configuration from it.

A bus lives in a directory (the set-up of one landscape): ``eventbus.yaml`` (this declaration,
public keys only), ``server.conf`` (generated from it, never edited), ``tls/`` (the server's
certificate and the CA clients verify it with) and ``seeds/<identity>.nk`` (private halves, for
the components and teams to take away). The server configuration is JSON, which nats-server
reads natively; the chart embeds the same ``authorization`` block.
"""

import json
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clients import bus
from eventbus import identity
from kit import files

CONFIG_FILE = "eventbus.yaml"
SERVER_CONF = "server.conf"
CA_FILE = "tls/ca.crt"
CERT_FILE = "tls/server.crt"
KEY_FILE = "tls/server.key"


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(default="0.0.0.0", description="client port address")
    port: int = Field(default=4222, ge=0, le=65535)
    monitor_host: str = Field(default="127.0.0.1", description="/healthz and monitoring: keep it off the network")
    monitor_port: int = Field(default=8222, ge=0, le=65535)
    store_dir: Path = Field(description="JetStream's file store")
    max_store_bytes: int = Field(default=8 << 30, gt=0, description="JetStream's file store limit")
    server_name: str = Field(default="kyma-sync-nats", pattern=r"^[A-Za-z0-9_-]+$", description="unique per cluster")


class ClusterSettings(BaseModel):
    """Routes between the servers of a JetStream cluster (R3 streams survive the loss of one server)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="kyma-sync", pattern=r"^[A-Za-z0-9_-]+$")
    host: str = Field(default="0.0.0.0", description="route address")
    port: int = Field(default=6222, ge=0, le=65535)
    routes: tuple[str, ...] = Field(
        default=(), description="the other servers' routes, tls://HOST:PORT (their certificates must name HOST)"
    )


class EventBusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    server: ServerSettings
    identities: tuple[identity.Identity, ...] = ()
    events: bus.StreamSettings = bus.EVENTS
    dead_letters: bus.StreamSettings = bus.DEAD_LETTERS

    @model_validator(mode="after")
    def _unique(self) -> Self:
        names = [i.name for i in self.identities]
        if len(names) != len(set(names)):
            raise ValueError("identity names must be unique")
        keys = [i.public_key for i in self.identities]
        if len(keys) != len(set(keys)):
            raise ValueError("two identities share a public key")
        prefixes = [f"{i.durable_prefix}-" for i in self.identities if i.durable_prefix]
        for team in (i for i in self.identities if i.role == identity.Role.TEAM):
            taken = next((p for p in prefixes if team.name.startswith(p)), None)
            if taken is not None:
                # The team's durable is named like the team: it must never be (or become) a reconciler's.
                raise ValueError(f"team {team.name!r} is named like a reconciler durable ({taken}...): choose another")
        return self

    def identity(self, name: str) -> identity.Identity:
        for each in self.identities:
            if each.name == name:
                return each
        raise LookupError(f"no identity {name!r}; known: {', '.join(i.name for i in self.identities)}")


def authorization(config: EventBusConfig) -> dict[str, Any]:
    """The server's user list: public keys and permissions; no ``no_auth_user``, so anonymous is refused."""
    return {
        "users": [
            {"nkey": each.public_key, "permissions": each.permissions().as_config()} for each in config.identities
        ]
    }


def server_config(config: EventBusConfig, *, directory: Path, cluster: ClusterSettings | None = None) -> str:
    """The nats-server configuration; ``cluster``: this server's routes to the others of a cluster."""
    server = config.server
    document: dict[str, Any] = {
        "server_name": server.server_name,
        "listen": f"{server.host}:{server.port}",
        "http": f"{server.monitor_host}:{server.monitor_port}",
        "jetstream": {"store_dir": str(server.store_dir), "max_file_store": server.max_store_bytes},
        "tls": {
            "cert_file": str(directory / CERT_FILE),
            "key_file": str(directory / KEY_FILE),
            "timeout": 5,
        },
        "authorization": authorization(config),
    }
    if cluster is not None:
        # Routes are TLS both ways, each server checking the other's certificate against the bus CA.
        document["cluster"] = {
            "name": cluster.name,
            "listen": f"{cluster.host}:{cluster.port}",
            "routes": list(cluster.routes),
            "tls": {
                "cert_file": str(directory / CERT_FILE),
                "key_file": str(directory / KEY_FILE),
                "ca_file": str(directory / CA_FILE),
                "timeout": 5,
            },
        }
    return json.dumps(document, indent=2) + "\n"


def load(directory: Path) -> EventBusConfig:
    return files.load_yaml(directory / CONFIG_FILE, EventBusConfig, what="event bus declaration")


def save(config: EventBusConfig, directory: Path) -> None:
    """Write the declaration and the server configuration generated from it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(files.dump_yaml(config.model_dump(mode="json", exclude_defaults=True)))
    (directory / SERVER_CONF).write_text(server_config(config, directory=directory))


def seed_file(directory: Path, name: str) -> Path:
    return directory / "seeds" / f"{name}.nk"


def credentials(directory: Path, name: str) -> bus.Credentials:
    """What the identity ``name`` connects with."""
    identity = load(directory).identity(name)
    return bus.Credentials(
        nkey_seed_file=seed_file(directory, name), ca_file=directory / CA_FILE, inbox_prefix=identity.inbox_prefix
    )
