"""SyncResource items are validated before anything is sent: no item can name more than one path segment."""

from typing import Any

import pydantic
import pytest

from reconciler import model


def item(**resource: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok", "namespace": "default"}}
    for key, value in resource.items():
        if key in ("name", "namespace"):
            base["metadata"][key] = value
        else:
            base[key] = value
    return {"name": "i", "strategy": "Delete", "resource": base}


@pytest.mark.parametrize(
    "resource",
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
def test_an_item_naming_anything_but_one_object_is_refused(resource: dict[str, Any]) -> None:
    """apiVersion, kind, name and namespace are held to what the apiserver itself accepts."""
    with pytest.raises(pydantic.ValidationError):
        model.Spec.model_validate({"kyma": "skr-1", "items": [item(**resource)]})


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param({}, id="configmap"),
        pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "name": "a.b-c"}, id="grouped"),
        pytest.param({"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma"}, id="beta-version"),
    ],
)
def test_valid_items_pass(resource: dict[str, Any]) -> None:
    """Ordinary names and grouped kinds are accepted."""
    spec = model.Spec.model_validate({"kyma": "skr-1", "items": [item(**resource)]})
    assert spec.items[0].adoption == model.Adoption.NEVER


def test_two_items_naming_the_same_object_are_refused() -> None:
    """One object, one item: otherwise two items would fight over it."""
    first, second = item(), item()
    second["name"] = "j"
    with pytest.raises(pydantic.ValidationError, match="same object"):
        model.Spec.model_validate({"kyma": "skr-1", "items": [first, second]})
