"""What KCP tells a runtime's watcher to watch: a watch set, written into the runtime as a ConfigMap.

The reconciler derives it per runtime (every kind a SyncResource applied there, the Kyma CR, the
ModuleTemplates, the mirrored kinds) and writes it; the watcher merges it into its own
configuration and restarts its pipeline when the revision changes. Neither imports the other: this
document is their contract.
"""

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

from contract import ids

NAMESPACE = "kyma-system"
CONFIG_MAP = "kyma-watcher-watch-set"
DATA_KEY = "watch-set.json"
PAUSED_LABEL = "kyma-project.io/watcher-paused"
"""On a KCP Kyma CR, "true": that runtime's watcher reports nothing (a group: label several Kymas)."""
PAUSED_MODULES_ANNOTATION = "kyma-project.io/watcher-paused-modules"
"""On a KCP Kyma CR: comma-separated modules whose changes that runtime's watcher does not report."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


API_GROUP = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
RESOURCE = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
"""Kubernetes' naming rules: no wildcard ("*") or subresource ("/") can become a watch or an RBAC grant."""


class CentralWatch(_Strict):
    group: str = Field(max_length=253, pattern=API_GROUP)
    version: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    resource: str = Field(min_length=1, max_length=253, pattern=RESOURCE)
    label_selector: str = Field(min_length=1)
    module: ids.ModuleNameField
    ignore_fields: tuple[str, ...] = ()


class WatchSet(_Strict):
    revision: str = Field(description="a hash of the rest: the watcher restarts its pipeline when it changes")
    watches: tuple[CentralWatch, ...] = ()
    paused: bool = False
    paused_modules: tuple[ids.ModuleNameField, ...] = ()

    @classmethod
    def of(
        cls, watches: list[CentralWatch], *, paused: bool = False, paused_modules: tuple[str, ...] = ()
    ) -> "WatchSet":
        ordered = tuple(
            sorted(set(watches), key=lambda w: (w.group, w.resource, w.label_selector, w.module, w.ignore_fields))
        )
        modules = tuple(sorted(set(paused_modules)))
        body = json.dumps(
            {"watches": [w.model_dump() for w in ordered], "paused": paused, "paused_modules": modules}, sort_keys=True
        )
        return cls(
            revision=hashlib.sha256(body.encode()).hexdigest()[:16],
            watches=ordered,
            paused=paused,
            paused_modules=modules,
        )

    def encode(self) -> str:
        return self.model_dump_json()

    @classmethod
    def decode(cls, data: str) -> "WatchSet":
        return cls.model_validate_json(data)
