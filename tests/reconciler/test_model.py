"""SyncResource items are parsed one by one before anything is sent: text or object, one object, one path segment."""

import json
from typing import Any

import pytest
import yaml

from reconciler import model

from ..factories import DESIGN_EXAMPLE


def resource(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok", "namespace": "default"}}
    for key, value in fields.items():
        if key in ("name", "namespace"):
            base["metadata"][key] = value
        else:
            base[key] = value
    return base


def parse(**item: Any) -> model.Item:
    return model.Item.parse(model.ItemSpec.model_validate({"name": "i", "strategy": "CreateAndSync", **item}))


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"name": "x/../../secrets/token"}, id="dot-dot-in-name"),
        pytest.param({"name": "..%2Fsecrets%2Ftoken"}, id="encoded-slash-in-name"),
        pytest.param({"name": "token?dryRun=All"}, id="query-in-name"),
        pytest.param({"name": "UPPER"}, id="uppercase-name"),
        pytest.param({"name": ""}, id="empty-name"),
        pytest.param({"name": "a" * 254}, id="name-too-long"),
        pytest.param({"namespace": "../kube-system"}, id="traversal-in-namespace"),
        pytest.param({"namespace": "a.b"}, id="dotted-namespace"),
        pytest.param({"apiVersion": "v1/../../apis"}, id="traversal-in-api-version"),
        pytest.param({"apiVersion": ""}, id="empty-api-version"),
        pytest.param({"kind": "Config/Map"}, id="slash-in-kind"),
        pytest.param({"kind": "../secrets"}, id="traversal-in-kind"),
        pytest.param({"metadata": "none"}, id="metadata-not-an-object"),
    ],
)
def test_an_item_naming_anything_but_one_object_is_refused(fields: dict[str, Any]) -> None:
    """apiVersion, kind, name and namespace are held to what the apiserver itself accepts, object or text."""
    with pytest.raises(model.ItemError):
        parse(resource=resource(**fields))
    with pytest.raises(model.ItemError):
        parse(resource=json.dumps(resource(**fields)))


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="configmap"),
        pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "name": "a.b-c"}, id="grouped"),
        pytest.param({"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma"}, id="beta-version"),
    ],
)
def test_valid_items_pass(fields: dict[str, Any]) -> None:
    """Ordinary names and grouped kinds are accepted."""
    item = parse(resource=resource(**fields))
    assert item.adoption == model.Adoption.NEVER and item.resource == resource(**fields)


def test_yaml_text_is_the_same_item_as_the_object() -> None:
    """The design document's form, ``resource: |``, parses to exactly what the object form gives."""
    text = """
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: ok
          namespace: default
        data:
          update.properties: |
            foo=bar
    """
    assert parse(resource=text).resource == resource(data={"update.properties": "foo=bar\n"})


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        pytest.param({"resource": "apiVersion: v1\nkind: [unclosed"}, "not valid YAML", id="broken-yaml"),
        pytest.param({"resource": "just a string"}, "exactly one object", id="scalar"),
        pytest.param({"resource": "a: 1\n---\nb: 2\n"}, "exactly one object", id="two-documents"),
        pytest.param({"resource": "kind: ConfigMap\nmetadata: {name: x}"}, "apiVersion", id="no-api-version"),
        pytest.param({}, "set resource, subresource, or both", id="nothing"),
        pytest.param({"subresource": {"status": {}}}, "must name its object", id="anonymous-status"),
        pytest.param(
            {"resource": resource(), "subresource": {**resource(name="other"), "status": {}}},
            "another object",
            id="status-of-another-object",
        ),
        pytest.param({"resource": resource(), "subresource": {"scale": {}}}, "only the status", id="scale"),
        pytest.param({"resource": resource(), "subresource": {"status": "ready"}}, "status object", id="bad-status"),
        pytest.param(
            {"strategy": "Delete", "subresource": {**resource(), "status": {}}}, "cannot be Delete", id="delete-status"
        ),
        pytest.param({"resource": "x" * (model.MAX_TEXT + 1)}, "longer than", id="too-long"),
    ],
)
def test_a_bad_item_says_what_is_wrong(item: dict[str, Any], reason: str) -> None:
    """Each mistake is this item's error with its reason, never an exception of another kind."""
    with pytest.raises(model.ItemError, match=reason):
        parse(**item)


