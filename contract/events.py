"""The change event: what a watcher reports, the listener publishes and reconcilers consume.

An event names *what* changed (runtime, object, resourceVersion) and carries the object, so
consumers can act on it or re-read the live state (level-based). Its id is derived from
(runtime, module, uid, resourceVersion): the same change reported twice — a watcher retry, a
relist after a restart, two watcher pods during a leader hand-over — gets the same id, and
JetStream's duplicate window collapses it. The module is part of the id because one object may
be routed to several modules and each of those deliveries must survive deduplication.
"""

import enum
import hashlib
from datetime import UTC, datetime
from typing import Any, Literal, Self

import pydantic
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from contract import errors, ids, subjects

MAX_EVENT_BYTES = 1_000_000
"""Serialised size limit (1 MB). Stays under NATS's default 1 MiB max_payload with headers."""

_TRACEPARENT = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
_K8S_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_API_GROUP = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
_KIND = r"^[A-Za-z][A-Za-z0-9]{0,62}$"


class ChangeType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    RESYNC = "RESYNC"
    """Found by a relist (after a restart or a 410 Gone) rather than seen on a watch."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WatchedObject(_Strict):
    """The Kubernetes object an event is about."""

    # Held to Kubernetes' own naming rules: they travel into NATS headers (CloudEvents) and subjects'
    # neighbours, where a control character or a separator would be an injection.
    group: str = Field(max_length=253, pattern=_API_GROUP, description='API group; "" for the core group')
    version: str = Field(min_length=1, max_length=63, pattern=_DNS_LABEL)
    resource: str = Field(min_length=1, max_length=253, pattern=_K8S_NAME, description="plural resource name")
    kind: str = Field(min_length=1, max_length=63, pattern=_KIND)
    namespace: str | None = Field(default=None, pattern=_K8S_NAME)
    name: str = Field(pattern=_K8S_NAME)
    uid: str = Field(min_length=1, max_length=128)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class TraceContext(_Strict):
    """W3C trace context of the change, so the whole path shows as one trace."""

    traceparent: str = Field(pattern=_TRACEPARENT)
    tracestate: str | None = Field(default=None, max_length=512)


def derive_event_id(
    *,
    runtime: ids.RuntimeId,
    module: ids.ModuleName,
    uid: ids.ObjectUid,
    resource_version: str,
) -> ids.EventId:
    key = "\x00".join((runtime, module, uid, resource_version)).encode()
    return ids.EventId(hashlib.sha256(key).hexdigest()[:32])


class ChangeEvent(_Strict):
    """One observed change of one object in one runtime, routed to one module."""

    schema_version: Literal[1] = 1
    event_id: str = Field(description="derive_event_id(runtime, module, uid, resource_version)")
    runtime: ids.RuntimeIdField
    module: ids.ModuleNameField
    target: WatchedObject
    resource_version: str = Field(min_length=1, max_length=64)
    change_type: ChangeType
    observed_at: AwareDatetime
    body: dict[str, Any] | None = Field(default=None, description="the object as observed (ignored fields removed)")
    reference_only: bool = Field(
        default=False,
        description="the object was too large to carry; consumers read it from the runtime",
    )
    trace: TraceContext | None = None
    watch_set_revision: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{1,64}$",
        description="the revision of KCP's watch set the watcher reported this under (absent: none followed)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        expected = derive_event_id(
            runtime=ids.RuntimeId(self.runtime),
            module=ids.ModuleName(self.module),
            uid=ids.ObjectUid(self.target.uid),
            resource_version=self.resource_version,
        )
        if self.event_id != expected:
            raise ValueError(f"event_id {self.event_id!r} does not match its content")
        if self.reference_only and self.body is not None:
            raise ValueError("a reference-only event carries no body")
        if not self.reference_only and self.body is None and self.change_type != ChangeType.DELETED:
            raise ValueError(f"a {self.change_type} event needs a body or reference_only")
        return self

    @classmethod
    def create(
        cls,
        *,
        runtime: ids.RuntimeId,
        module: ids.ModuleName,
        target: WatchedObject,
        resource_version: str,
        change_type: ChangeType,
        body: dict[str, Any] | None,
        observed_at: datetime | None = None,
        trace: TraceContext | None = None,
        watch_set_revision: str | None = None,
    ) -> "ChangeEvent":
        return cls(
            event_id=derive_event_id(
                runtime=runtime,
                module=module,
                uid=ids.ObjectUid(target.uid),
                resource_version=resource_version,
            ),
            runtime=runtime,
            module=module,
            target=target,
            resource_version=resource_version,
            change_type=change_type,
            observed_at=observed_at or datetime.now(UTC),
            body=body,
            reference_only=body is None and change_type != ChangeType.DELETED,
            trace=trace,
            watch_set_revision=watch_set_revision,
        )

    @property
    def id(self) -> ids.EventId:
        return ids.EventId(self.event_id)

    @property
    def subject(self) -> ids.Subject:
        return subjects.event_subject(module=ids.ModuleName(self.module), runtime=ids.RuntimeId(self.runtime))

    def as_reference(self) -> "ChangeEvent":
        """The same event without its body, for objects too large to carry."""
        return self.model_copy(update={"body": None, "reference_only": True})


class Heartbeat(_Strict):
    """The active watcher of a runtime saying it is alive, every ``heartbeat_seconds``."""

    runtime: ids.RuntimeIdField
    sent_at: AwareDatetime
    queue_depth: int = Field(ge=0, description="objects pending delivery in the watcher")


MAX_HEARTBEAT_BYTES = 4096


def encode(event: ChangeEvent) -> bytes:
    """Serialise, refusing (never truncating) an event over MAX_EVENT_BYTES."""
    data = event.model_dump_json(exclude_none=True).encode()
    if len(data) > MAX_EVENT_BYTES:
        raise errors.EventTooLargeError(size=len(data), limit=MAX_EVENT_BYTES)
    return data


def decode(data: bytes) -> ChangeEvent:
    """Parse and validate untrusted bytes; the size is checked before parsing."""
    if len(data) > MAX_EVENT_BYTES:
        raise errors.EventTooLargeError(size=len(data), limit=MAX_EVENT_BYTES)
    try:
        return ChangeEvent.model_validate_json(data)
    except pydantic.ValidationError as exc:
        raise errors.InvalidEventError(_describe(exc)) from exc


def _describe(exc: pydantic.ValidationError) -> str:
    problems = [
        f"{'.'.join(str(part) for part in err['loc']) or '<root>'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    ]
    return "invalid change event: " + "; ".join(problems)
