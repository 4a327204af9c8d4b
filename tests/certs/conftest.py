"""KCP as the certs component sees it: master kubeconfig Secrets for each runtime."""

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs import kubeconfigs, runtimes, stores
from devenv import landscape as landscape_mod


@pytest.fixture
async def registered_runtimes(landscape: landscape_mod.Landscape, kcp_api: client.ApiClient) -> list[str]:
    """Every landscape runtime registered in KCP with its master (admin) kubeconfig."""
    core = client.CoreV1Api(kcp_api)
    try:
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=runtimes.KCP_NAMESPACE)))
    except ApiException as exc:
        if exc.status != 409:
            raise
    for name, cluster in landscape.runtimes.items():
        await stores.write_secret(
            core,
            namespace=runtimes.KCP_NAMESPACE,
            name=runtimes.master_secret_name(name),
            data={runtimes.KUBECONFIG_KEY: kubeconfigs.dump(cluster.admin_kubeconfig()).encode()},
            labels={runtimes.RUNTIME_LABEL: name},
        )
    return list(landscape.runtimes)
