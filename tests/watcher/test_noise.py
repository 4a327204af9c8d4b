"""The noise filter: what is worth reporting."""

import copy
from typing import Any

import pytest

from contract import events
from watcher import noise

RECONCILER = "kyma-sync-reconciler"


def obj(*, data: str = "a", status: str = "ok", writes: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "x",
            "uid": "u",
            "resourceVersion": data + status + str(writes),
            "managedFields": [
                {"manager": manager, "operation": "Apply", "time": time} for manager, time in (writes or [])
            ],
        },
        "spec": {"data": data},
        "status": {"phase": status},
    }


FILTER = noise.NoiseFilter(ignore_fields=["status"], ignore_managers=[RECONCILER])


def classify(change: events.ChangeType, new: dict[str, Any], old: dict[str, Any] | None) -> noise.Verdict:
    return FILTER.classify(change, new, FILTER.seen(old) if old else None)[0]


@pytest.mark.parametrize(
    ("change", "old", "new", "verdict"),
    [
        pytest.param(events.ChangeType.MODIFIED, obj(), obj(data="b"), noise.Verdict.REPORT, id="spec-change"),
        pytest.param(
            events.ChangeType.MODIFIED, obj(), obj(status="failed"), noise.Verdict.IGNORED_FIELDS_ONLY, id="status-only"
        ),
        pytest.param(
            events.ChangeType.MODIFIED,
            obj(writes=[("kubectl", "t1")]),
            obj(data="b", writes=[("kubectl", "t1"), (RECONCILER, "t2")]),
            noise.Verdict.IGNORED_FIELD_MANAGER,
            id="reconciler-write",
        ),
        pytest.param(
            events.ChangeType.MODIFIED,
            obj(writes=[("kubectl", "t1"), (RECONCILER, "t2")]),
            obj(data="c", writes=[("kubectl", "t3"), (RECONCILER, "t2")]),
            noise.Verdict.REPORT,
            id="user-write-after-reconciler",
        ),
        pytest.param(
            events.ChangeType.ADDED,
            None,
            obj(writes=[(RECONCILER, "t1")]),
            noise.Verdict.IGNORED_FIELD_MANAGER,
            id="created-by-reconciler",
        ),
        pytest.param(
            events.ChangeType.ADDED, None, obj(writes=[("kubectl", "t1")]), noise.Verdict.REPORT, id="created-by-user"
        ),
        pytest.param(
            events.ChangeType.DELETED,
            obj(),
            obj(writes=[(RECONCILER, "t1")]),
            noise.Verdict.REPORT,
            id="deletion-always",
        ),
        pytest.param(events.ChangeType.RESYNC, None, obj(), noise.Verdict.REPORT, id="resync-without-history"),
        pytest.param(events.ChangeType.RESYNC, obj(), obj(), noise.Verdict.IGNORED_FIELDS_ONLY, id="resync-unchanged"),
    ],
)
def test_classification(
    change: events.ChangeType, old: dict[str, Any] | None, new: dict[str, Any], verdict: noise.Verdict
) -> None:
    """Status churn and our reconciler's own writes are noise; user changes and deletions are not."""
    assert classify(change, new, old) == verdict


def test_without_fields_removes_nested_paths_and_leaves_the_input_alone() -> None:
    """Dotted paths are removed from a copy; absent paths are ignored; the input, which the fingerprint is also made from, is intact."""
    original: dict[str, Any] = {
        "metadata": {"name": "x", "managedFields": [1], "resourceVersion": "7"},
        "spec": {"template": {"a": 1, "b": 2}, "other": {"c": 3}},
        "status": {"a": 1},
    }
    before = copy.deepcopy(original)
    stripped = noise.without_fields(
        original,
        ["metadata.managedFields", "metadata.resourceVersion", "status", "spec.template.a", "spec.missing.x"],
    )
    assert stripped == {"metadata": {"name": "x"}, "spec": {"template": {"b": 2}, "other": {"c": 3}}}
    assert original == before
