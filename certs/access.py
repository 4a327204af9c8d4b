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

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field

from certs import kubeconfigs, runtimes, stores
from clients import kube
from contract import ids
from kit import files

_EXPIRES = "kyma-project.io/token-expires-at"
_ISSUED = "kyma-project.io/token-issued-at"
_ANCHOR_LABEL = "kyma-project.io/token-anchor-of"


class PolicyRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_groups: tuple[str, ...] = Field(alias="apiGroups")
    resources: tuple[str, ...]
    verbs: tuple[str, ...] = Field(min_length=1)
    resource_names: tuple[str, ...] | None = Field(default=None, alias="resourceNames")

    def to_k8s(self) -> client.V1PolicyRule:
        return client.V1PolicyRule(
            api_groups=list(self.api_groups),
            resources=list(self.resources),
            verbs=list(self.verbs),
            resource_names=list(self.resource_names) if self.resource_names else None,
        )


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


async def _create_or_replace(create: Any, replace: Any, name: str, *args: Any) -> None:
    try:
        await create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise
        await replace(name, *args)


async def _ensure_rbac(api: client.ApiClient, module: str, access: ModuleAccess) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    name = service_account_name(module)
    subject = client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=access.namespace)
    meta = client.V1ObjectMeta(name=name, labels={runtimes.MODULE_LABEL: module})
    await kube.ensure_namespace(api, access.namespace)
    try:
        await core.create_namespaced_service_account(access.namespace, client.V1ServiceAccount(metadata=meta))
    except ApiException as exc:
        if exc.status != 409:
            raise
    cluster_role = client.V1ClusterRole(metadata=meta, rules=[r.to_k8s() for r in access.cluster_rules])
    await _create_or_replace(rbac.create_cluster_role, rbac.replace_cluster_role, name, cluster_role)
    await _create_or_replace(
        rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, name,
        client.V1ClusterRoleBinding(
            metadata=meta, role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=[subject],
        ),
    )
    role = client.V1Role(metadata=meta, rules=[r.to_k8s() for r in access.rules])
    await _create_or_replace(rbac.create_namespaced_role, rbac.replace_namespaced_role, name, access.namespace, role)
    await _create_or_replace(
        rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding, name, access.namespace,
        client.V1RoleBinding(
            metadata=meta, role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=[subject],
        ),
    )


async def mint_token(api: client.ApiClient, module: str, access: ModuleAccess) -> Token:
    """RBAC brought to the module's rules, and a new token bound to a new anchor Secret."""
    try:
        await _ensure_rbac(api, module, access)
        core = client.CoreV1Api(api)
        anchor = await core.create_namespaced_secret(
            access.namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name=f"{service_account_name(module)}-token-{uuid.uuid4().hex[:8]}",
                    labels={_ANCHOR_LABEL: module},
                ),
                type="Opaque",
            ),
        )
        request = await core.create_namespaced_service_account_token(
            service_account_name(module),
            access.namespace,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(
                    audiences=[],
                    expiration_seconds=access.token_lifetime_seconds,
                    bound_object_ref=client.V1BoundObjectReference(
                        api_version="v1", kind="Secret", name=anchor.metadata.name, uid=anchor.metadata.uid
                    ),
                )
            ),
        )
    except kube.API_ERRORS as exc:
        raise kube.translate(exc) from exc
    return Token(value=request.status.token, expires_at=request.status.expiration_timestamp, anchor=anchor.metadata.name)


async def revoke_tokens(api: client.ApiClient, module: str, access: ModuleAccess, *, keep: str) -> list[str]:
    """Delete every anchor of the module but ``keep``: their tokens stop working at once."""
    core = client.CoreV1Api(api)
    try:
        anchors = await core.list_namespaced_secret(access.namespace, label_selector=f"{_ANCHOR_LABEL}={module}")
        revoked = [s.metadata.name for s in anchors.items if s.metadata.name != keep]
        for name in revoked:
            await core.delete_namespaced_secret(name, access.namespace)
    except kube.API_ERRORS as exc:
        raise kube.translate(exc) from exc
    return revoked


def _cluster_of(master: dict[str, Any]) -> tuple[str, bytes]:
    context_name = master["current-context"]
    context = next(c["context"] for c in master["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in master["clusters"] if c["name"] == context["cluster"])
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])


async def issue_kubeconfig(
    *,
    kcp: client.ApiClient,
    runtime: runtimes.Runtime,
    module: str,
    access: ModuleAccess,
    namespace: str = runtimes.KUBECONFIG_NAMESPACE,
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
            client.CoreV1Api(kcp),
            namespace=namespace,
            name=runtimes.module_secret_name(module, runtime.name),
            data={runtimes.KUBECONFIG_KEY: kubeconfigs.dump(document).encode()},
            labels={runtimes.RUNTIME_LABEL: runtime.name, runtimes.MODULE_LABEL: module},
            annotations={
                _EXPIRES: token.expires_at.isoformat(),
                _ISSUED: datetime.datetime.now(datetime.UTC).isoformat(),
            },
        )
        await revoke_tokens(runtime_api, module, access, keep=token.anchor)
    return token


async def kubeconfig_due(
    kcp: client.ApiClient, *, runtime: str, module: str, fraction: float = 2 / 3, namespace: str = runtimes.KUBECONFIG_NAMESPACE
) -> bool:
    """Whether the module's kubeconfig for the runtime is missing or past ``fraction`` of its token's life."""
    try:
        secret = await client.CoreV1Api(kcp).read_namespaced_secret(runtimes.module_secret_name(module, runtime), namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise kube.translate(exc) from exc
    annotations = secret.metadata.annotations or {}
    if _EXPIRES not in annotations or _ISSUED not in annotations:
        return True
    issued = datetime.datetime.fromisoformat(annotations[_ISSUED])
    expires = datetime.datetime.fromisoformat(annotations[_EXPIRES])
    return datetime.datetime.now(datetime.UTC) >= issued + (expires - issued) * fraction
