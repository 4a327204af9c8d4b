"""Stand-ins for components outside kyma-sync that the demo and the tests need."""

from typing import Any

from clients import kube
from reconciler import crds


class PeeringManager:
    """cloud-manager's part in KCP: every mirrored VpcPeering gets a status (an informer handler)."""

    def __init__(self, kcp: kube.ApiClient) -> None:
        self._kcp = kcp

    @staticmethod
    def peering_id(peering: dict[str, Any]) -> str:
        return f"pcx-{peering['spec']['remoteVpc']}"

    async def listed(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            await self.changed("ADDED", obj)

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED" or obj.get("status"):
            return
        metadata = obj["metadata"]
        await kube.merge_patch(
            self._kcp,
            crds.VPC_PEERING.object_path(metadata["namespace"], metadata["name"], subresource="status"),
            {"status": {"state": "Ready", "peeringId": self.peering_id(obj)}},
        )
