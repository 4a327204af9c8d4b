"""SyncResource as the reconciler reads it: spec validated, status as written (pure data)."""

import enum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strategy(enum.StrEnum):
    CREATE_AND_SYNC = "CreateAndSync"
    """Keep identical: drift is reset."""
    CREATE_AND_IGNORE = "CreateAndIgnore"
    """Create, recreate if deleted, leave edits alone."""
    DELETE = "Delete"
    """Ensure absent; not found is success."""


class State(enum.StrEnum):
    READY = "Ready"
    PROCESSING = "Processing"
    WARNING = "Warning"
    ERROR = "Error"
    DELETING = "Deleting"


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


class Item(_Model):
    name: str = Field(min_length=1)
    strategy: Strategy
    resource: dict[str, Any]
    subresource: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _resource_names_itself(self) -> Self:
        metadata = self.resource.get("metadata") or {}
        if not self.resource.get("apiVersion") or not self.resource.get("kind") or not metadata.get("name"):
            raise ValueError(f"item {self.name!r}: resource needs apiVersion, kind and metadata.name")
        return self

    @property
    def api_version(self) -> str:
        return str(self.resource["apiVersion"])

    @property
    def kind(self) -> str:
        return str(self.resource["kind"])

    @property
    def gvk(self) -> str:
        return f"{self.api_version}/{self.kind}"


class Spec(_Model):
    kyma: str | None = None
    target: Target | None = None
    items: tuple[Item, ...]

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.kyma is None) == (self.target is None):
            raise ValueError("set exactly one of spec.kyma and spec.target")
        names = [item.name for item in self.items]
        if len(names) != len(set(names)):
            raise ValueError("item names must be unique")
        return self


class AppliedRef(_Model):
    """An object this SyncResource put into a runtime; deleted when no item wants it any more."""

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
