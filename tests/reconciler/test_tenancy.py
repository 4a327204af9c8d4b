"""Tenancy decisions: bindings name namespaces, runtimes and kinds; privileged objects need an explicit yes."""

from typing import Any

import pytest

from reconciler import model, tenancy


def item(resource: dict[str, Any]) -> model.Item:
    return model.Item.model_validate({"name": "i", "strategy": "CreateAndSync", "resource": resource})


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "apps"},
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


def deployment(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "apps"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x", **container}]}}},
    }


def binding(**spec: Any) -> tenancy.BindingSpec:
    return tenancy.BindingSpec.model_validate({"namespaces": ["team-a"], "runtimeSelector": {}, **spec})


CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "apps"}}


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param(pod(hostPID=True), id="host-pid"),
        pytest.param(pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]), id="host-path"),
        pytest.param(deployment({"securityContext": {"privileged": True}}), id="privileged-container-in-deployment"),
        pytest.param(deployment({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}), id="sys-admin"),
        pytest.param(deployment({"ports": [{"containerPort": 80, "hostPort": 80}]}), id="host-port"),
        pytest.param(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "j", "namespace": "apps"},
                "spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostNetwork": True, "containers": [{}]}}}}},
            },
            id="cronjob-host-network",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "b"},
                "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
            },
            id="cluster-role-binding",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "apps"},
                "roleRef": {"kind": "ClusterRole", "name": "admin"},
            },
            id="rolebinding-to-clusterrole",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "apps"},
                "rules": [{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}],
            },
            id="wildcard-role",
        ),
        pytest.param(
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "a.b"}},
            id="crd",
        ),
        pytest.param(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "w"},
            },
            id="webhook",
        ),
        pytest.param({**CONFIGMAP, "metadata": {"name": "c", "namespace": "kube-system"}}, id="system-namespace"),
    ],
)
def test_privileged_objects_are_refused_unless_the_binding_allows_them(resource: dict[str, Any]) -> None:
    """Refused by a default binding; admitted once the binding sets allowPrivileged."""
    policy = tenancy.policy_for("team-a", [binding()])
    assert policy.refusal(item(resource), labels={}) is not None
    assert tenancy.policy_for("team-a", [binding(allowPrivileged=True)]).refusal(item(resource), labels={}) is None


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param(CONFIGMAP, id="configmap"),
        pytest.param(pod(securityContext={"runAsNonRoot": True}), id="plain-pod"),
        pytest.param(
            deployment({"securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}), id="baseline-capability"
        ),
    ],
)
def test_ordinary_objects_pass(resource: dict[str, Any]) -> None:
    """Unprivileged workloads and configuration need nothing special."""
    assert tenancy.policy_for("team-a", [binding()]).refusal(item(resource), labels={}) is None


def test_a_namespace_without_a_binding_targets_nothing() -> None:
    """No binding for the namespace: no runtime is admitted."""
    policy = tenancy.policy_for("team-b", [binding()])
    assert not policy.bindings and not policy.admits_runtime({"env": "prod"})


def test_runtime_selector_kinds_and_target_namespaces_narrow_a_binding() -> None:
    """Only selected runtimes; only listed kinds (plural accepted); only listed runtime namespaces."""
    policy = tenancy.policy_for(
        "team-a",
        [
            binding(
                runtimeSelector={"matchLabels": {"env": "dev"}},
                kinds=[{"kind": "configmaps"}],
                targetNamespaces=["apps"],
            )
        ],
    )
    assert policy.admits_runtime({"env": "dev"}) and not policy.admits_runtime({"env": "prod"})
    assert policy.refusal(item(CONFIGMAP), labels={"env": "dev"}, names=("configmaps", "configmap")) is None
    assert "not among the kinds" in (policy.refusal(item(pod()), labels={"env": "dev"}) or "")
    elsewhere = {**CONFIGMAP, "metadata": {"name": "c", "namespace": "other"}}
    names = ("configmaps", "configmap")
    assert "target namespaces" in (policy.refusal(item(elsewhere), labels={"env": "dev"}, names=names) or "")
    assert "no SyncBinding" in (policy.refusal(item(CONFIGMAP), labels={"env": "prod"}) or "")


def test_denied_kinds_win_and_any_admitting_binding_suffices() -> None:
    """A kind denied by one binding is still admitted by another binding that allows it."""
    deny = binding(deniedKinds=[{"kind": "ConfigMap"}])
    assert tenancy.policy_for("team-a", [deny]).refusal(item(CONFIGMAP), labels={}) is not None
    assert tenancy.policy_for("team-a", [deny, binding()]).refusal(item(CONFIGMAP), labels={}) is None
