"""The managedFields rewrite that hands a create's fields to the same manager's apply."""

from typing import Any

from clients import managed_fields

OURS = "kyma-sync-reconciler"


def _entry(manager: str, operation: str, fields: dict[str, Any], **more: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **more,
    }


def test_a_creates_update_entry_becomes_the_managers_apply_entry_and_nothing_else_moves() -> None:
    theirs = _entry("kubectl", "Update", {"f:metadata": {"f:annotations": {"f:raced": {}}}})
    status = _entry(OURS, "Apply", {"f:status": {"f:state": {}}}, subresource="status")
    created = _entry(OURS, "Update", {"f:data": {"f:k": {}}}, time="2026-12-07T11:17:03Z")
    folded = managed_fields.as_applied([theirs, created, status], OURS)
    assert folded == [theirs, status, {**created, "operation": "Apply"}]


def test_an_apply_entry_of_the_manager_absorbs_its_update_entry_field_by_field() -> None:
    applied = _entry(OURS, "Apply", {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
    updated = _entry(OURS, "Update", {"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:y": {}}}})
    [folded] = managed_fields.as_applied([updated, applied], OURS) or []
    assert folded["operation"] == "Apply"
    assert folded["fieldsV1"] == {
        "f:data": {"f:a": {}, "f:b": {}},
        "f:metadata": {"f:labels": {"f:x": {}, "f:y": {}}},
    }


def test_nothing_to_fold_without_an_update_entry_of_the_object_itself() -> None:
    entries = [
        _entry(OURS, "Apply", {"f:data": {}}),
        _entry(OURS, "Update", {"f:status": {}}, subresource="status"),
        _entry("kubectl", "Update", {"f:data": {}}),
    ]
    assert managed_fields.as_applied(entries, OURS) is None


def test_entries_of_different_api_versions_are_left_as_they_are() -> None:
    applied = {**_entry(OURS, "Apply", {"f:spec": {}}), "apiVersion": "example.io/v1"}
    updated = {**_entry(OURS, "Update", {"f:spec": {}}), "apiVersion": "example.io/v2"}
    assert managed_fields.as_applied([applied, updated], OURS) is None