def test_a_status_only_item_names_its_object_from_the_subresource() -> None:
    """The design document's module-CR item: no resource, a whole object with status; only the status is set."""
    [module_cr] = [i for i in yaml.safe_load(DESIGN_EXAMPLE)["spec"]["items"] if i["name"] == "module-cr"]
    item = model.Item.parse(model.ItemSpec.model_validate(module_cr))
    assert item.status_only and item.status == {"state": "Ready"}
    assert (item.api_version, item.kind, item.object_name, item.namespace) == (
        "operator.kyma-project.io/v1alpha1",
        "SomeModule",
        "module-cr-name",
        "kyma-system",
    )


def test_one_bad_item_leaves_the_others_parsed() -> None:
    """parse_items pairs the bad item with its error; the spec itself stays valid."""
    spec = model.Spec.model_validate(
        {
            "kyma": "skr-1",
            "items": [
                {"name": "good", "strategy": "CreateAndSync", "resource": resource()},
                {"name": "bad", "strategy": "CreateAndSync", "resource": "{not: [yaml"},
            ],
        }
    )
    good, bad = model.parse_items(spec)
    assert isinstance(good, model.Item) and isinstance(bad, model.Unparsable) and "YAML" in bad.error


def test_ignored_fields_keep_their_live_values() -> None:
    """Each ignored pointer takes the live value (or is left out when the live object has none); the rest is ours."""
    item = parse(resource=resource(data={"a": "1", "b": "1", "c/d": "1"}), ignoreFields=["/data/b", "/data/c~1d"])
    live = resource(data={"a": "2", "b": "2"})
    assert item.keeping_live(item.resource, live)["data"] == {"a": "1", "b": "2"}
    assert item.resource["data"] == {"a": "1", "b": "1", "c/d": "1"}  # the item itself is unchanged


@pytest.mark.parametrize("pointer", ["spec/replicas", "/", "/metadata/name", "/kind", "/metadata"])
def test_an_ignored_field_must_be_a_pointer_to_a_field_not_the_identity(pointer: str) -> None:
    """Not a pointer, the whole object, or the object's identity: the item's Error."""
    with pytest.raises(model.ItemError, match="ignoreFields"):
        parse(resource=resource(), ignoreFields=[pointer])


def test_yaml_aliases_cannot_expand_into_billions_of_values() -> None:
    """A 'billion laughs' manifest (nine levels of ten aliases) is refused before anything is written out."""
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: ok, namespace: default}", "a0: &a0 [x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 10)]
    with pytest.raises(model.ItemError, match="aliases"):
        parse(resource="\n".join(lines))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("[" * 20_000 + "]" * 20_000, "nest", id="deep-nesting"),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\nbinaryData: !!binary aGk=", "JSON", id="binary"
        ),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\ndata: {when: 2026-12-03}", "JSON", id="date"
        ),
    ],
)
def test_hostile_text_is_an_item_error_not_a_crash(text: str, reason: str) -> None:
    """Pathological YAML is this item's Error: never an exception that would stop an informer or the reconciler."""
    with pytest.raises(model.ItemError, match=reason):
        parse(resource=text)


def test_aliases_do_not_survive_parsing() -> None:
    """Two places sharing one YAML node become two values: editing one (our marker, an ignored field) leaves the
    other as written, so what the classifier saw is what is sent."""
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, annotations: &a {x: y}}\ndata: *a"
    item = parse(resource=text)
    item.resource["metadata"]["annotations"]["marker"] = "ours"
    assert item.resource["data"] == {"x": "y"}
