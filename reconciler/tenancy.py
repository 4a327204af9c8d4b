"""Which KCP namespaces may put what into which runtimes: declared by SyncBindings, never implied.

A SyncBinding is cluster-scoped (so only a KCP administrator, not a tenant, can write one, as
OCM's ManagedClusterSetBinding is guarded) and names the KCP namespaces it covers, the runtimes
they may target (a selector over Kyma labels) and what they may put there. A namespace no
binding covers targets nothing. Cluster-admin-equivalent objects — CRDs, admission webhooks
and policies, API services, cluster-wide RBAC, bindings to ClusterRoles, roles that reach
secrets, exec, tokens or grant escalate/bind/impersonate or wildcards, node- and
cluster-wide scheduling, storage and API-priority objects, Services with external IPs,
namespaces labelled privileged, pods (in any workload) that would escape their sandbox — and
the runtime's protected namespaces are refused unless a binding allows privileged objects.

A binding with ``targetNamespaces`` confines its namespaces there: cluster-scoped objects are
refused (a Namespace named in the list excepted), and an object without a namespace counts as
in ``default``, where the apiserver puts it. Taking over objects that exist without our marker
(an item's ``adoption: IfUnmanaged``) needs a binding that says ``allowAdoption``, since a
tenant could otherwise claim — and later delete — anything it can name.

The pod classifier knows the built-in workload kinds; custom kinds that embed pod templates are
not inspected, which is why bindings for untrusted namespaces should list ``kinds``.
Pure: the reconciler asks, this module answers with a reason or None.
"""

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reconciler import kinds as kind_names
from reconciler import model

DEFAULT_PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "kyma-system", "istio-system")

RBAC = "rbac.authorization.k8s.io"
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
        (RBAC, "ClusterRole"),
        (RBAC, "ClusterRoleBinding"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("networking.k8s.io", "ServiceCIDR"),
        ("networking.k8s.io", "IPAddress"),
        ("certificates.k8s.io", "ClusterTrustBundle"),
        # Hand-written endpoints can point a Service at any address, the node's own included (CVE-2021-25740).
        ("", "Endpoints"),
        ("discovery.k8s.io", "EndpointSlice"),
    }
)
_ESCALATING_VERBS = frozenset({"*", "escalate", "bind", "impersonate"})
_SENSITIVE_RESOURCES = frozenset({"*", "secrets"})
_SENSITIVE_SUBRESOURCES = frozenset({"*", "exec", "attach", "portforward", "token", "proxy", "ephemeralcontainers"})
_TOKEN_SECRET_TYPES = frozenset({"kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token"})
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
_CONTAINER_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
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


def _sandbox_reason(context: dict[str, Any], who: str) -> str | None:
    """What in a pod's or container's securityContext leaves the baseline Pod Security sandbox."""
    for profile in ("seccompProfile", "appArmorProfile"):
        if (_at(context, (profile, "type")) or "") == "Unconfined":
            return f"{who} runs without {profile.removesuffix('Profile')}"
    if _at(context, ("windowsOptions", "hostProcess")) is True:
        return f"{who} is a Windows host process"
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("user") or selinux.get("role") or (selinux.get("type") or "") not in _CONTAINER_SELINUX_TYPES:
        return f"{who} sets SELinux options beyond the container types"
    return None


def _pod_spec_reason(spec: dict[str, Any]) -> str | None:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field) is True:
            return f"pod uses {field}"
    if any(isinstance(v, dict) and "hostPath" in v for v in spec.get("volumes") or []):
        return "pod mounts a hostPath volume"
    pod_context = spec.get("securityContext") or {}
    # A field of the wrong type raises here: privileged_reason counts that as a refusal.
    reason = _sandbox_reason(pod_context, "pod")
    if reason:
        return reason
    unsafe = sorted(str(s.get("name")) for s in pod_context.get("sysctls") or [] if s.get("name") not in _SAFE_SYSCTLS)
    if unsafe:
        return f"pod sets unsafe sysctls {unsafe}"
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
            reason = _sandbox_reason(context, f"container {name}")
            if reason:
                return reason
            if context.get("procMount") not in (None, "Default"):
                return f"container {name} unmasks /proc"
            if any(isinstance(p, dict) and p.get("hostPort") for p in container.get("ports") or []):
                return f"container {name} binds a host port"
    return None


