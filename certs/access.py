"""Least-privilege kubeconfigs for the operators of a module, minted in a runtime.

Per module and runtime: a ServiceAccount, a ClusterRole and/or Role with exactly the module's
rules and their bindings, and a short-lived token from the TokenRequest API. Each token is
bound to an "anchor" Secret of its own: deleting the anchor revokes the token at once (the
apiserver checks the bound object on every request), which is how a rotation retires the
previous token instead of waiting for it to expire.
"""

import base64
import dataclasses
import datetime
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from certs import runtimes, stores
from clients import kube
from contract import ids, wire
from kit import files
from pki import kubeconfigs

_EXPIRES = "kyma-project.io/token-expires-at"
_ISSUED = "kyma-project.io/token-issued-at"
_ANCHOR_LABEL = "kyma-project.io/token-anchor-of"

_RBAC = "rbac.authorization.k8s.io"
_SERVICE_ACCOUNTS = kube.Gvr("", "v1", "serviceaccounts")
_CLUSTER_ROLES = kube.Gvr(_RBAC, "v1", "clusterroles")
_CLUSTER_ROLE_BINDINGS = kube.Gvr(_RBAC, "v1", "clusterrolebindings")
_ROLES = kube.Gvr(_RBAC, "v1", "roles")
_ROLE_BINDINGS = kube.Gvr(_RBAC, "v1", "rolebindings")


class PolicyRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_groups: tuple[str, ...] = Field(alias="apiGroups")
    resources: tuple[str, ...]
    verbs: tuple[str, ...] = Field(min_length=1)
    resource_names: tuple[str, ...] | None = Field(default=None, alias="resourceNames")

    def to_k8s(self) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        return rule


class ModuleAccess(BaseModel):
    """What one module's operators may do in a runtime."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    namespace: str = Field(default="kyma-system", description="where the ServiceAccount (and Role) live")
    cluster_rules: tuple[PolicyRule, ...] = Field(default=(), alias="clusterRules")
    rules: tuple[PolicyRule, ...] = Field(default=(), description="namespaced rules in `namespace`")
    token_lifetime_seconds: int = Field(default=3600, ge=600, alias="tokenLifetimeSeconds")


class AccessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    modules: dict[ids.ModuleNameField, ModuleAccess]

    def module(self, name: str) -> ModuleAccess:
        try:
            return self.modules[name]
        except KeyError:
            raise LookupError(f"module {name!r} has no access definition; known: {sorted(self.modules)}") from None


def load_access(path: Path) -> AccessConfig:
    return files.load_yaml(path, AccessConfig, what="access definitions")


def service_account_name(module: str) -> str:
    return f"kyma-sync-{module}"


@dataclasses.dataclass(frozen=True)
class Token:
    value: str
    expires_at: datetime.datetime
    anchor: str


async def _ensure_rbac(api: kube.ApiClient, module: str, access: ModuleAccess) -> None:
    name = service_account_name(module)
    subject = {"kind": "ServiceAccount", "name": name, "namespace": access.namespace}
    meta = {"name": name, "labels": {wire.MODULE_LABEL: module}}

    def body(gvr: kube.Gvr, kind: str, **fields: Any) -> dict[str, Any]:
        return {"apiVersion": gvr.api_version, "kind": kind, "metadata": meta, **fields}

    def role_ref(kind: str) -> dict[str, str]:
        return {"apiGroup": _RBAC, "kind": kind, "name": name}

    await kube.ensure_namespace(api, access.namespace)
    try:
        await kube.request(
            api, "POST", _SERVICE_ACCOUNTS.path(access.namespace), body=body(_SERVICE_ACCOUNTS, "ServiceAccount")
        )
    except kube.ConflictError:
        pass
    await kube.create_or_replace(
        api,
        _CLUSTER_ROLES.path(),
        body(_CLUSTER_ROLES, "ClusterRole", rules=[r.to_k8s() for r in access.cluster_rules]),
    )
    await kube.create_or_replace(
        api,
        _CLUSTER_ROLE_BINDINGS.path(),
        body(_CLUSTER_ROLE_BINDINGS, "ClusterRoleBinding", roleRef=role_ref("ClusterRole"), subjects=[subject]),
    )
    await kube.create_or_replace(
        api, _ROLES.path(access.namespace), body(_ROLES, "Role", rules=[r.to_k8s() for r in access.rules])
    )
    await kube.create_or_replace(
        api,
        _ROLE_BINDINGS.path(access.namespace),
        body(_ROLE_BINDINGS, "RoleBinding", roleRef=role_ref("Role"), subjects=[subject]),
    )


async def mint_token(api: kube.ApiClient, module: str, access: ModuleAccess) -> Token:
    """RBAC brought to the module's rules, and a new token bound to a new anchor Secret."""
    await _ensure_rbac(api, module, access)
    anchor = await kube.request(
        api,
        "POST",
        kube.SECRETS.path(access.namespace),
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{service_account_name(module)}-token-{uuid.uuid4().hex[:8]}",
                "labels": {_ANCHOR_LABEL: module},
            },
            "type": "Opaque",
        },
    )
    path = _SERVICE_ACCOUNTS.object_path(access.namespace, service_account_name(module), subresource="token")
    request = await kube.request(
        api,
        "POST",
        path,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [],
                "expirationSeconds": access.token_lifetime_seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "name": anchor["metadata"]["name"],
                    "uid": anchor["metadata"]["uid"],
                },
            },
        },
    )
    return Token(
        value=request["status"]["token"],
        expires_at=datetime.datetime.fromisoformat(request["status"]["expirationTimestamp"]),
        anchor=anchor["metadata"]["name"],
    )


