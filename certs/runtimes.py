"""The runtimes KCP knows, and how to reach each: its master kubeconfig Secret in KCP.

Convention (as the Kyma lifecycle manager keeps them, names in ``contract.wire``): Secret
``kcp-system/kubeconfig-<runtime>`` labelled ``kyma-project.io/runtime=<runtime>``, the
kubeconfig under key ``config``. Only certs/ reads these: every other component gets a
least-privilege kubeconfig minted from them, stored in
``kyma-sync-kubeconfigs/<module>-kubeconfig-<runtime>``.
"""

import base64
import dataclasses
from typing import Any

import yaml

from clients import kube
from contract import ids, wire


@dataclasses.dataclass(frozen=True)
class Runtime:
    name: ids.RuntimeId
    kubeconfig: dict[str, Any]


def _decode_kubeconfig(secret: dict[str, Any]) -> dict[str, Any]:
    name = secret["metadata"]["name"]
    raw = (secret.get("data") or {}).get(wire.KUBECONFIG_KEY)
    if raw is None:
        raise ValueError(f"Secret {name} has no '{wire.KUBECONFIG_KEY}' key")
    document = yaml.safe_load(base64.b64decode(raw))
    if not isinstance(document, dict):
        raise ValueError(f"Secret {name} does not hold a kubeconfig")
    return document


async def list_runtimes(kcp: kube.ApiClient, *, namespace: str = wire.KCP_NAMESPACE) -> list[Runtime]:
    secrets, _ = await kube.list_objects(kcp, kube.SECRETS, namespace=namespace, label_selector=wire.RUNTIME_LABEL)
    runtimes = []
    for secret in secrets:
        runtime = secret["metadata"]["labels"][wire.RUNTIME_LABEL]
        if secret["metadata"]["name"] == wire.master_kubeconfig_secret(runtime):
            runtimes.append(Runtime(ids.runtime_id(runtime), _decode_kubeconfig(secret)))
    return runtimes


async def get_runtime(kcp: kube.ApiClient, runtime: str, *, namespace: str = wire.KCP_NAMESPACE) -> Runtime:
    name = wire.master_kubeconfig_secret(runtime)
    secret = await kube.get_or_none(kcp, kube.SECRETS.object_path(namespace, name))
    if secret is None:
        raise LookupError(f"runtime {runtime!r} has no master kubeconfig Secret {namespace}/{name}")
    return Runtime(ids.runtime_id(runtime), _decode_kubeconfig(secret))
