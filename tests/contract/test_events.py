"""The change event: identity, round trip, size limit, validation."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from contract import errors, events, ids

RUNTIME = ids.runtime_id("skr-1")
MODULE = ids.module_name("cloud-manager")
TARGET = events.WatchedObject(
    group="cloud-resources.kyma-project.io",
    version="v1beta1",
    resource="vpcpeerings",
    kind="VpcPeering",
    namespace="default",
    name="peer-a",
    uid="0b6c1f9e-2d4e-4b1a-9a51-3c2c7e0d9a11",
)


def make_event(**overrides: Any) -> events.ChangeEvent:
    arguments: dict[str, Any] = {
        "runtime": RUNTIME,
        "module": MODULE,
        "target": TARGET,
        "resource_version": "4711",
        "change_type": events.ChangeType.MODIFIED,
        "body": {"apiVersion": "cloud-resources.kyma-project.io/v1beta1", "spec": {"a": 1}},
        "observed_at": datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
    } | overrides
    return events.ChangeEvent.create(**arguments)


@pytest.mark.parametrize("change_type", list(events.ChangeType))
def test_round_trip_preserves_every_field(change_type: events.ChangeType) -> None:
    """encode then decode gives back an equal event, for every change type."""
    original = make_event(
        change_type=change_type,
        trace=events.TraceContext(traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01"),
    )
    assert events.decode(events.encode(original)) == original


def test_same_change_gets_the_same_id() -> None:
    """A change reported twice (retry, relist) collapses to one id."""
    first = make_event(observed_at=datetime(2026, 1, 1, tzinfo=UTC))
    again = make_event(observed_at=datetime(2026, 6, 1, tzinfo=UTC), change_type=events.ChangeType.RESYNC)
    assert first.id == again.id


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"runtime": ids.runtime_id("skr-2")}, id="other-runtime"),
        pytest.param({"module": ids.module_name("btp-operator")}, id="other-module"),
        pytest.param({"resource_version": "4712"}, id="other-resource-version"),
        pytest.param({"target": TARGET.model_copy(update={"uid": "other-uid"})}, id="other-object"),
    ],
)
def test_distinct_changes_get_distinct_ids(overrides: dict[str, Any]) -> None:
    """Changing any identifying part changes the id, so distinct changes never collapse."""
    assert make_event(**overrides).id != make_event().id


def test_tampered_id_is_rejected() -> None:
    """An id that does not match the content is refused: ids cannot be forged to drop events."""
    document = json.loads(events.encode(make_event()))
    document["event_id"] = "0" * 32
    with pytest.raises(errors.InvalidEventError, match=r"event_id .* does not match"):
        events.decode(json.dumps(document).encode())


def test_oversize_event_is_refused_not_truncated() -> None:
    """An event over 1 MB raises with its size; nothing is cut silently."""
    huge = make_event(body={"data": {"blob": "x" * events.MAX_EVENT_BYTES}})
    with pytest.raises(errors.EventTooLargeError) as raised:
        events.encode(huge)
    assert raised.value.size > events.MAX_EVENT_BYTES
    assert raised.value.limit == events.MAX_EVENT_BYTES
    assert f"over the limit of {events.MAX_EVENT_BYTES} bytes" in str(raised.value)


def test_oversize_bytes_are_refused_before_parsing() -> None:
    """decode checks the size first: a huge input is not parsed at all."""
    with pytest.raises(errors.EventTooLargeError):
        events.decode(b"{" + b" " * events.MAX_EVENT_BYTES + b"}")


def test_reference_event_of_an_oversize_object_fits() -> None:
    """An oversize object can still be reported as a reference-only event."""
    huge = make_event(body={"data": {"blob": "x" * events.MAX_EVENT_BYTES}})
    reference = huge.as_reference()
    decoded = events.decode(events.encode(reference))
    assert decoded.reference_only and decoded.body is None
    assert decoded.id == huge.id


def test_deleted_event_may_omit_the_body() -> None:
    """A deletion needs no body and is not marked reference-only."""
    deleted = make_event(change_type=events.ChangeType.DELETED, body=None)
    assert not deleted.reference_only
    assert events.decode(events.encode(deleted)) == deleted


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        pytest.param(lambda d: d.update(runtime="SKR_1"), "runtime", id="runtime-not-dns-label"),
        pytest.param(lambda d: d.update(module="a.b"), "module", id="module-with-dot"),
        pytest.param(lambda d: d.update(change_type="PATCHED"), "change_type", id="unknown-change-type"),
        pytest.param(lambda d: d.update(observed_at="2026-12-02T12:00:00"), "observed_at", id="naive-time"),
        pytest.param(lambda d: d.update(extra_field=1), "extra_field", id="unknown-field"),
        pytest.param(lambda d: d["target"].pop("uid"), "target.uid", id="missing-uid"),
        pytest.param(lambda d: d.update(schema_version=2), "schema_version", id="future-schema"),
    ],
)
def test_invalid_events_say_what_is_wrong(mutate: Any, complaint: str) -> None:
    """Schema violations raise InvalidEventError naming the offending field."""
    document = json.loads(events.encode(make_event()))
    mutate(document)
    with pytest.raises(errors.InvalidEventError, match=complaint):
        events.decode(json.dumps(document).encode())


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]", b'{"event_id": '])
def test_malformed_json_is_an_invalid_event(data: bytes) -> None:
    """Bytes that are not a JSON object are refused with InvalidEventError."""
    with pytest.raises(errors.InvalidEventError):
        events.decode(data)