def _sensitive(resource: str) -> bool:
    """A resource RBAC rule that reaches secrets, a shell in a pod, or a token — wildcards included (``*/exec``)."""
    if resource in _SENSITIVE_RESOURCES:
        return True
    _, slash, subresource = resource.partition("/")
    return bool(slash) and subresource in _SENSITIVE_SUBRESOURCES


def is_builtin_group(group: str) -> bool:
    """Kubernetes' own API groups (core, apps, batch, policy, *.k8s.io): their status drives real behaviour."""
    return group == "" or "." not in group or group.endswith(".k8s.io")


def privileged_reason(resource: dict[str, Any], *, group: str, kind: str) -> str | None:
    """Why putting ``resource`` into a runtime equals cluster-admin there, or None.

    A body the classifier cannot read (a field of the wrong type) counts as privileged: what is not
    understood is not admitted.
    """
    try:
        return _privileged_reason(resource, group=group, kind=kind)
    except (AttributeError, TypeError, ValueError) as exc:
        return f"cannot be classified ({type(exc).__name__}: a field has an unexpected type)"


def _privileged_reason(resource: dict[str, Any], *, group: str, kind: str) -> str | None:
    if (group, kind) in _ALWAYS_PRIVILEGED:
        return f"{kind} is cluster-admin-equivalent"
    if group == RBAC and kind == "RoleBinding":
        if _at(resource, ("roleRef", "kind")) == "ClusterRole":
            return "a RoleBinding to a ClusterRole"
        for subject in resource.get("subjects") or []:
            if str(subject.get("name", "")).startswith("system:"):
                return f"a RoleBinding to {subject['name']}"
    if group == RBAC and kind == "Role":
        for rule in resource.get("rules") or []:
            if _ESCALATING_VERBS & set(rule.get("verbs") or []) or any(
                _sensitive(str(r)) for r in rule.get("resources") or []
            ):
                return "a Role granting wildcards, escalate, bind, impersonate, secrets, exec, attach or tokens"
    if group == "" and kind == "Secret" and resource.get("type") in _TOKEN_SECRET_TYPES:
        return f"a {resource['type']} Secret (mints credentials)"
    if group == "" and kind == "Service" and _at(resource, ("spec", "externalIPs")):
        return "a Service with externalIPs (can intercept any address's traffic)"
    if group == "" and kind == "Namespace":
        labels = _at(resource, ("metadata", "labels")) or {}
        if labels.get(_POD_SECURITY_ENFORCE) == "privileged":
            return "a Namespace that admits privileged pods"
    for path in _POD_SPEC_PATHS:
        spec = _at(resource, path)
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            annotations = _at(resource, (*path[:-1], "metadata", "annotations")) or {}
            if any(k.startswith(_APPARMOR_ANNOTATION) and v == "unconfined" for k, v in annotations.items()):
                return "pod runs without apparmor"
            reason = _pod_spec_reason(spec)
            if reason:
                return reason
    return None


