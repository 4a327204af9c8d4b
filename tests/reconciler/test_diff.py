"""Dry-run differences: the fields that would change, server-owned metadata and status aside."""

from reconciler import diff


def test_changed_paths_name_the_fields_that_differ() -> None:
    """Changed, added and removed fields are named as JSON pointers; resourceVersion and status are not."""
    before = {
        "metadata": {"name": "c", "resourceVersion": "1", "labels": {"a/b": "1"}},
        "data": {"k": "v", "gone": "x"},
    }
    after = {
        "metadata": {"name": "c", "resourceVersion": "2", "labels": {"a/b": "2"}},
        "data": {"k": "w", "new": "y"},
        "status": {"phase": "x"},
    }
    assert diff.changed_paths(before, after) == ["/data/gone", "/data/k", "/data/new", "/metadata/labels/a~1b"]


def test_nothing_changed_and_nothing_there() -> None:
    """Equal objects: no change; no object yet: the whole object."""
    same = {"metadata": {"name": "c"}, "data": {"k": "v"}}
    assert diff.changed_paths(same, dict(same)) == []
    assert diff.changed_paths(None, same) == ["/"]


def test_the_list_is_bounded() -> None:
    """A large difference is summarised by its first paths."""
    before = {"data": {str(n): "a" for n in range(50)}}
    after = {"data": {str(n): "b" for n in range(50)}}
    assert len(diff.changed_paths(before, after, limit=10)) == 10


def test_carries_asks_only_for_what_is_wanted() -> None:
    """Defaults the apiserver adds are no drift; a changed or missing wanted value, or a list item more or less, is."""
    live = {"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"}, "ports": [{"port": 80, "protocol": "TCP"}]}}
    assert diff.carries(live, {"spec": {"replicas": 2, "ports": [{"port": 80}]}})
    assert not diff.carries(live, {"spec": {"replicas": 3}})
    assert not diff.carries(live, {"spec": {"ports": [{"port": 80}, {"port": 443}]}})
    assert not diff.carries(live, {"spec": {"paused": False}})
    assert not diff.carries({"metadata": {}}, {"metadata": {"annotations": {}}}), "an absent map is not an empty one"
