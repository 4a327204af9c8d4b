"""Naming kinds in configuration and policy: group + kind, forgiving of how people write them.

People write ``v1/Secret``, ``Secret``, ``secrets``, ``rbac.authorization.k8s.io/v1/ClusterRoleBinding``
or ``apps/Deployment``. A rule written any of these ways must match the object it means whatever
version the object uses, so a rule is a group and a lower-cased name that may be the kind, its
plural or its singular resource name (known from discovery when the object is resolved).
"""

import dataclasses
import re

from pydantic import BaseModel, ConfigDict, Field

_VERSION = re.compile(r"^v\d+((alpha|beta)\d+)?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")
GROUP = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclasses.dataclass(frozen=True)
class GroupKind:
    group: str
    name: str
    """The kind, plural or singular, lower-cased."""

    @classmethod
    def parse(cls, text: str) -> "GroupKind":
        """``[group/][version/]Kind``; ValueError saying what is wrong otherwise."""
        parts = text.strip().split("/")
        if len(parts) == 1:
            group, kind = "", parts[0]
        elif len(parts) == 2:
            group = "" if _VERSION.fullmatch(parts[0]) else parts[0]
            kind = parts[1]
        elif len(parts) == 3 and _VERSION.fullmatch(parts[1]):
            group, kind = parts[0], parts[2]
        else:
            raise ValueError(f"{text!r} is not [group/][version/]Kind")
        group = "" if group == "core" else group
        if group and not GROUP.fullmatch(group):
            raise ValueError(f"{text!r}: {group!r} is not an API group")
        if not _KIND.fullmatch(kind):
            raise ValueError(f"{text!r}: {kind!r} is not a kind")
        return cls(group, kind.lower())

    def matches(self, group: str, *names: str) -> bool:
        """Whether this names an object of ``group`` known by any of ``names`` (kind, plural, singular)."""
        return group == self.group and self.name in {n.lower() for n in names}

    def __str__(self) -> str:
        return f"{self.group}/{self.name}" if self.group else self.name


class KindRule(BaseModel):
    """A kind in a policy: group ("" for core) and kind (or its plural)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = Field(
        default="", pattern=f"^$|{GROUP.pattern}", max_length=253, description='API group; "" for the core group'
    )
    kind: str = Field(pattern=_KIND.pattern, description="the kind, e.g. ConfigMap (plural accepted)")

    def group_kind(self) -> GroupKind:
        return GroupKind.parse(f"{self.group}/v1/{self.kind}" if self.group else self.kind)
