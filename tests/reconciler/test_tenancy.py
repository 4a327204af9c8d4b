"""Tenancy decisions: bindings name namespaces, runtimes and kinds; privileged objects need an explicit yes."""

from typing import Any

import pytest

from reconciler import model, tenancy


def item(resource: dict[str, Any]) -> model.Item:
    return model.Item.parse(
        model.ItemSpec.model_validate({"name": "i", "strategy": "CreateAndSync", "resource": resource})
    )


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


def where(resource: dict[str, Any], *names: str) -> tenancy.Destination:
    """As the runtime would store it: these tests name the namespace of every namespaced object (and a Role
    ``defined-here`` in apps is one the same SyncResource puts there)."""
    return tenancy.Destination(resource["metadata"].get("namespace"), names, frozenset({("apps", "defined-here")}))


def refusal(policy: tenancy.Policy, resource: dict[str, Any], *names: str, **labels: str) -> str | None:
    return policy.refusal(item(resource), where(resource, *names), labels=labels)


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
        pytest.param({**CONFIGMAP, "metadata": {"name": "c", "namespace": "kyma-system"}}, id="kyma-system"),
        pytest.param({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}, id="ns-object"),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "apps", "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
            },
            id="privileged-pod-security-namespace",
        ),
        pytest.param({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv"}}, id="pv"),
        pytest.param(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"}}, id="priority"
        ),
        pytest.param(
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": "f"}},
            id="flow-schema",
        ),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s", "namespace": "apps"},
                "spec": {"externalIPs": ["8.8.8.8"]},
            },
            id="service-external-ips",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "apps"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
            },
            id="role-reading-secrets",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "apps"},
                "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}],
            },
            id="role-exec",
        ),
        pytest.param(pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}), id="unsafe-sysctl"),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "apps"},
                "rules": [{"apiGroups": [""], "resources": ["*/exec"], "verbs": ["create"]}],
            },
            id="role-wildcard-exec",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "apps"},
                "rules": [{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch"]}],
            },
            id="role-ephemeral-containers",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "apps"},
                "roleRef": {"kind": "Role", "name": "defined-here"},
                "subjects": [{"kind": "Group", "name": "system:unauthenticated"}],
            },
            id="rolebinding-to-system-group",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "e", "namespace": "apps"}}, id="endpoints"
        ),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "p",
                    "namespace": "apps",
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"},
                },
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
            id="apparmor-annotation",
        ),
        pytest.param(deployment({"securityContext": "x"}), id="malformed-security-context"),
        pytest.param(pod(securityContext="x"), id="malformed-pod-security-context"),
        pytest.param(deployment({"securityContext": {"capabilities": {"add": 5}}}), id="malformed-capabilities"),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "apps"},
                "rules": [{"verbs": [{}]}],
            },
            id="malformed-rule",
        ),
        pytest.param(pod(securityContext={"seLinuxOptions": {"type": "spc_t"}}), id="selinux-spc"),
        pytest.param(
            deployment({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}), id="apparmor-unconfined"
        ),
    ],
)
def test_privileged_objects_are_refused_unless_the_binding_allows_them(resource: dict[str, Any]) -> None:
    """Refused by a default binding; admitted once the binding sets allowPrivileged."""
    assert refusal(tenancy.policy_for("team-a", [binding()]), resource) is not None
    assert refusal(tenancy.policy_for("team-a", [binding(allowPrivileged=True)]), resource) is None


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param(CONFIGMAP, id="configmap"),
        pytest.param(pod(securityContext={"runAsNonRoot": True}), id="plain-pod"),
        pytest.param(
            deployment({"securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}), id="baseline-capability"
        ),
        pytest.param(
            pod(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}), id="sysctl"
        ),
        pytest.param(pod(securityContext={"seLinuxOptions": {"level": "s0:c1,c2"}}), id="selinux-level"),
        pytest.param({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}, id="plain-namespace"),
    ],
)
def test_ordinary_objects_pass(resource: dict[str, Any]) -> None:
    """Unprivileged workloads and configuration need nothing special."""
    assert refusal(tenancy.policy_for("team-a", [binding()]), resource) is None


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
    assert refusal(policy, CONFIGMAP, "configmaps", "configmap", env="dev") is None
    assert "not among the kinds" in (refusal(policy, pod(), env="dev") or "")
    elsewhere = {**CONFIGMAP, "metadata": {"name": "c", "namespace": "other"}}
    assert "target namespaces" in (refusal(policy, elsewhere, "configmaps", "configmap", env="dev") or "")
    assert "no SyncBinding" in (refusal(policy, CONFIGMAP, env="prod") or "")


