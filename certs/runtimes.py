"""The runtimes KCP knows, and how to reach each: its master kubeconfig Secret in KCP.

Convention (as the Kyma lifecycle manager keeps them): Secret ``kcp-system/kubeconfig-<runtime>``
labelled ``kyma-project.io/runtime=<runtime>``, the kubeconfig under key ``config``. Only certs/
reads these: every other component gets a least-privilege kubeconfig minted from them, stored in
``kyma-sync-kubeconfigs/<module>-kubeconfig-<runtime>``.
"""

import base64
import dataclasses
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from clients import kube
from contract import ids

KCP_NAMESPACE = "kcp-system"
KUBECONFIG_NAMESPACE = "kyma-sync-kubeconfigs"
"""Where minted module kubeconfigs go: apart from the master kubeconfigs, so that reading them
(the reconcilers may) never grants reading a master kubeconfig (only certs/ may)."""
RUNTIME_LABEL = "kyma-project.io/runtime"
MODULE_LABEL = "kyma-project.io/module"
KUBECONFIG_KEY = "config"


def master_secret_name(runtime: str) -> str:
    return f"kubeconfig-{runtime}"


def module_secret_name(module: str, runtime: str) -> str:
    return f"{module}-kubeconfig-{runtime}"


@dataclasses.dataclass(frozen=True)
class Runtime:
    name: ids.RuntimeId
    kubeconfig: dict[str, Any]


def _decode_kubeconfig(secret: client.V1Secret) -> dict[str, Any]:
    raw = (secret.data or {}).get(KUBECONFIG_KEY)
    if raw is None:
        raise ValueError(f"Secret {secret.metadata.name} has no '{KUBECONFIG_KEY}' key")
    document = yaml.safe_load(base64.b64decode(raw))
    if not isinstance(document, dict):
        raise ValueError(f"Secret {secret.metadata.name} does not hold a kubeconfig")
    return document


async def list_runtimes(kcp: client.ApiClient, *, namespace: str = KCP_NAMESPACE) -> list[Runtime]:
    try:
        secrets = await client.CoreV1Api(kcp).list_namespaced_secret(namespace, label_selector=RUNTIME_LABEL)
    except ApiException as exc:
        raise kube.translate(exc) from exc
    return [
        Runtime(ids.runtime_id(s.metadata.labels[RUNTIME_LABEL]), _decode_kubeconfig(s))
        for s in secrets.items
        if s.metadata.name == master_secret_name(s.metadata.labels[RUNTIME_LABEL])
    ]


async def get_runtime(kcp: client.ApiClient, runtime: str, *, namespace: str = KCP_NAMESPACE) -> Runtime:
    try:
        secret = await client.CoreV1Api(kcp).read_namespaced_secret(master_secret_name(runtime), namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise LookupError(f"runtime {runtime!r} has no master kubeconfig Secret {namespace}/{master_secret_name(runtime)}") from exc
        raise kube.translate(exc) from exc
    return Runtime(ids.runtime_id(runtime), _decode_kubeconfig(secret))
