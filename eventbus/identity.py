"""NATS identities: nkey pairs of which the server knows only the public half.

A seed (the private half, ``S...``) is written once to a file readable only by its owner and is
what a component or team connects with (``nats --nkey FILE``, nats-py ``nkeys_seed``); the
public key (``U...``) goes into the server configuration with the identity's permissions.
"""

import enum
import os
from pathlib import Path
from typing import Annotated

import nkeys
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract import ids
from eventbus import permissions

NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class Role(enum.StrEnum):
    ADMIN = "admin"
    """Creates and deletes streams; for operators and set-up jobs only."""
    LISTENER = "listener"
    """Publishes change events."""
    RECONCILER = "reconciler"
    """Consumes its own durables, publishes dead letters."""
    TEAM = "team"
    """A central team: one durable filtered to its module."""


class Identity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME, description="also the team's durable consumer name and inbox suffix")
    role: Role
    public_key: str = Field(pattern=r"^U[A-Z2-7]{55}$", description="the nkey the server checks")
    module: ids.ModuleNameField | None = Field(default=None, description="a team's module")
    durable_prefix: str | None = Field(
        default=None, pattern=NAME, description="a reconciler's durables: <prefix>-<module>"
    )
    modules: tuple[ids.ModuleNameField, ...] = Field(default=(), description="a reconciler's modules")
    replicas: tuple[Annotated[str, Field(pattern=NAME)], ...] = Field(
        default=(),
        description="a sharded reconciler's replica identities (StatefulSet pod names): each consumes through "
        "durables <prefix>-<module>-<replica> of its own",
    )

    @model_validator(mode="after")
    def _role_fields(self) -> "Identity":
        if (self.role == Role.TEAM) != (self.module is not None):
            raise ValueError("a team, and only a team, names one module")
        if (self.role == Role.RECONCILER) != (self.durable_prefix is not None and bool(self.modules)):
            raise ValueError("a reconciler, and only a reconciler, has a durable_prefix and modules")
        if self.replicas and self.role != Role.RECONCILER:
            raise ValueError("only a reconciler has replicas")
        return self

    def permissions(self) -> permissions.Permissions:
        if self.role == Role.ADMIN:
            return permissions.admin(self.name)
        if self.role == Role.LISTENER:
            return permissions.listener(self.name)
        if self.role == Role.RECONCILER:
            assert self.durable_prefix is not None
            return permissions.reconciler(
                self.name, durable_prefix=self.durable_prefix, modules=self.modules, replicas=self.replicas
            )
        assert self.module is not None
        return permissions.team(self.name, module=self.module)

    @property
    def inbox_prefix(self) -> str:
        return permissions.inbox_prefix(self.name)


def new_seed(path: Path) -> str:
    """Write a new user seed to ``path`` (owner-only); its public key."""
    seed: bytes = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(seed + b"\n")
    return public_key_of(path)


def public_key_of(path: Path) -> str:
    """The public key of the seed in ``path``."""
    pair = nkeys.from_seed(path.read_bytes().strip())
    try:
        return str(pair.public_key.decode())
    finally:
        pair.wipe()
