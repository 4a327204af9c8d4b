"""KCP as the certs component sees it: master kubeconfig Secrets for each runtime."""

import pytest

from certs import stores
from clients import kube
from contract import wire
from devenv import landscape as landscape_mod
from pki import kubeconfigs
from reconciler import crds


def runtime_id_of(runtime: str) -> str:
    """The runtime id KCP's provisioning gave a test runtime (distinct from its Kyma name, to tell them apart)."""
    return f"id-{runtime}"


@pytest.fixture
async def registered_runtimes(landscape: landscape_mod.Landscape, kcp_api: kube.ApiClient) -> list[str]:
    """Every landscape runtime registered in KCP with its master (admin) kubeconfig."""
    await kube.ensure_namespace(kcp_api, wire.KCP_NAMESPACE)
    for name, cluster in landscape.runtimes.items():
        await stores.write_secret(
            kcp_api,
            namespace=wire.KCP_NAMESPACE,
            name=wire.master_kubeconfig_secret(name),
            data={wire.KUBECONFIG_KEY: kubeconfigs.dump(cluster.admin_kubeconfig()).encode()},
            labels={wire.KYMA_NAME_LABEL: name, wire.RUNTIME_ID_LABEL: runtime_id_of(name)},
        )
        await _label_kyma(kcp_api, name, {wire.RUNTIME_ID_LABEL: runtime_id_of(name)})
    return list(landscape.runtimes)


async def _label_kyma(kcp: kube.ApiClient, name: str, labels: dict[str, str]) -> None:
    """The runtime's Kyma CR in KCP carrying ``labels`` (created if absent, other labels kept)."""
    await crds.install_if_absent(kcp, crds.lifecycle_manager_crds())
    path = kube.KYMAS.object_path(wire.KCP_NAMESPACE, name)
    if await kube.get_or_none(kcp, path) is None:
        body = {"apiVersion": kube.KYMAS.api_version, "kind": "Kyma", "metadata": {"name": name}, "spec": {}}
        await kube.request(kcp, "POST", kube.KYMAS.path(wire.KCP_NAMESPACE), body=body)
    await kube.merge_patch(kcp, path, {"metadata": {"labels": labels}})
