"""Kubeconfig documents, built as plain data (written to files or Secrets by the caller)."""

import base64
from typing import Any

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def build(
    *,
    cluster: str,
    server: str,
    ca_pem: bytes,
    user: str,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """A single-context kubeconfig authenticating with a client certificate or a bearer token."""
    if (client_cert_pem is None) != (client_key_pem is None):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    if (client_cert_pem is None) == (token is None):
        raise ValueError("give exactly one credential: a client certificate or a token")
    credentials: dict[str, str] = (
        {"token": token}
        if token is not None
        else {
            "client-certificate-data": _b64(client_cert_pem or b""),
            "client-key-data": _b64(client_key_pem or b""),
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }


def dump(kubeconfig: dict[str, Any]) -> str:
    return yaml.safe_dump(kubeconfig, sort_keys=False)
