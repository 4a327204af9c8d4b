"""The runtimes KCP knows, and how to reach each: its master kubeconfig Secret in KCP.

Convention (as the Kyma control plane keeps them; names in ``contract.wire``): a Secret in
``kcp-system`` labelled ``operator.kyma-project.io/kyma-name=<Kyma name>``, the kubeconfig under
key ``config``; its name does not matter (infrastructure-manager writes ``kubeconfig-<runtime id>``).
Another component rotates these Secrets (seed 002): they are listed afresh on every pass, never
cached, so a rotated kubeconfig is used from the next pass without a restart. Only certs/ reads
them: every other component gets a least-privilege kubeconfig minted from them, stored in
``kyma-sync-kubeconfigs/<module>-kubeconfig-<runtime>``.

A runtime's certificate identity (the client certificate's CN) is its Kyma name, or, as upstream
lifecycle-manager issues them, the ``kyma-project.io/runtime-id`` label of that Secret
(``Identity.RUNTIME_ID``); the listener maps a runtime id back to the Kyma name.
"""

import base64
import dataclasses
import enum
from typing import Any

import yaml

from clients import kube
from contract import ids, wire


class Identity(enum.StrEnum):
    KYMA_NAME = "kyma-name"
    RUNTIME_ID = "runtime-id"


@dataclasses.dataclass(frozen=True)
class Runtime:
    name: ids.RuntimeId
    """The Kyma name: what kyma-sync calls the runtime (subjects, SyncResource targets, kubeconfig names)."""
    kubeconfig: dict[str, Any]
    runtime_id: str | None = None
    """The ``kyma-project.io/runtime-id`` label of its Secret, when it has one."""

    def certificate_identity(self, identity: Identity) -> str:
        """The CN of its client certificate."""
        if identity == Identity.KYMA_NAME:
            return self.name
        if self.runtime_id is None:
            raise ValueError(f"runtime {self.name}: its kubeconfig Secret has no {wire.RUNTIME_ID_LABEL} label")
        return ids.runtime_id(self.runtime_id)


def _decode_kubeconfig(secret: dict[str, Any]) -> dict[str, Any]:
    name = secret["metadata"]["name"]
    raw = (secret.get("data") or {}).get(wire.KUBECONFIG_KEY)
    if raw is None:
        raise ValueError(f"Secret {name} has no '{wire.KUBECONFIG_KEY}' key")
    document = yaml.safe_load(base64.b64decode(raw))
    if not isinstance(document, dict):
        raise ValueError(f"Secret {name} does not hold a kubeconfig")
    return document


def _runtime(secret: dict[str, Any]) -> Runtime:
    labels = secret["metadata"].get("labels") or {}
    return Runtime(
        ids.runtime_id(labels[wire.KYMA_NAME_LABEL]), _decode_kubeconfig(secret), labels.get(wire.RUNTIME_ID_LABEL)
    )


async def _master_secrets(kcp: kube.ApiClient, namespace: str, selector: str) -> dict[str, list[dict[str, Any]]]:
    secrets, _ = await kube.list_objects(kcp, kube.SECRETS, namespace=namespace, label_selector=selector)
    by_runtime: dict[str, list[dict[str, Any]]] = {}
    for secret in secrets:
        by_runtime.setdefault(secret["metadata"]["labels"][wire.KYMA_NAME_LABEL], []).append(secret)
    return by_runtime


def _one(runtime: str, secrets: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    if len(secrets) > 1:
        names = sorted(s["metadata"]["name"] for s in secrets)
        raise ValueError(f"runtime {runtime!r} has {len(secrets)} master kubeconfig Secrets in {namespace}: {names}")
    return secrets[0]


@dataclasses.dataclass(frozen=True)
class Listing:
    runtimes: list[Runtime]
    unusable: dict[str, str]
    """Runtime -> why its master kubeconfig Secret cannot be used (one broken Secret never stops the others)."""


async def list_runtimes(kcp: kube.ApiClient, *, namespace: str = wire.KCP_NAMESPACE) -> Listing:
    listing = Listing([], {})
    for runtime, secrets in (await _master_secrets(kcp, namespace, wire.KYMA_NAME_LABEL)).items():
        try:
            listing.runtimes.append(_runtime(_one(runtime, secrets, namespace)))
        except (ValueError, yaml.YAMLError) as exc:
            listing.unusable[runtime] = f"master kubeconfig unusable: {exc}"
    return listing


async def get_runtime(kcp: kube.ApiClient, runtime: str, *, namespace: str = wire.KCP_NAMESPACE) -> Runtime:
    found = await _master_secrets(kcp, namespace, f"{wire.KYMA_NAME_LABEL}={ids.runtime_id(runtime)}")
    if runtime not in found:
        raise LookupError(
            f"runtime {runtime!r} has no master kubeconfig Secret in {namespace} "
            f"(a Secret labelled {wire.KYMA_NAME_LABEL}={runtime}, kubeconfig under key {wire.KUBECONFIG_KEY!r})"
        )
    return _runtime(_one(runtime, found[runtime], namespace))
