"""managedFields: what a create left to an Update entry, handed to the same manager's Apply entry.

A create (POST) is recorded as an Update, and what an Update set is never removed by a later server-side apply of
the same manager that leaves it out: the apiserver sees another owner of it. kubectl's csaupgrade moves such
ownership into the Apply entry by rewriting managedFields; ``as_applied`` computes the rewrite.
"""

from typing import Any


def _of(entry: dict[str, Any], manager: str, operation: str) -> bool:
    """``manager``'s entry for ``operation`` on the object itself (a status subresource's entry is its own)."""
    return entry.get("manager") == manager and entry.get("operation") == operation and not entry.get("subresource")


def _union(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Two FieldsV1 sets as one (nested: a field is a key, its children the keys of its value)."""
    merged = dict(left)
    for key, value in right.items():
        merged[key] = _union(merged[key], value) if key in merged else value
    return merged


def as_applied(entries: list[dict[str, Any]], manager: str) -> list[dict[str, Any]] | None:
    """``entries`` with ``manager``'s Update entries folded into its Apply entry (made if missing), or None when
    there is nothing to fold, or when they are of different apiVersions (field paths of one version are not
    another's: left as they are, the object keeps extra fields, never fewer)."""
    updates = [e for e in entries if _of(e, manager, "Update")]
    applied = [e for e in entries if _of(e, manager, "Apply")]
    if not updates or len({e.get("apiVersion") for e in [*applied, *updates]}) > 1:
        return None
    fields: dict[str, Any] = {}
    for entry in [*applied, *updates]:
        fields = _union(fields, entry.get("fieldsV1") or {})
    folded = {**(applied or updates)[0], "operation": "Apply", "fieldsV1": fields}
    return [*(e for e in entries if not _of(e, manager, "Update") and not _of(e, manager, "Apply")), folded]