def test_denied_kinds_win_and_any_admitting_binding_suffices() -> None:
    """A kind denied by one binding is still admitted by another binding that allows it."""
    deny = binding(deniedKinds=[{"kind": "ConfigMap"}])
    assert refusal(tenancy.policy_for("team-a", [deny]), CONFIGMAP) is not None
    assert refusal(tenancy.policy_for("team-a", [deny, binding()]), CONFIGMAP) is None


def test_target_namespaces_confine_cluster_scoped_and_namespace_less_objects() -> None:
    """With targetNamespaces only those namespaces: no cluster-scoped object (but the listed Namespace itself),
    and an item that names no namespace counts as in ``default``, where the apiserver would put it."""
    policy = tenancy.policy_for("team-a", [binding(targetNamespaces=["apps"])])
    cluster_role = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "x"}}
    assert "cluster-scoped" in (
        refusal(tenancy.policy_for("team-a", [binding(targetNamespaces=["apps"], allowPrivileged=True)]), cluster_role)
        or ""
    )
    assert refusal(policy, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}) is None
    assert "cluster-scoped" in (
        refusal(policy, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}) or ""
    )
    namespace_less = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    stored_in_default = policy.refusal(item(namespace_less), tenancy.Destination("default"), labels={})
    assert "namespace default is not among" in (stored_in_default or "")


def test_protected_namespaces_are_configurable() -> None:
    """The default protects kyma-system too; an operator may protect more (or fewer)."""
    in_monitoring = {**CONFIGMAP, "metadata": {"name": "c", "namespace": "monitoring"}}
    assert refusal(tenancy.policy_for("team-a", [binding()]), in_monitoring) is None
    guarded = tenancy.policy_for("team-a", [binding()], protected=("monitoring",))
    assert "protected" in (refusal(guarded, in_monitoring) or "")


def test_adoption_needs_a_binding_that_allows_it() -> None:
    """A tenant's ``adoption: IfUnmanaged`` is not enough: a binding admitting the item must set allowAdoption."""
    configmap = item(CONFIGMAP)
    assert not tenancy.policy_for("team-a", [binding()]).allows_adoption(configmap, where(CONFIGMAP), labels={})
    adopting = tenancy.policy_for("team-a", [binding(allowAdoption=True)])
    assert adopting.allows_adoption(configmap, where(CONFIGMAP), labels={})
    narrow = tenancy.policy_for("team-a", [binding(allowAdoption=True, targetNamespaces=["other"]), binding()])
    assert narrow.refusal(configmap, where(CONFIGMAP), labels={}) is None
    assert not narrow.allows_adoption(configmap, where(CONFIGMAP), labels={})


def test_kind_rules_refuse_an_invalid_group() -> None:
    """A group that is not a DNS subdomain is a configuration error, not a rule that never matches."""
    with pytest.raises(ValueError, match="group"):
        binding(kinds=[{"group": "Apps/../x", "kind": "Deployment"}])


def test_only_the_status_subresource_may_be_set() -> None:
    """Other subresources (scale, eviction, token requests) are not a way around the policy."""
    spec = {"name": "i", "strategy": "CreateAndSync", "resource": CONFIGMAP, "subresource": {"token": {}}}
    with pytest.raises(model.ItemError, match="only the status subresource"):
        model.Item.parse(model.ItemSpec.model_validate(spec))


def test_a_role_binding_binds_only_roles_of_its_own_sync_resource() -> None:
    """A RoleBinding to a Role someone else made in the namespace could hand out anything that Role grants."""
    binding_to = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "apps"},
        "roleRef": {"kind": "Role", "name": "defined-here"},
        "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "apps"}],
    }
    policy = tenancy.policy_for("team-a", [binding()])
    assert refusal(policy, binding_to) is None
    foreign = {**binding_to, "roleRef": {"kind": "Role", "name": "someone-elses"}}
    assert "does not define" in (refusal(policy, foreign) or "")


def test_the_status_of_a_built_in_kind_is_privileged_that_of_a_custom_resource_is_not() -> None:
    """A Service's load-balancer status redirects traffic (CVE-2020-8554); a module CR's status is just a report."""
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "apps"}}
    module_cr = {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Keda", "metadata": {"name": "k"}}
    status = {"status": {"loadBalancer": {"ingress": [{"ip": "8.8.8.8"}]}}}
    policy = tenancy.policy_for("team-a", [binding()])
    with_status = [
        model.Item.parse(
            model.ItemSpec.model_validate(
                {"name": "i", "strategy": "CreateAndSync", "resource": resource, "subresource": status}
            )
        )
        for resource in (service, {**module_cr, "metadata": {"name": "k", "namespace": "apps"}})
    ]
    assert "built-in kind" in (policy.refusal(with_status[0], where(service), labels={}) or "")
    assert policy.refusal(with_status[1], tenancy.Destination("apps"), labels={}) is None
