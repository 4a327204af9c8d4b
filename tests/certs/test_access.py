"""Least-privilege module kubeconfigs against a real runtime apiserver."""

import asyncio
import base64
import uuid

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs import access, runtimes
from clients import kube

pytestmark = pytest.mark.integration


def module_access() -> access.AccessConfig:
    return access.AccessConfig.model_validate({
        "modules": {
            "cloud-manager": {
                "namespace": "kyma-system",
                "clusterRules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create"]}],
                "tokenLifetimeSeconds": 600,
            }
        }
    })


async def module_kubeconfig(kcp_api: client.ApiClient, module: str, runtime: str) -> dict[str, object]:
    secret = await client.CoreV1Api(kcp_api).read_namespaced_secret(
        runtimes.module_secret_name(module, runtime), runtimes.KUBECONFIG_NAMESPACE
    )
    document = yaml.safe_load(base64.b64decode(secret.data[runtimes.KUBECONFIG_KEY]))
    assert isinstance(document, dict)
    return document


async def status_of(call: object) -> int:
    try:
        await call  # type: ignore[misc]
    except ApiException as exc:
        return int(exc.status)
    return 200


async def test_module_kubeconfig_can_do_exactly_what_its_rules_allow(
    kcp_api: client.ApiClient, registered_runtimes: list[str]
) -> None:
    """Reading pods and creating configmaps in its namespace works; anything else is 403."""
    config = module_access()
    runtime = await runtimes.get_runtime(kcp_api, "skr-1")
    await access.issue_kubeconfig(kcp=kcp_api, runtime=runtime, module="cloud-manager", access=config.module("cloud-manager"))
    async with await kube.api_client(await module_kubeconfig(kcp_api, "cloud-manager", "skr-1")) as api:
        core, crds = client.CoreV1Api(api), client.ApiextensionsV1Api(api)
        configmap = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{uuid.uuid4().hex[:6]}"))
        assert await status_of(core.list_pod_for_all_namespaces()) == 200
        assert await status_of(core.create_namespaced_config_map("kyma-system", configmap)) == 200
        assert await status_of(core.create_namespaced_config_map("default", configmap)) == 403
        assert await status_of(core.delete_namespaced_pod("any", "default")) == 403
        assert await status_of(core.list_secret_for_all_namespaces()) == 403
        assert await status_of(crds.delete_custom_resource_definition("vpcpeerings.cloud-resources.kyma-project.io")) == 403


async def test_rotated_token_works_and_the_old_one_is_revoked(
    kcp_api: client.ApiClient, registered_runtimes: list[str]
) -> None:
    """After a rotation the new kubeconfig works and the previous token gets 401."""
    config = module_access().module("cloud-manager")
    runtime = await runtimes.get_runtime(kcp_api, "skr-2")
    await access.issue_kubeconfig(kcp=kcp_api, runtime=runtime, module="cloud-manager", access=config)
    old = await module_kubeconfig(kcp_api, "cloud-manager", "skr-2")
    assert not await access.kubeconfig_due(kcp_api, runtime="skr-2", module="cloud-manager")
    await access.issue_kubeconfig(kcp=kcp_api, runtime=runtime, module="cloud-manager", access=config)
    new = await module_kubeconfig(kcp_api, "cloud-manager", "skr-2")
    assert old != new
    async with await kube.api_client(new) as api:
        assert await status_of(client.CoreV1Api(api).list_pod_for_all_namespaces()) == 200
    async with await kube.api_client(old) as api:
        deadline = asyncio.get_running_loop().time() + 15
        while (status := await status_of(client.CoreV1Api(api).list_pod_for_all_namespaces())) != 401:
            assert asyncio.get_running_loop().time() < deadline, f"old token still answered {status}"
            await asyncio.sleep(0.2)
