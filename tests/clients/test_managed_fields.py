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


def test_released_entries_are_one_update_entry_of_the_other_manager_and_the_status_ones_stay() -> None:
    applied, created = _entry(OURS, "Apply", {"f:data": {"f:a": {}}}), _entry(OURS, "Update", {"f:data": {"f:b": {}}})
    status = _entry(OURS, "Update", {"f:status": {}}, subresource="status")
    theirs = _entry("kubectl", "Update", {"f:data": {"f:k": {}}})
    released = managed_fields.released([applied, created, status, theirs], OURS, "released")
    merged = {**applied, "manager": "released", "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}
    assert released == [status, theirs, merged]


def test_released_again_merges_into_the_entry_an_earlier_release_left_wherever_it_is() -> None:
    again = _entry(OURS, "Apply", {"f:data": {"f:b": {}}})
    earlier = _entry("released", "Update", {"f:data": {"f:a": {}}})
    [merged] = managed_fields.released([again, earlier], OURS, "released")
    assert merged == {**earlier, "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}
    other_version = {**again, "apiVersion": "example.io/v2"}
    assert len(managed_fields.released([other_version, earlier], OURS, "released")) == 2


def test_a_create_leaves_all_but_finalizers_to_hand_over() -> None:
    finalizers: dict[str, Any] = {"f:finalizers": {".": {}, 'v:"kyma-project.io/kcp-mirror"': {}}}
    update = _entry(OURS, "Update", {"f:data": {"f:k": {}}, "f:metadata": {**finalizers, "f:labels": {"f:x": {}}}})
    left = managed_fields.left_by_a_create([update, _entry("kubectl", "Update", {"f:spec": {}})], OURS)
    assert left == {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}
    only_finalizers = _entry(OURS, "Update", {"f:metadata": finalizers})
    assert managed_fields.left_by_a_create([only_finalizers], OURS) == {}


def test_unwanted_names_what_the_apply_entry_owns_and_no_longer_wants() -> None:
    ports: dict[str, Any] = {
        'k:{"containerPort":80,"protocol":"TCP"}': {"f:containerPort": {}},
        'k:{"containerPort":81}': {},
    }
    owned = {
        "f:metadata": {
            "f:labels": {".": {}, "f:kept": {}, "f:example.com/gone": {}},
            "f:finalizers": {".": {}, 'v:"ours"': {}},
        },
        "f:spec": {
            "f:containers": {'k:{"name":"c"}': {".": {}, "f:name": {}, "f:image": {}, "f:ports": ports}},
            "f:removed": {"f:deep": {}},
        },
    }
    entries = [
        _entry(OURS, "Apply", owned),
        _entry(OURS, "Update", {"f:data": {"f:left": {}}}),  # what the apply cannot remove is not counted
        _entry(OURS, "Update", {"f:status": {"f:x": {}}}, subresource="status"),
        _entry("kubectl", "Update", {"f:data": {"f:theirs": {}}}),
    ]
    # A port's protocol, defaulted by the apiserver, names its item too: the port is still wanted.
    container = {"name": "c", "image": "i", "ports": [{"containerPort": 80}]}
    wanted = {"metadata": {"labels": {"kept": "v"}, "finalizers": ["ours"]}, "spec": {"containers": [container]}}
    assert managed_fields.unwanted(entries, OURS, wanted) == [
        "/metadata/labels/example.com~1gone",
        '/spec/containers/k:{"name":"c"}/ports/k:{"containerPort":81}',
        "/spec/removed",
    ]
    everything: dict[str, Any] = {
        "metadata": {"labels": {"kept": "v", "example.com/gone": "v"}, "finalizers": ["ours"]},
        "spec": {
            "containers": [{**container, "ports": [{"containerPort": 80}, {"containerPort": 81}]}],
            "removed": {"deep": 1},
        },
    }
    assert managed_fields.unwanted(entries, OURS, everything) == []
    other_finalizer = {**everything, "metadata": {**everything["metadata"], "finalizers": ["theirs"]}}
    assert managed_fields.unwanted(entries, OURS, other_finalizer) == ['/metadata/finalizers/v:"ours"']


def test_a_list_item_several_wanted_items_could_be_is_walked_only_when_one_is_exact() -> None:
    port = 'k:{"containerPort":53,"protocol":"UDP"}'
    entries = [_entry(OURS, "Apply", {"f:spec": {"f:ports": {port: {"f:name": {}, "f:extra": {}}}}})]
    either = {"spec": {"ports": [{"containerPort": 53, "name": "a"}, {"containerPort": 53, "name": "b"}]}}
    assert managed_fields.unwanted(entries, OURS, either) == [], "which one it is cannot be told: nothing said"
    exact = {
        "spec": {"ports": [{"containerPort": 53, "name": "a"}, {"containerPort": 53, "protocol": "UDP", "name": "b"}]}
    }
    assert managed_fields.unwanted(entries, OURS, exact) == [f"/spec/ports/{port}/extra"]


def test_unwanted_once_handed_over_is_what_only_the_creates_update_entry_holds() -> None:
    finalizers: dict[str, Any] = {"f:finalizers": {'v:"kyma-project.io/kcp-mirror"': {}}}
    applied = _entry(OURS, "Apply", {"f:data": {"f:kept": {}, "f:gone": {}}})
    created = _entry(OURS, "Update", {"f:data": {"f:kept": {}, "f:left": {}}, "f:metadata": finalizers})
    wanted = {"data": {"kept": "v"}}
    assert managed_fields.unwanted_once_handed_over([applied, created], OURS, wanted) == ["/data/left"]
    assert managed_fields.unwanted_once_handed_over([applied], OURS, wanted) == []
