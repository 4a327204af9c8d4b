"""The watcher's objects in a runtime, as KCP installs them (pure: rendered from settings, no I/O).

The same shape the kyma-watcher chart renders: a ServiceAccount; a ClusterRole reading the base
watches (the Kyma CR; everything else comes from the watch set KCP derives, ``reconciler.watch_sets``,
with its own ClusterRole); a Role for the Lease, the checkpoint and the watch set in kyma-system;
the configuration; and a Deployment of two replicas spread over nodes by anti-affinity (one sender
by the Lease, the other ready to take over) — or a DaemonSet, one pod per node, where a value asks.
The certificate Secret is kyma-certs' (``kyma-watcher-certificate``, written by its rotation).
"""

from typing import Any

import yaml

from contract import watch_sets, wire
from reconciler import crds, settings

NAMESPACE = watch_sets.NAMESPACE
NAME = "kyma-watcher"
CERTIFICATE_SECRET = "kyma-watcher-certificate"
MANAGED_LABELS = {
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/part-of": "kyma-sync",
    "app.kubernetes.io/managed-by": "kyma-sync-reconciler",
    wire.SYNCED_LABEL: wire.SYNCED_VALUE,
}
SELECTOR = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "kyma-sync"}
KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Deployment",
    "DaemonSet",
)


def _metadata(name: str, *, namespaced: bool = True) -> dict[str, Any]:
    return {"name": name, **({"namespace": NAMESPACE} if namespaced else {}), "labels": dict(MANAGED_LABELS)}


def watcher_config(runtime: str, config: settings.WatcherInstallSettings, *, module: str) -> dict[str, Any]:
    """The watcher's configuration (``watcher.config.WatcherConfig``; the reconciler does not import it)."""
    return {
        "runtime": runtime,
        "listeners": [{"url": url} for url in config.listeners],
        "tls": {
            "cert_file": "/etc/kyma-watcher/tls/tls.crt",
            "key_file": "/etc/kyma-watcher/tls/tls.key",
            "ca_file": "/etc/kyma-watcher/tls/ca.crt",
        },
        "watches": [
            {
                "group": crds.KYMA.group,
                "version": crds.KYMA.version,
                "resource": crds.KYMA.resource,
                "namespaces": [NAMESPACE],
                "label_selector": wire.SYNCED_SELECTOR,
                "module": module,
            }
        ],
        "central": {"namespace": watch_sets.NAMESPACE, "config_map": watch_sets.CONFIG_MAP},
        "lease": {"namespace": NAMESPACE, "name": NAME},
        "checkpoint": {"namespace": NAMESPACE, "config_map": "kyma-watcher-checkpoint"},
        "management_port": config.management_port,
    }


def render(runtime: str, config: settings.WatcherInstallSettings, *, module: str) -> list[dict[str, Any]]:
    """Every object of the watcher in ``runtime``, in the order they are applied (RBAC before the pods)."""
    rbac = "rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    pod_labels = {**MANAGED_LABELS}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": SELECTOR},
        "template": {
            "metadata": {"labels": pod_labels},
            "spec": {
                "serviceAccountName": NAME,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "watcher",
                        "image": config.image,
                        "command": ["kyma-watcher", "--config", "/etc/kyma-watcher/config/watcher.yaml"],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "management", "containerPort": config.management_port}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "management"}},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "management"}},
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        # Under 1 % of a node: the watcher idles at ~0.5 % of a core (bench/watcher_throughput.py).
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "64Mi"},
                            "limits": {"memory": "256Mi"},
                        },
                        "volumeMounts": [
                            {"name": "tmp", "mountPath": "/tmp"},
                            {"name": "config", "mountPath": "/etc/kyma-watcher/config", "readOnly": True},
                            {"name": "tls", "mountPath": "/etc/kyma-watcher/tls", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "config", "configMap": {"name": f"{NAME}-config"}},
                    {"name": "tls", "secret": {"secretName": CERTIFICATE_SECRET}},
                ],
            },
        },
    }
    if config.kind == "Deployment":
        spec["replicas"] = 2
        spec["template"]["spec"]["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": SELECTOR},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(NAME)},
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": _metadata(NAME, namespaced=False),
            "rules": [
                {"apiGroups": [crds.KYMA.group], "resources": [crds.KYMA.resource], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": _metadata(NAME, namespaced=False),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": subject,
        },
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": _metadata(NAME),
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "update"]},
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": _metadata(NAME),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": subject,
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(f"{NAME}-config"),
            "data": {"watcher.yaml": yaml.safe_dump(watcher_config(runtime, config, module=module), sort_keys=False)},
        },
        {"apiVersion": "apps/v1", "kind": config.kind, "metadata": _metadata(NAME), "spec": spec},
    ]
