"""The published contract (contract/spec/) agrees with the models, and says what the model says."""

import json
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
import yaml

from contract import cloudevents, documents, events, ids, subjects, wire

from .. import factories


def test_committed_documents_are_what_the_models_generate() -> None:
    """Run `python -m contract.documents` after changing a model; this fails until then."""
    for name, content in documents.documents().items():
        committed = (documents.SPEC_DIRECTORY / name).read_text()
        assert committed == content, f"contract/spec/{name} is stale: run python -m contract.documents"


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((documents.SPEC_DIRECTORY / name).read_text())
    jsonschema.Draft7Validator.check_schema(loaded)
    return loaded


def _event(**changes: Any) -> dict[str, Any]:
    event = factories.configmap_event("kyma-sync", runtime="skr-1", name="settings")
    body: dict[str, Any] = json.loads(events.encode(event))
    body.update(changes)
    return body


def test_a_valid_event_is_valid_against_the_published_schema() -> None:
    schema = _schema(documents.CHANGE_EVENT_SCHEMA)
    for change in events.ChangeType:
        event = factories.configmap_event("kyma-sync", runtime="skr-1", name="settings").model_copy(
            update={"change_type": change}
        )
        jsonschema.validate(json.loads(events.encode(event)), schema)
    jsonschema.validate(
        json.loads(events.encode(factories.configmap_event("kyma-sync", runtime="skr-1").as_reference())), schema
    )


@pytest.mark.parametrize(
    ("case", "changes"),
    [
        ("runtime with a NATS wildcard", {"runtime": "skr.*"}),
        ("runtime not a DNS label", {"runtime": "SKR_1"}),
        ("module too long", {"module": "m" * 64}),
        ("unknown field", {"admin": True}),
        ("unknown change type", {"change_type": "PATCHED"}),
        ("schema version 2", {"schema_version": 2}),
        ("object name with a slash", {"target": {**_event()["target"], "name": "a/b"}}),
        ("a header smuggled in the group", {"target": {**_event()["target"], "group": "a\r\nce-source: /runtimes/x"}}),
        ("a kind with a space", {"target": {**_event()["target"], "kind": "Config Map"}}),
        ("a version with a colon", {"target": {**_event()["target"], "version": "v1:x"}}),
        ("a resource with a newline", {"target": {**_event()["target"], "resource": "config\nmaps"}}),
        ("no observed_at", {"observed_at": None}),
    ],
)
def test_the_schema_refuses_what_the_model_refuses(case: str, changes: dict[str, Any]) -> None:
    """Hostile bodies a consumer in another language would meet: both the model and the schema say no."""
    body = {k: v for k, v in _event(**changes).items() if v is not None}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, _schema(documents.CHANGE_EVENT_SCHEMA))
    with pytest.raises(Exception, match="invalid change event"):
        events.decode(json.dumps(body).encode())


def test_the_heartbeat_schema_matches_its_model() -> None:
    schema = _schema(documents.HEARTBEAT_SCHEMA)
    beat = events.Heartbeat(runtime=ids.RuntimeId("skr-1"), sent_at=datetime.now(UTC), queue_depth=3)
    jsonschema.validate(json.loads(beat.model_dump_json()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**json.loads(beat.model_dump_json()), "queue_depth": -1}, schema)


def test_asyncapi_names_the_subjects_streams_and_headers_we_use() -> None:
    spec = yaml.safe_load((documents.SPEC_DIRECTORY / documents.ASYNCAPI).read_text())
    assert spec["asyncapi"].startswith("3.")
    channels = spec["channels"]
    module, runtime = ids.ModuleName("kyma-sync"), ids.RuntimeId("skr-1")
    address = channels["changeEvents"]["address"].format(module=module, runtime=runtime)
    assert address == subjects.event_subject(module=module, runtime=runtime)
    dead = channels["deadLetters"]["address"].format(module=module, runtime=runtime)
    assert dead == subjects.dead_letter_subject(address)
    message = spec["components"]["messages"]["changeEvent"]
    assert message["payload"]["schema"]["$ref"] == f"./{documents.CHANGE_EVENT_SCHEMA}"
    headers = message["headers"]["properties"]
    event = factories.configmap_event("kyma-sync", runtime="skr-1")
    assert set(cloudevents.headers(event)) <= set(headers)
    dead_headers = spec["components"]["messages"]["deadLetter"]["headers"]["properties"]
    assert {wire.DEAD_LETTER_REASON_HEADER, wire.ORIGINAL_SUBJECT_HEADER, wire.DELIVERIES_HEADER} <= set(dead_headers)
    assert wire.STREAM_NAME in spec["info"]["description"]


def test_cloudevents_attributes_describe_the_event() -> None:
    event = factories.configmap_event("kyma-sync", runtime="skr-1", name="settings")
    headers = cloudevents.headers(event)
    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-id"] == event.id
    assert headers["ce-source"] == "/runtimes/skr-1"
    assert headers["ce-type"] == f"io.kyma-project.sync.change.{event.change_type.value.lower()}.v1"
    assert headers["ce-subject"] == f"core/v1/configmaps/{event.target.namespace}/settings"
    assert headers["ce-time"] == event.observed_at.isoformat()
    assert headers["ce-dataschema"] == _schema(documents.CHANGE_EVENT_SCHEMA)["$id"]
