"""What a SyncResource reconcile will do, decided without I/O from what KCP says.

Per runtime one of:
- SYNC: selected by the spec and admitted by a SyncBinding: apply the items there;
- FORBIDDEN: selected but no binding admits it: nothing is applied, nothing deleted;
- DEPART: recorded, its Kyma exists and the spec no longer selects it: delete what we own there
  (after the Kyma is read once more from KCP: positive evidence, not a cache's word);
- GONE: recorded, and its Kyma is not in KCP: the runtime was deprovisioned; after KCP confirms
  the Kyma is gone, its records are dropped and nothing is sent there.
Only confirmed facts lead to deletions: an item whose object cannot be resolved keeps every
record of that item; a failed apply keeps its record and its live object.
"""

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler import model, tenancy


class Placement(enum.StrEnum):
    SYNC = "sync"
    FORBIDDEN = "forbidden"
    DEPART = "depart"
    GONE = "gone"


DETAILED_RUNTIMES = 10
"""Up to this many runtimes, status.items names every item in every runtime; beyond, only those not Ready."""
MAX_DETAILS = 100


def status_items(items: Iterable[model.ItemStatus], *, runtimes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(status.items, the rest of the summary) sized for any number of runtimes: per item, how many runtimes are
    Ready of how many; details for every runtime of a small SyncResource, else only for those not Ready — at most
    MAX_DETAILS entries either way, the number left out said."""
    ordered = sorted(items, key=lambda i: (i.runtime, i.name))
    counts: dict[str, list[int]] = {}
    for status in ordered:
        ready_total = counts.setdefault(status.name, [0, 0])
        ready_total[0] += status.state == model.State.READY
        ready_total[1] += 1
    shown = ordered if runtimes <= DETAILED_RUNTIMES else [i for i in ordered if i.state != model.State.READY]
    summary: dict[str, Any] = {
        "summary": [{"name": name, "ready": ready, "total": total} for name, (ready, total) in sorted(counts.items())]
    }
    if len(shown) > MAX_DETAILS:
        summary["detailsOmitted"] = len(shown) - MAX_DETAILS
    return [i.model_dump(exclude_defaults=True) for i in shown[:MAX_DETAILS]], summary


def orphaned(items: Iterable[model.ItemStatus], *, gone: str) -> list[str]:
    """Items whose object is gone for good in every runtime they report on (their message starts with ``gone``)."""
    verdicts: dict[str, bool] = {}
    for status in items:
        is_gone = status.state == model.State.READY and status.message.startswith(gone)
        verdicts[status.name] = verdicts.get(status.name, True) and is_gone
    return sorted(name for name, all_gone in verdicts.items() if all_gone)


def selects(spec: model.Spec, runtime: str, labels: Mapping[str, str]) -> bool:
    if spec.kyma is not None:
        return runtime == spec.kyma
    assert spec.target is not None
    return spec.target.selector.matches(dict(labels))


def place(
    spec: model.Spec,
    *,
    kymas: Mapping[str, Mapping[str, str]],
    recorded: Iterable[str],
    policy: tenancy.Policy,
) -> dict[str, Placement]:
    """Where each runtime stands; ``kymas`` maps every runtime KCP knows to its labels (a synced cache)."""
    placements: dict[str, Placement] = {}
    for runtime, labels in kymas.items():
        if selects(spec, runtime, labels):
            placements[runtime] = Placement.SYNC if policy.admits_runtime(dict(labels)) else Placement.FORBIDDEN
    for runtime in recorded:
        if runtime not in placements:
            placements[runtime] = Placement.DEPART if runtime in kymas else Placement.GONE
    return dict(sorted(placements.items()))


_SEVERITY = (
    model.State.ERROR,
    model.State.CONFLICT,
    model.State.FORBIDDEN,
    model.State.WARNING,
    model.State.DELETING,
    model.State.PROCESSING,
    model.State.READY,
)


def overall(states: Iterable[model.State]) -> model.State:
    """The SyncResource's state: its worst item's (Ready when it has none)."""
    present = set(states)
    return next((s for s in _SEVERITY if s in present), model.State.READY)


ObjectIdentity = tuple[str, str, str | None, str]
"""(group, kind, namespace, name): an object whatever API version it is read through."""


def identity(api_version: str, kind: str, namespace: str | None, name: str) -> ObjectIdentity:
    group, _, _ = api_version.rpartition("/")
    return group, kind, namespace, name


def stale(
    recorded: Iterable[model.AppliedRef], *, wanted: set[ObjectIdentity], unresolved_items: set[str]
) -> list[model.AppliedRef]:
    """Records no item wants any more: neither an item that still names that object, nor one we could not resolve."""
    return [
        record
        for record in recorded
        if record.item not in unresolved_items
        and identity(record.api_version, record.kind, record.namespace, record.name) not in wanted
    ]