def _context_reason(item: model.Item, destination: "Destination") -> str | None:
    """What is privileged about the item given where it lands and what else the SyncResource puts there."""
    if item.status is not None and is_builtin_group(item.group):
        return f"sets the status of a built-in kind ({item.kind}), which Kubernetes acts on"
    if (item.group, item.kind) == (RBAC, "RoleBinding") and _at(item.resource, ("roleRef", "kind")) == "Role":
        role = (destination.namespace or "default", str(_at(item.resource, ("roleRef", "name"))))
        if role not in destination.sibling_roles:
            return f"a RoleBinding to Role {role[1]}, which this SyncResource does not define"
    return None


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where an item's object lands in a runtime, as the runtime's discovery says."""

    namespace: str | None
    """The namespace it is stored in (``default`` when a namespaced item names none); None: cluster-scoped."""
    names: tuple[str, ...] = ()
    """What the runtime calls the kind besides its kind: plural and singular resource names."""
    sibling_roles: frozenset[tuple[str, str]] = frozenset()
    """(namespace, name) of the Roles the same SyncResource puts there: the only Roles its RoleBindings may bind."""


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
        description="runtime namespaces objects may go to (cluster-scoped objects are then refused); "
        "empty: any namespace but the protected ones",
    )
    allow_privileged: bool = Field(default=False, alias="allowPrivileged")
    allow_adoption: bool = Field(
        default=False, alias="allowAdoption", description="items may take over objects kyma-sync did not create"
    )

    def refusal(self, item: model.Item, destination: Destination, *, protected: frozenset[str]) -> str | None:
        """Why this binding does not admit ``item`` at ``destination``, or None."""
        names = (item.kind, *destination.names)
        if self.kinds and not any(rule.group_kind().matches(item.group, *names) for rule in self.kinds):
            return f"{item.kind} is not among the kinds the SyncBinding allows"
        if any(rule.group_kind().matches(item.group, *names) for rule in self.denied_kinds):
            return f"{item.kind} is denied by the SyncBinding"
        namespace = destination.namespace
        if namespace is None:
            is_namespace = (item.group, item.kind) == ("", "Namespace")
            if self.target_namespaces and not (is_namespace and item.object_name in self.target_namespaces):
                return f"cluster-scoped {item.kind} cannot be confined to the SyncBinding's target namespaces"
            if is_namespace and item.object_name in protected and not self.allow_privileged:
                return f"namespace {item.object_name} is protected"
        elif self.target_namespaces:
            if namespace not in self.target_namespaces:
                return f"namespace {namespace} is not among the SyncBinding's target namespaces"
        elif namespace in protected and not self.allow_privileged:
            return f"namespace {namespace} is protected"
        if not self.allow_privileged:
            reason = privileged_reason(item.resource, group=item.group, kind=item.kind) or _context_reason(
                item, destination
            )
            if reason:
                return f"privileged: {reason}"
        return None


@dataclasses.dataclass(frozen=True)
class Policy:
    """The SyncBindings covering one KCP namespace."""

    namespace: str
    bindings: tuple[BindingSpec, ...]
    protected: frozenset[str] = frozenset(DEFAULT_PROTECTED_NAMESPACES)

    def admits_runtime(self, labels: dict[str, str]) -> bool:
        return any(b.runtime_selector.matches(labels) for b in self.bindings)

    def refusal(self, item: model.Item, destination: Destination, *, labels: dict[str, str]) -> str | None:
        """Why no binding admits ``item`` at ``destination`` in a runtime with ``labels``, or None when one does."""
        applicable = [b for b in self.bindings if b.runtime_selector.matches(labels)]
        if not applicable:
            return f"no SyncBinding lets namespace {self.namespace} target this runtime"
        reasons = [b.refusal(item, destination, protected=self.protected) for b in applicable]
        return None if None in reasons else str(reasons[0])

    def allows_adoption(self, item: model.Item, destination: Destination, *, labels: dict[str, str]) -> bool:
        """Whether a binding that admits ``item`` there also lets it take over an unmanaged object."""
        return self._admitting_binding_with(item, destination, labels, lambda b: b.allow_adoption)

    def allows_privileged(self, item: model.Item, destination: Destination, *, labels: dict[str, str]) -> bool:
        """Whether a binding that admits ``item`` there allows privileged objects (checked on what it would adopt)."""
        return self._admitting_binding_with(item, destination, labels, lambda b: b.allow_privileged)

    def _admitting_binding_with(
        self,
        item: model.Item,
        destination: Destination,
        labels: dict[str, str],
        having: Callable[[BindingSpec], bool],
    ) -> bool:
        return any(
            having(b)
            and b.runtime_selector.matches(labels)
            and b.refusal(item, destination, protected=self.protected) is None
            for b in self.bindings
        )


def policy_for(
    namespace: str, bindings: Iterable[BindingSpec], *, protected: Iterable[str] = DEFAULT_PROTECTED_NAMESPACES
) -> Policy:
    return Policy(namespace, tuple(b for b in bindings if namespace in b.namespaces), frozenset(protected))
