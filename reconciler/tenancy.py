"""Which KCP namespaces may put what into which runtimes: declared by SyncBindings, never implied.

A SyncBinding is cluster-scoped (so only a KCP administrator, not a tenant, can write one, as
OCM's ManagedClusterSetBinding is guarded) and names the KCP namespaces it covers, the runtimes
they may target (a selector over Kyma labels) and what they may put there. A namespace no
binding covers targets nothing. Cluster-admin-equivalent objects — CRDs, admission webhooks
and policies, API services, cluster-wide RBAC, bindings to ClusterRoles, roles that grant
escalate/bind/impersonate or wildcards, pods (in any workload) that would escape their
sandbox — and the runtime's system namespaces are refused unless a binding allows privileged
objects. Pure: the reconciler asks, this module answers with a reason or None.
"""

import dataclasses
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reconciler import kinds as kind_names
from reconciler import model

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})

_RBAC = "rbac.authorization.k8s.io"
_ALWAYS_PRIVILEGED = frozenset(
    {
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        ("apiregistration.k8s.io", "APIService"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        (_RBAC, "ClusterRole"),
        (_RBAC, "ClusterRoleBinding"),
        ("", "Node"),
    }
)
_ESCALATING_VERBS = frozenset({"*", "escalate", "bind", "impersonate"})
_BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_POD_SPEC_PATHS = (("spec",), ("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec"))


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _pod_spec_reason(spec: dict[str, Any]) -> str | None:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field) is True:
            return f"pod uses {field}"
    if any(isinstance(v, dict) and "hostPath" in v for v in spec.get("volumes") or []):
        return "pod mounts a hostPath volume"
    pod_context = spec.get("securityContext") or {}
    if (_at(pod_context, ("seccompProfile", "type")) or "") == "Unconfined":
        return "pod runs without seccomp"
    if _at(pod_context, ("windowsOptions", "hostProcess")) is True:
        return "pod is a Windows host process"
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            if not isinstance(container, dict):
                continue
            context = container.get("securityContext") or {}
            name = container.get("name", "?")
            if context.get("privileged") is True:
                return f"container {name} is privileged"
            added = set(_at(context, ("capabilities", "add")) or []) - _BASELINE_CAPABILITIES
            if added:
                return f"container {name} adds capabilities {sorted(added)}"
            if (_at(context, ("seccompProfile", "type")) or "") == "Unconfined":
                return f"container {name} runs without seccomp"
            if _at(context, ("windowsOptions", "hostProcess")) is True:
                return f"container {name} is a Windows host process"
            if context.get("procMount") not in (None, "Default"):
                return f"container {name} unmasks /proc"
            if any(isinstance(p, dict) and p.get("hostPort") for p in container.get("ports") or []):
                return f"container {name} binds a host port"
    return None


def privileged_reason(resource: dict[str, Any], *, group: str, kind: str) -> str | None:
    """Why putting ``resource`` into a runtime equals cluster-admin there, or None."""
    if (group, kind) in _ALWAYS_PRIVILEGED:
        return f"{kind} is cluster-admin-equivalent"
    if group == _RBAC and kind == "RoleBinding" and _at(resource, ("roleRef", "kind")) == "ClusterRole":
        return "a RoleBinding to a ClusterRole"
    if group == _RBAC and kind == "Role":
        for rule in resource.get("rules") or []:
            if not isinstance(rule, dict):
                continue
            if _ESCALATING_VERBS & set(rule.get("verbs") or []) or "*" in (rule.get("resources") or []):
                return "a Role granting wildcard, escalate, bind or impersonate"
    for path in _POD_SPEC_PATHS:
        spec = _at(resource, path)
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            reason = _pod_spec_reason(spec)
            if reason:
                return reason
    return None


class BindingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    namespaces: tuple[str, ...] = Field(
        min_length=1, description="KCP namespaces whose SyncResources this binding admits"
    )
    runtime_selector: model.LabelSelector = Field(
        alias="runtimeSelector", description="runtimes (by Kyma labels) they may target; {} selects every runtime"
    )
    kinds: tuple[kind_names.KindRule, ...] = Field(
        default=(), description="kinds they may sync; empty: every kind not denied"
    )
    denied_kinds: tuple[kind_names.KindRule, ...] = Field(default=(), alias="deniedKinds")
    target_namespaces: tuple[str, ...] = Field(
        default=(),
        alias="targetNamespaces",
        description="runtime namespaces objects may go to; empty: any but kube-system, kube-public, kube-node-lease",
    )
    allow_privileged: bool = Field(default=False, alias="allowPrivileged")

    def refusal(self, item: model.Item, *, names: Iterable[str]) -> str | None:
        """Why this binding does not admit ``item`` (known in the runtime by ``names``), or None."""
        names = (item.kind, *names)
        if self.kinds and not any(rule.group_kind().matches(item.group, *names) for rule in self.kinds):
            return f"{item.kind} is not among the kinds the SyncBinding allows"
        if any(rule.group_kind().matches(item.group, *names) for rule in self.denied_kinds):
            return f"{item.kind} is denied by the SyncBinding"
        namespace = item.namespace
        if namespace is not None:
            if self.target_namespaces and namespace not in self.target_namespaces:
                return f"namespace {namespace} is not among the SyncBinding's target namespaces"
            if not self.target_namespaces and namespace in SYSTEM_NAMESPACES and not self.allow_privileged:
                return f"namespace {namespace} is a system namespace"
        if not self.allow_privileged:
            reason = privileged_reason(item.resource, group=item.group, kind=item.kind)
            if reason:
                return f"privileged: {reason}"
        return None


@dataclasses.dataclass(frozen=True)
class Policy:
    """The SyncBindings covering one KCP namespace."""

    namespace: str
    bindings: tuple[BindingSpec, ...]

    def admits_runtime(self, labels: dict[str, str]) -> bool:
        return any(b.runtime_selector.matches(labels) for b in self.bindings)

    def refusal(self, item: model.Item, *, labels: dict[str, str], names: Iterable[str] = ()) -> str | None:
        """Why no binding admits ``item`` into a runtime with ``labels``, or None when one does."""
        applicable = [b for b in self.bindings if b.runtime_selector.matches(labels)]
        if not applicable:
            return f"no SyncBinding lets namespace {self.namespace} target this runtime"
        names = tuple(names)
        reasons = [b.refusal(item, names=names) for b in applicable]
        return None if None in reasons else str(reasons[0])


def policy_for(namespace: str, bindings: Iterable[BindingSpec]) -> Policy:
    return Policy(namespace, tuple(b for b in bindings if namespace in b.namespaces))
