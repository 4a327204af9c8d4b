"""SyncResource as the reconciler reads it: spec validated, status as written (pure data).

Every item is validated before anything is sent anywhere: apiVersion, kind, name and namespace
must be what the apiserver itself would accept, so no part of an item can become anything but
one path segment of the request (the CRD checks the same, this is the second line).
"""

import enum
import re
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
API_VERSION = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z]([-a-z0-9]*[a-z0-9])?$"
KIND = r"^[A-Za-z][A-Za-z0-9]*$"


class Strategy(enum.StrEnum):
    CREATE_AND_SYNC = "CreateAndSync"
    """Keep identical: drift is reset."""
    CREATE_AND_IGNORE = "CreateAndIgnore"
    """Create, recreate if deleted, leave edits alone."""
    DELETE = "Delete"
    """Ensure absent; not found is success."""


class Adoption(enum.StrEnum):
    NEVER = "Never"
    """An object that exists and carries no owner marker is left alone (Warning "exists, not managed")."""
    IF_UNMANAGED = "IfUnmanaged"
    """Take over (or, for Delete, delete) an existing object that no SyncResource manages."""


class State(enum.StrEnum):
    READY = "Ready"
    PROCESSING = "Processing"
    WARNING = "Warning"
    ERROR = "Error"
    DELETING = "Deleting"
    CONFLICT = "Conflict"
    """Another SyncResource manages the object."""
    FORBIDDEN = "Forbidden"
    """No SyncBinding lets this namespace put this object into this runtime."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Requirement(_Model):
    key: str
    operator: str = Field(pattern="^(In|NotIn|Exists|DoesNotExist)$")
    values: tuple[str, ...] = ()


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[Requirement, ...] = Field(default=(), alias="matchExpressions")

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for requirement in self.match_expressions:
            present = requirement.key in labels
            value = labels.get(requirement.key)
            satisfied = {
                "In": present and value in requirement.values,
                "NotIn": not present or value not in requirement.values,
                "Exists": present,
                "DoesNotExist": not present,
            }[requirement.operator]
            if not satisfied:
                return False
        return True


class Target(_Model):
    selector: LabelSelector


def _check(value: Any, pattern: str, *, what: str, max_length: int) -> str:
    if not isinstance(value, str) or len(value) > max_length or not re.fullmatch(pattern, value):
        raise ValueError(f"{what} {value!r} is not valid (pattern {pattern}, at most {max_length} characters)")
    return value


class Item(_Model):
    name: str = Field(min_length=1, max_length=253)
    strategy: Strategy
    resource: dict[str, Any]
    subresource: dict[str, Any] | None = None
    adoption: Adoption = Adoption.NEVER

    @field_validator("resource")
    @classmethod
    def _names_itself_validly(cls, resource: dict[str, Any]) -> dict[str, Any]:
        metadata = resource.get("metadata")
        if not isinstance(metadata, dict):
            raise ValueError("resource needs metadata with a name")
        _check(resource.get("apiVersion"), API_VERSION, what="apiVersion", max_length=316)
        _check(resource.get("kind"), KIND, what="kind", max_length=63)
        _check(metadata.get("name"), DNS_SUBDOMAIN, what="metadata.name", max_length=253)
        if metadata.get("namespace") is not None:
            _check(metadata["namespace"], DNS_LABEL, what="metadata.namespace", max_length=63)
        return resource

    @field_validator("subresource")
    @classmethod
    def _status_only(cls, subresource: dict[str, Any] | None) -> dict[str, Any] | None:
        if subresource and set(subresource) != {"status"}:
            raise ValueError(f"only the status subresource may be set, not {sorted(set(subresource) - {'status'})}")
        return subresource

    @property
    def api_version(self) -> str:
        return str(self.resource["apiVersion"])

    @property
    def group(self) -> str:
        group, _, _ = self.api_version.rpartition("/")
        return group

    @property
    def kind(self) -> str:
        return str(self.resource["kind"])

    @property
    def object_name(self) -> str:
        return str(self.resource["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        namespace = self.resource["metadata"].get("namespace")
        return str(namespace) if namespace else None

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return self.group, self.kind, self.namespace or "", self.object_name


class Spec(_Model):
    kyma: str | None = Field(default=None, pattern=DNS_SUBDOMAIN)
    target: Target | None = None
    items: tuple[Item, ...]

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.kyma is None) == (self.target is None):
            raise ValueError("set exactly one of spec.kyma and spec.target")
        names = [item.name for item in self.items]
        if len(names) != len(set(names)):
            raise ValueError("item names must be unique")
        identities = [item.identity for item in self.items]
        if len(identities) != len(set(identities)):
            raise ValueError("two items name the same object")
        return self


class AppliedRef(_Model):
    """An object this SyncResource may have put into a runtime; checked and deleted once no item wants it."""

    runtime: str
    item: str
    api_version: str = Field(alias="apiVersion")
    kind: str
    namespace: str | None = None
    name: str


class ItemStatus(_Model):
    name: str
    runtime: str
    state: State
    message: str = ""


def applied_refs(status: dict[str, Any] | None) -> list[AppliedRef]:
    return [AppliedRef.model_validate(entry) for entry in (status or {}).get("applied") or []]
