"""The managedFields rewrite that hands a create's fields to the same manager's apply."""

from typing import Any

import pytest

from clients import managed_fields

OURS = "kyma-sync-reconciler"
CREATED: dict[str, Any] = {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}}


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
    created = _entry(OURS, "Update", CREATED, time="2026-12-07T11:17:03Z")
    entries = [theirs, created, status]
    assert managed_fields.created_fields(entries, OURS) == CREATED
    assert managed_fields.as_applied(entries, OURS, CREATED) == [theirs, status, {**created, "operation": "Apply"}]


def test_what_the_manager_set_after_its_create_stays_in_its_update_entry() -> None:
    """A finalizer one of our controllers added by a merge patch after the create: an apply must not remove it."""
    later: dict[str, Any] = {
        "f:metadata": {"f:finalizers": {".": {}, 'v:"kyma-project.io/kcp-mirror"': {}}, "f:labels": {"f:b": {}}}
    }
    update = _entry(
        OURS, "Update", {"f:data": CREATED["f:data"], "f:metadata": {**CREATED["f:metadata"], **later["f:metadata"]}}
    )
    update["fieldsV1"]["f:metadata"]["f:labels"] = {".": {}, "f:a": {}, "f:b": {}}
    kept, folded = managed_fields.as_applied([update], OURS, CREATED) or []
    assert kept == {**update, "fieldsV1": later}
    assert folded == {**update, "operation": "Apply", "fieldsV1": CREATED}


def test_an_apply_entry_of_the_manager_absorbs_the_fields_field_by_field() -> None:
    applied = _entry(OURS, "Apply", {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
    updated = _entry(OURS, "Update", {"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:y": {}}}})
    [folded] = managed_fields.as_applied([updated, applied], OURS, updated["fieldsV1"]) or []
    assert folded["operation"] == "Apply"
    assert folded["fieldsV1"] == {
        "f:data": {"f:a": {}, "f:b": {}},
        "f:metadata": {"f:labels": {"f:x": {}, "f:y": {}}},
    }


def test_nothing_to_move_without_the_creates_fields_in_an_update_entry_of_the_object_itself() -> None:
    entries = [
        _entry(OURS, "Apply", CREATED),
        _entry(OURS, "Update", {"f:status": {}}, subresource="status"),
        _entry("kubectl", "Update", CREATED),
    ]
    assert managed_fields.as_applied(entries, OURS, CREATED) is None
    only_later = [_entry(OURS, "Update", {"f:metadata": {"f:finalizers": {".": {}}}})]
    assert managed_fields.as_applied(only_later, OURS, CREATED) is None


def test_entries_of_different_api_versions_are_not_moved() -> None:
    applied = {**_entry(OURS, "Apply", {"f:spec": {}}), "apiVersion": "example.io/v1"}
    updated = {**_entry(OURS, "Update", {"f:spec": {}}), "apiVersion": "example.io/v2"}
    with pytest.raises(managed_fields.UnmovableError):
        managed_fields.as_applied([applied, updated], OURS, {"f:spec": {}})


def test_released_entries_change_manager_only() -> None:
    ours = [_entry(OURS, "Apply", CREATED), _entry(OURS, "Update", {"f:status": {}}, subresource="status")]
    theirs = _entry("kubectl", "Update", {"f:data": {"f:k": {}}})
    released = managed_fields.released([*ours, theirs], OURS, "released")
    assert released == [*({**e, "manager": "released"} for e in ours), theirs]


def test_unwanted_names_what_the_manager_owns_and_no_longer_wants() -> None:
    owned = {
        "f:metadata": {"f:labels": {".": {}, "f:kept": {}, "f:gone": {}}, "f:finalizers": {'v:"ours"': {}}},
        "f:spec": {"f:containers": {'k:{"name":"c"}': {"f:image": {}}}, "f:removed": {"f:deep": {}}},
    }
    entries = [
        _entry(OURS, "Apply", owned),
        _entry(OURS, "Update", {"f:status": {"f:x": {}}}, subresource="status"),
        _entry("kubectl", "Update", {"f:data": {"f:theirs": {}}}),
    ]
    metadata = {"labels": {"kept": "v"}}
    containers = [{"name": "c"}]
    wanted = {"metadata": metadata, "spec": {"containers": containers}}
    assert managed_fields.unwanted(entries, OURS, wanted) == ["/metadata/labels/gone", "/spec/removed"]
    still = {"metadata": metadata, "spec": {"containers": containers, "removed": {"deep": 1}}}
    assert managed_fields.unwanted(entries, OURS, still) == ["/metadata/labels/gone"]
