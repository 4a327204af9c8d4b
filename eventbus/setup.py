"""Setting a bus up, adding identities, creating its streams (the side effects of ``kyma-eventbus``)."""

import datetime
import logging
from collections.abc import Sequence
from pathlib import Path

from clients import bus
from eventbus import identity, layout
from pki import pki

log = logging.getLogger(__name__)

ADMIN, LISTENER, RECONCILER = "admin", "listener", "reconciler"
_SERVER_CERT_LIFETIME = datetime.timedelta(days=365)


def init(
    directory: Path,
    *,
    server: layout.ServerSettings,
    hosts: Sequence[str],
    reconciler_modules: Sequence[str],
    durable_prefix: str = "kyma-reconciler",
    reconciler_replicas: Sequence[str] = (),
) -> layout.EventBusConfig:
    """A new bus: a CA and server certificate for ``hosts``, and the admin, listener and reconciler identities."""
    if (directory / layout.CONFIG_FILE).exists():
        raise FileExistsError(f"{directory} already holds an event bus ({layout.CONFIG_FILE})")
    ca = pki.create_ca("kyma-sync-nats-ca")
    serving = pki.server_cert(ca, hosts, lifetime=_SERVER_CERT_LIFETIME, peer=True)  # cluster routes: mutual TLS
    for name, content, mode in (
        (layout.CA_FILE, ca.cert_pem, 0o644),
        (layout.CERT_FILE, serving.cert_pem, 0o644),
        (layout.KEY_FILE, serving.key_pem, 0o600),
    ):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    config = layout.EventBusConfig(server=server)
    config = _with(config, directory, name=ADMIN, role=identity.Role.ADMIN)
    config = _with(config, directory, name=LISTENER, role=identity.Role.LISTENER)
    config = _with(
        config,
        directory,
        name=RECONCILER,
        role=identity.Role.RECONCILER,
        durable_prefix=durable_prefix,
        modules=tuple(reconciler_modules),
        replicas=tuple(reconciler_replicas),
    )
    layout.save(config, directory)
    return config


def add_team(directory: Path, *, name: str, module: str) -> identity.Identity:
    """A central team's identity: one durable named ``name`` over ``module``'s subjects."""
    config = _with(layout.load(directory), directory, name=name, role=identity.Role.TEAM, module=module)
    layout.save(config, directory)
    return config.identity(name)


def _with(
    config: layout.EventBusConfig, directory: Path, *, name: str, role: identity.Role, **fields: object
) -> layout.EventBusConfig:
    if any(i.name == name for i in config.identities):
        raise ValueError(f"identity {name!r} exists already")
    seed = layout.seed_file(directory, name)
    public_key = identity.new_seed(seed)
    try:
        new = identity.Identity.model_validate({"name": name, "role": role, "public_key": public_key, **fields})
        # Validated as a whole (not model_copy): the rules across identities must hold for the new one too.
        return layout.EventBusConfig.model_validate({**config.model_dump(), "identities": [*config.identities, new]})
    except ValueError:
        seed.unlink()
        raise


async def ensure_streams(connection: bus.Bus, streams: Sequence[bus.StreamSettings]) -> None:
    """Create the streams, or bring them to the given settings (needs the admin identity)."""
    for stream in streams:
        await connection.ensure_stream(stream)
        log.info("stream ready", extra={"stream": stream.name, "retention": stream.retention})
