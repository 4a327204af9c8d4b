"""Which observed changes are worth reporting (pure logic, no I/O).

A change is noise when
- only ignored fields moved (status churn, managedFields, resourceVersion), found by comparing a
  fingerprint of the object without those fields to the one last seen; or
- every field manager that wrote since the last observation is ignored — our own reconciler's
  server-side applies, which would otherwise echo back as events and loop.
Deletions are always reported.
"""

import dataclasses
import enum
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from contract import events

ALWAYS_IGNORED = ("metadata.managedFields", "metadata.resourceVersion", "metadata.generation")


class Verdict(enum.StrEnum):
    REPORT = "report"
    IGNORED_FIELDS_ONLY = "ignored_fields_only"
    IGNORED_FIELD_MANAGER = "ignored_field_manager"


@dataclasses.dataclass(frozen=True)
class Seen:
    """What the filter remembers of an object between observations."""

    fingerprint: str
    manager_times: dict[str, str]


def without_fields(obj: dict[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """``obj`` without the dotted ``paths`` (missing paths are fine), ``obj`` itself left alone.

    Only the mappings on a removed path are copied; everything else is shared with ``obj``, so the result
    must not be changed (the fingerprint and the event body are both made from ``obj``). A deep copy per
    observation was a tenth of a watcher's CPU while it listed 50,000 objects.
    """
    result = dict(obj)
    for path in paths:
        *parents, leaf = path.split(".")
        node = result
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                break
            node[part] = node = dict(child)
        else:
            node.pop(leaf, None)
    return result


def _manager_times(obj: dict[str, Any]) -> dict[str, str]:
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    return {
        f"{e.get('manager', '')}|{e.get('operation', '')}|{e.get('subresource', '')}": str(e.get("time", ""))
        for e in entries
    }


def _writers_since(current: dict[str, str], previous: dict[str, str] | None) -> set[str]:
    """Managers whose entry is new or has a new time; without history, the latest writer(s)."""
    if previous is None:
        latest = max(current.values(), default="")
        changed = {key for key, time in current.items() if time == latest}
    else:
        changed = {key for key, time in current.items() if previous.get(key) != time}
    return {key.split("|", 1)[0] for key in changed}


class NoiseFilter:
    def __init__(self, *, ignore_fields: Iterable[str], ignore_managers: Iterable[str]) -> None:
        self._ignore_fields = (*ALWAYS_IGNORED, *ignore_fields)
        self._ignore_managers = frozenset(ignore_managers)

    def seen(self, obj: dict[str, Any]) -> Seen:
        stripped = without_fields(obj, self._ignore_fields)
        digest = hashlib.sha256(json.dumps(stripped, sort_keys=True).encode()).hexdigest()
        return Seen(fingerprint=digest, manager_times=_manager_times(obj))

    def classify(
        self, change_type: events.ChangeType, obj: dict[str, Any], previous: Seen | None
    ) -> tuple[Verdict, Seen]:
        """The verdict for this observation, and what to remember of the object from now on."""
        current = self.seen(obj)
        if change_type == events.ChangeType.DELETED:
            return Verdict.REPORT, current
        if change_type in (events.ChangeType.ADDED, events.ChangeType.MODIFIED):
            writers = _writers_since(current.manager_times, previous.manager_times if previous else None)
            if writers and writers <= self._ignore_managers:
                return Verdict.IGNORED_FIELD_MANAGER, current
        if previous is not None and previous.fingerprint == current.fingerprint:
            return Verdict.IGNORED_FIELDS_ONLY, current
        return Verdict.REPORT, current
