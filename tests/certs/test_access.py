"""Least-privilege module kubeconfigs against a real runtime apiserver."""

import asyncio
import base64
import uuid
from collections.abc import Awaitable
from typing import Any

import pytest
import yaml

from certs import access, runtimes
from clients import kube
from contract import wire

pytestmark = pytest.mark.integration

_CRDS = kube.Gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def module_access() -> access.AccessConfig:
    return access.AccessConfig.model_validate(
        {
            "modules": {
                "cloud-manager": {
                    "namespace": "kyma-system",
                    "clusterRules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create"]}],
                    "tokenLifetimeSeconds": 600,
                }
            }
        }
    )


async def module_kubeconfig(kcp_api: kube.ApiClient, module: str, runtime: str) -> dict[str, object]:
    secret = await kube.request(
        kcp_api,
        "GET",
        kube.SECRETS.object_path(wire.KUBECONFIG_NAMESPACE, wire.module_kubeconfig_secret(module, runtime)),
    )
    document = yaml.safe_load(base64.b64decode(secret["data"][wire.KUBECONFIG_KEY]))
    assert isinstance(document, dict)
    return document


async def status_of(call: Awaitable[Any]) -> int:
    try:
        await call
    except kube.ApiError as exc:
        return exc.status
    return 200


async def test_module_kubeconfig_can_do_exactly_what_its_rules_allow(
    kcp_api: kube.ApiClient, registered_runtimes: list[str]
) -> None:
    """Reading pods and creating configmaps in its namespace works; anything else is 403."""
    config = module_access()
    runtime = await runtimes.get_runtime(kcp_api, "skr-1")
    await access.issue_kubeconfig(
        kcp=kcp_api, runtime=runtime, module="cloud-manager", access=config.module("cloud-manager")
    )
    async with await kube.api_client(await module_kubeconfig(kcp_api, "cloud-manager", "skr-1")) as api:
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{uuid.uuid4().hex[:6]}"}}
        assert await status_of(kube.request(api, "GET", "/api/v1/pods")) == 200
        assert await status_of(kube.request(api, "POST", kube.CONFIGMAPS.path("kyma-system"), body=configmap)) == 200
        assert await status_of(kube.request(api, "POST", kube.CONFIGMAPS.path("default"), body=configmap)) == 403
        assert await status_of(kube.request(api, "DELETE", "/api/v1/namespaces/default/pods/any")) == 403
        assert await status_of(kube.request(api, "GET", kube.SECRETS.path())) == 403
        crd = _CRDS.object_path(None, "vpcpeerings.cloud-resources.kyma-project.io")
        assert await status_of(kube.request(api, "DELETE", crd)) == 403


async def test_rotated_token_works_and_the_old_one_is_revoked(
    kcp_api: kube.ApiClient, registered_runtimes: list[str]
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
        assert await status_of(kube.request(api, "GET", "/api/v1/pods")) == 200
    async with await kube.api_client(old) as api:
        deadline = asyncio.get_running_loop().time() + 15
        while (status := await status_of(kube.request(api, "GET", "/api/v1/pods"))) != 401:
            assert asyncio.get_running_loop().time() < deadline, f"old token still answered {status}"
            await asyncio.sleep(0.2)
