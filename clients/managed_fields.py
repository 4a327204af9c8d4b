"""managedFields: what a create left to an Update entry, handed to the same manager's Apply entry; a manager's
entries handed to another when an object is let go; what a manager owns that it no longer wants.

A create (POST) is recorded as an Update, and what an Update set is never removed by a later server-side apply of
the same manager that leaves it out: the apiserver sees another owner of it. kubectl's csaupgrade moves such
ownership into the Apply entry by rewriting managedFields; ``as_applied`` computes the rewrite. FieldsV1 is a tree:
a field is a key, its children the keys of its value, an empty value a field owned as a leaf.
"""

import json
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
    """What ``manager``'s Update entry on the object itself holds, finalizers aside: on an object an earlier
    kyma-sync created without handing the create's fields over, or whose hand-over failed, what its create set.
    This holds while the only non-apply writes of ours to objects we also apply set finalizers (the mirror's):
    those stay in the Update entry, as no apply may remove one; a merge patch setting any other field there
    would be handed to the apply, and removed by the next one that leaves it out."""
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
    """``entries`` with what ``manager`` owns on the object itself made ``to``'s, as Update entries merged by
    apiVersion (into one an earlier release left too): the fields stay owned, by a manager that never applies, so
    a later apply of ``manager`` that leaves them out does not remove them. Update entries, because the apiserver
    tells Apply entries apart by manager alone and would keep one of two. Status entries stay ``manager``'s: its
    status writes go on (the mirror's), and what they stop writing must still go."""
    ours = [e for e in entries if e.get("manager") == manager and not e.get("subresource")]
    result = [e for e in entries if not any(e is o for o in ours)]
    for entry in ours:
        at = next(
            (
                i
                for i, e in enumerate(result)
                if _of(e, to, "Update") and e.get("apiVersion") == entry.get("apiVersion")
            ),
            None,
        )
        if at is None:
            result.append({**entry, "manager": to, "operation": "Update"})
        else:
            result[at] = {
                **result[at],
                "fieldsV1": _union(result[at].get("fieldsV1") or {}, entry.get("fieldsV1") or {}),
            }
    return result


def unwanted(entries: list[dict[str, Any]], manager: str, wanted: dict[str, Any]) -> list[str]:
    """JSON pointers of the fields ``manager``'s Apply entry on the object itself owns that ``wanted`` leaves out:
    an apply of ``wanted`` removes them, so it is due even when the object holds everything ``wanted`` says. Map
    keys, and list items by their keys (``k:``) or values (``v:``); under an atomic list, compared whole by a
    caller, nothing. Pass ``entries`` as they will be when written (``as_applied``): fields still in an Update
    entry are not removed by the apply, and counting them would write again on every pass."""
    found: list[str] = []

    def walk(owned: dict[str, Any], want: Any, path: tuple[str, ...]) -> None:
        for key, below in owned.items():
            kind, _, name = key.partition(":")
            if kind == "f" and isinstance(want, dict):
                if name not in want:
                    found.append(_pointer(*path, name))
                elif below:
                    walk(below, want[name], (*path, name))
            elif kind == "k" and isinstance(want, list):
                named = _items_named(json.loads(name), want)
                if not named:
                    found.append(_pointer(*path, key))
                elif below and len(named) == 1:  # several could be it: nothing said (a write every pass is worse)
                    walk(below, named[0], (*path, key))
            elif kind == "v" and isinstance(want, list) and json.loads(name) not in want:
                found.append(_pointer(*path, key))

    for entry in entries:
        if _of(entry, manager, "Apply"):
            walk(entry.get("fieldsV1") or {}, wanted, ())
    return found


def _items_named(keys: dict[str, Any], items: list[Any]) -> list[dict[str, Any]]:
    """The wanted list items an entry's ``k:`` may name: the one with the same values for all its keys, else those
    whose values agree for the keys they set (the apiserver completes the keys with defaults before naming the
    item, e.g. a port's protocol)."""
    candidates = [item for item in items if isinstance(item, dict)]
    exact = [item for item in candidates if all(key in item and item[key] == value for key, value in keys.items())]
    return exact or [
        item for item in candidates if all(item[key] == value for key, value in keys.items() if key in item)
    ]


def _pointer(*path: str) -> str:
    """A JSON pointer (a list item named by its ``k:``/``v:`` entry)."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in path)


def handed_over(entries: list[dict[str, Any]], manager: str) -> list[dict[str, Any]] | None:
    """``entries`` with what a create left (``left_by_a_create``) moved to ``manager``'s Apply entry; None when
    nothing is left to move; UnmovableError as ``as_applied``."""
    return as_applied(entries, manager, left_by_a_create(entries, manager))


def unwanted_once_handed_over(entries: list[dict[str, Any]], manager: str, wanted: dict[str, Any]) -> list[str]:
    """What only handing a create's leftovers over (``handed_over``) lets an apply of ``wanted`` remove: fields our
    Update entry holds and ``wanted`` leaves out. Empty when nothing is left to hand over, or it cannot be moved."""
    try:
        if handed_over(entries, manager) is None:
            return []
    except UnmovableError:
        return []
    left = left_by_a_create(entries, manager)
    return unwanted([{"manager": manager, "operation": "Apply", "fieldsV1": left}], manager, wanted)
