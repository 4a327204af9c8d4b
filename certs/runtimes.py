"""The runtimes KCP knows, and how to reach each: its master kubeconfig Secret in KCP.

Convention (as the Kyma control plane keeps them; names in ``contract.wire``): a Secret in
``kcp-system`` labelled ``operator.kyma-project.io/kyma-name=<Kyma name>``, the kubeconfig under
key ``config``; its name does not matter (infrastructure-manager writes ``kubeconfig-<runtime id>``).
Another component (infrastructure-manager) rotates these Secrets: they are listed afresh on every pass, never
cached, so a rotated kubeconfig is used from the next pass without a restart. Only certs/ reads
them: every other component gets a least-privilege kubeconfig minted from them, stored in
``kyma-sync-kubeconfigs/<module>-kubeconfig-<runtime>``.

A runtime's certificate identity (the client certificate's CN) is its Kyma name, or, as upstream
lifecycle-manager issues them, the ``kyma-project.io/runtime-id`` label of its Kyma CR
(``Identity.RUNTIME_ID``). The listener maps a runtime id back to a Kyma name from the same label
of the same objects, so both sides agree by construction; a master kubeconfig Secret whose own
runtime-id label says otherwise fails its runtime (one of the two is stale: not ours to guess).
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
    """The ``kyma-project.io/runtime-id`` label of its Kyma CR (read only for runtime-id identities)."""

    def certificate_identity(self, identity: Identity) -> str:
        """The CN of its client certificate."""
        if identity == Identity.KYMA_NAME:
            return self.name
        if self.runtime_id is None:
            raise ValueError(f"runtime {self.name}: its Kyma CR has no {wire.RUNTIME_ID_LABEL} label")
        return ids.runtime_id(self.runtime_id)


def _decode_kubeconfig(secret: dict[str, Any]) -> dict[str, Any]:
    name = secret["metadata"]["name"]
    raw = (secret.get("data") or {}).get(wire.KUBECONFIG_KEY)
    if raw is None:
        raise ValueError(f"Secret {name} has no '{wire.KUBECONFIG_KEY}' key")
    try:
        document = yaml.safe_load(base64.b64decode(raw))
    except yaml.MarkedYAMLError as exc:  # its message quotes the offending line: a token, maybe
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"Secret {name} does not hold valid YAML{where}") from None
    except (yaml.YAMLError, ValueError):
        raise ValueError(f"Secret {name} does not hold valid YAML") from None
    if not isinstance(document, dict):
        raise ValueError(f"Secret {name} does not hold a kubeconfig")
    return document


def _runtime(secret: dict[str, Any], kyma_ids: dict[str, str | None] | None) -> Runtime:
    """The runtime of a master kubeconfig Secret; with ``kyma_ids`` (Kyma name -> runtime-id label) its id too."""
    labels = secret["metadata"].get("labels") or {}
    name = ids.runtime_id(labels[wire.KYMA_NAME_LABEL])
    runtime_id = None
    if kyma_ids is not None:
        if name not in kyma_ids:
            raise ValueError(f"no Kyma CR {name} in KCP to take its {wire.RUNTIME_ID_LABEL} from")
        runtime_id = kyma_ids[name]
        on_secret = labels.get(wire.RUNTIME_ID_LABEL)
        if on_secret is not None and on_secret != runtime_id:
            raise ValueError(
                f"its Kyma says {wire.RUNTIME_ID_LABEL}={runtime_id}, its master kubeconfig Secret says {on_secret}"
            )
    return Runtime(name, _decode_kubeconfig(secret), runtime_id)


async def _kyma_ids(kcp: kube.ApiClient, namespace: str, identity: Identity) -> dict[str, str | None] | None:
    if identity == Identity.KYMA_NAME:
        return None
    kymas, _ = await kube.list_objects(kcp, kube.KYMAS, namespace=namespace, label_selector=None)
    return {k["metadata"]["name"]: (k["metadata"].get("labels") or {}).get(wire.RUNTIME_ID_LABEL) for k in kymas}


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


async def list_runtimes(
    kcp: kube.ApiClient, *, identity: Identity = Identity.KYMA_NAME, namespace: str = wire.KCP_NAMESPACE
) -> Listing:
    kyma_ids = await _kyma_ids(kcp, namespace, identity)
    listing = Listing([], {})
    for runtime, secrets in (await _master_secrets(kcp, namespace, wire.KYMA_NAME_LABEL)).items():
        try:
            listing.runtimes.append(_runtime(_one(runtime, secrets, namespace), kyma_ids))
        except ValueError as exc:
            listing.unusable[runtime] = f"master kubeconfig unusable: {exc}"
    return listing


async def get_runtime(
    kcp: kube.ApiClient, runtime: str, *, identity: Identity = Identity.KYMA_NAME, namespace: str = wire.KCP_NAMESPACE
) -> Runtime:
    found = await _master_secrets(kcp, namespace, f"{wire.KYMA_NAME_LABEL}={ids.runtime_id(runtime)}")
    if runtime not in found:
        raise LookupError(
            f"runtime {runtime!r} has no master kubeconfig Secret in {namespace} "
            f"(a Secret labelled {wire.KYMA_NAME_LABEL}={runtime}, kubeconfig under key {wire.KUBECONFIG_KEY!r})"
        )
    return _runtime(_one(runtime, found[runtime], namespace), await _kyma_ids(kcp, namespace, identity))