async def revoke_tokens(api: kube.ApiClient, module: str, access: ModuleAccess, *, keep: str) -> list[str]:
    """Delete every anchor of the module but ``keep``: their tokens stop working at once."""
    anchors, _ = await kube.list_objects(
        api, kube.SECRETS, namespace=access.namespace, label_selector=f"{_ANCHOR_LABEL}={module}"
    )
    revoked = [s["metadata"]["name"] for s in anchors if s["metadata"]["name"] != keep]
    for name in revoked:
        await kube.delete(api, kube.SECRETS.object_path(access.namespace, name))
    return revoked


def _cluster_of(master: dict[str, Any]) -> tuple[str, bytes]:
    context_name = master["current-context"]
    context = next(c["context"] for c in master["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in master["clusters"] if c["name"] == context["cluster"])
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])


async def issue_kubeconfig(
    *,
    kcp: kube.ApiClient,
    runtime: runtimes.Runtime,
    module: str,
    access: ModuleAccess,
    namespace: str = wire.KUBECONFIG_NAMESPACE,
) -> Token:
    """Mint a token in the runtime, store its kubeconfig in KCP, then revoke the previous tokens."""
    server, ca_pem = _cluster_of(runtime.kubeconfig)
    async with await kube.api_client(runtime.kubeconfig) as runtime_api:
        token = await mint_token(runtime_api, module, access)
        document = kubeconfigs.build(
            cluster=runtime.name, server=server, ca_pem=ca_pem, user=service_account_name(module), token=token.value
        )
        await kube.ensure_namespace(kcp, namespace)
        await stores.write_secret(
            kcp,
            namespace=namespace,
            name=wire.module_kubeconfig_secret(module, runtime.name),
            data={wire.KUBECONFIG_KEY: kubeconfigs.dump(document).encode()},
            labels={wire.RUNTIME_LABEL: runtime.name, wire.MODULE_LABEL: module},
            annotations={
                _EXPIRES: token.expires_at.isoformat(),
                _ISSUED: datetime.datetime.now(datetime.UTC).isoformat(),
            },
        )
        await revoke_tokens(runtime_api, module, access, keep=token.anchor)
    return token


async def kubeconfig_due(
    kcp: kube.ApiClient,
    *,
    runtime: str,
    module: str,
    fraction: float = 2 / 3,
    namespace: str = wire.KUBECONFIG_NAMESPACE,
) -> bool:
    """Whether the module's kubeconfig for the runtime is missing or past ``fraction`` of its token's life."""
    secret = await kube.get_or_none(
        kcp, kube.SECRETS.object_path(namespace, wire.module_kubeconfig_secret(module, runtime))
    )
    if secret is None:
        return True
    annotations = secret["metadata"].get("annotations") or {}
    if _EXPIRES not in annotations or _ISSUED not in annotations:
        return True
    issued = datetime.datetime.fromisoformat(annotations[_ISSUED])
    expires = datetime.datetime.fromisoformat(annotations[_EXPIRES])
    return datetime.datetime.now(datetime.UTC) >= issued + (expires - issued) * fraction
