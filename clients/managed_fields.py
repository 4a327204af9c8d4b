"""managedFields: what a create left to an Update entry, handed to the same manager's Apply entry; a manager's
entries handed to another when an object is let go; what a manager owns that it no longer wants.

A create (POST) is recorded as an Update, and what an Update set is never removed by a later server-side apply of
the same manager that leaves it out: the apiserver sees another owner of it. kubectl's csaupgrade moves such
ownership into the Apply entry by rewriting managedFields; ``as_applied`` computes the rewrite. FieldsV1 is a tree:
a field is a key, its children the keys of its value, an empty value a field owned as a leaf.
"""

from typing import Any


def _of(entry: dict[str, Any], manager: str, operation: str) -> bool:
    """``manager``'s entry for ``operation`` on the object itself (a status subresource's entry is its own)."""
    return entry.get("manager") == manager and entry.get("operation") == operation and not entry.get("subresource")


def _union(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    merged = dict(left)
    for key, value in right.items():
        merged[key] = _union(merged[key], value) if key in merged else value
    return merged


def _common(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """The fields in both (a field a leaf in one and a parent in the other is in neither: left where it is)."""
    common: dict[str, Any] = {}
    for key, value in left.items():
        if key not in right:
            continue
        if not value and not right[key]:
            common[key] = {}
        elif value and right[key] and (below := _common(value, right[key])):
            common[key] = below
    return common


def _without(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``left`` not in ``right``, for a ``right`` that is ``_common`` of ``left`` and another set."""
    rest: dict[str, Any] = {}
    for key, value in left.items():
        if key not in right or (value and not right[key]):
            rest[key] = value
        elif value and (below := _without(value, right[key])):
            rest[key] = below
    return rest


def created_fields(entries: list[dict[str, Any]], manager: str) -> dict[str, Any]:
    """What ``manager``'s create set, from the managedFields of the object as the create answered it."""
    return next((e.get("fieldsV1") or {} for e in entries if _of(e, manager, "Update")), {})


def left_by_a_create(entries: list[dict[str, Any]], manager: str) -> dict[str, Any]:
    """What ``manager``'s Update entry on the object itself holds, finalizers aside: on an object created before
    creates handed their fields over (from stop 32 to e47c16d), or whose hand-over failed, what its create set. A
    finalizer stays in the Update entry: our merge patches add them (the mirror's), and no apply may remove one."""
    fields = created_fields(entries, manager)
    metadata = {key: value for key, value in (fields.get("f:metadata") or {}).items() if key != "f:finalizers"}
    rest = {key: value for key, value in fields.items() if key != "f:metadata"}
    return rest | ({"f:metadata": metadata} if metadata else {})


class UnmovableError(ValueError):
    """The manager's entries are of different apiVersions: field paths of one version are not another's, so nothing
    is moved (the object keeps extra fields, never fewer)."""


def as_applied(entries: list[dict[str, Any]], manager: str, created: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``entries`` with the fields of ``created`` still in ``manager``'s Update entry moved into its Apply entry
    (made if missing); whatever else the Update entry holds stays (a later merge patch of the same manager, e.g.
    a finalizer another of our controllers added: applies must not remove it). None when nothing is left to move;
    UnmovableError when the entries are of different apiVersions."""
    updates = [e for e in entries if _of(e, manager, "Update")]
    applied = [e for e in entries if _of(e, manager, "Apply")]
    if not updates:
        return None
    if len(updates) > 1 or len({e.get("apiVersion") for e in [*applied, *updates]}) > 1:
        raise UnmovableError(f"{manager}'s entries are of several apiVersions")
    [update] = updates
    moved = _common(update.get("fieldsV1") or {}, created)
    if not moved:
        return None
    kept = _without(update.get("fieldsV1") or {}, moved)
    folded = {
        **(applied or updates)[0],
        "operation": "Apply",
        "fieldsV1": _union(applied[0].get("fieldsV1") or {} if applied else {}, moved),
    }
    others = [e for e in entries if not _of(e, manager, "Update") and not _of(e, manager, "Apply")]
    return [*others, *([{**update, "fieldsV1": kept}] if kept else []), folded]


def released(entries: list[dict[str, Any]], manager: str, to: str) -> list[dict[str, Any]]:
    """``entries`` with every entry of ``manager`` (its status entries too) made ``to``'s: the fields stay owned, by a
    manager that never applies, so a later apply of ``manager`` that leaves them out does not remove them."""
    return [{**e, "manager": to} if e.get("manager") == manager else e for e in entries]


def unwanted(entries: list[dict[str, Any]], manager: str, wanted: dict[str, Any]) -> list[str]:
    """Paths of fields ``manager`` owns on the object itself (its Apply and Update entries) that ``wanted`` leaves
    out: an apply of ``wanted`` would remove them, so it is due even when the object holds everything ``wanted``
    says. Map keys only (under a list nothing is compared: a caller compares lists whole); finalizers aside, as in
    ``left_by_a_create``."""
    found: list[str] = []

    def walk(owned: dict[str, Any], want: Any, path: tuple[str, ...]) -> None:
        if not isinstance(want, dict):
            return
        for key, below in owned.items():
            if not key.startswith("f:") or (*path, key) == ("metadata", "f:finalizers"):
                continue  # the map itself ("."), a list's "k:", "v:" and "i:" entries; finalizers
            name = key.removeprefix("f:")
            if name not in want:
                found.append("/" + "/".join((*path, name)))
            elif below:
                walk(below, want[name], (*path, name))

    for entry in entries:
        if entry.get("manager") == manager and not entry.get("subresource"):
            walk(entry.get("fieldsV1") or {}, wanted, ())
    return found
