"""Kubernetes API clients built from kubeconfig data."""

from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config


async def api_client(kubeconfig: dict[str, Any]) -> client.ApiClient:
    """An ApiClient for the kubeconfig's current context; the caller closes it."""
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
    return client.ApiClient(configuration=configuration)


def read_kubeconfig(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a kubeconfig document")
    return data
