"""kyma-certs as a process, with the CA in a KCP Secret, against real apiservers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devenv import landscape as landscape_mod

pytestmark = pytest.mark.integration


def kyma_certs(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "certs.cli", *argv], capture_output=True, text=True, timeout=60)


def test_secret_store_issue_to_runtime_and_kubeconfig(
    landscape: landscape_mod.Landscape, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """init-ca into a KCP Secret, a certificate into the runtime, a module kubeconfig into KCP."""
    kcp = [
        "--kcp-kubeconfig",
        str(landscape.kcp.admin_kubeconfig_path),
        "--store-secret",
        "kcp-system/kyma-sync-ca-cli",
    ]
    access_file = tmp_path / "access.yaml"
    access_file.write_text(
        yaml.safe_dump(
            {
                "modules": {
                    "keda": {"clusterRules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]}
                }
            }
        )
    )
    steps = [
        kyma_certs(*kcp, "init-ca", "--force"),
        kyma_certs(*kcp, "issue", "skr-1", "--to-runtime"),
        kyma_certs(*kcp, "kubeconfig", "keda", "skr-1", "--access", str(access_file)),
        kyma_certs(*kcp, "show"),
        kyma_certs(*kcp, "rotate", "--once", "--access", str(access_file)),
    ]
    for step in steps:
        assert step.returncode == 0, step.stderr
    assert "kyma-system/kyma-watcher-certificate" in steps[1].stdout
    assert "kyma-sync-kubeconfigs/keda-kubeconfig-skr-1" in steps[2].stdout
    assert "Secret kcp-system/kyma-sync-ca-cli" in steps[3].stdout
    report = json.loads(steps[4].stdout)
    assert report["failures"] == {} and report["checked"] == report["total"] == len(registered_runtimes)
    assert f"{len(registered_runtimes)}/{len(registered_runtimes)} runtimes checked" in steps[4].stderr


def test_unknown_runtime_and_module_are_named(
    landscape: landscape_mod.Landscape, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """Asking for a runtime or module that does not exist fails with exit 1 and says which."""
    kcp = [
        "--kcp-kubeconfig",
        str(landscape.kcp.admin_kubeconfig_path),
        "--store-secret",
        "kcp-system/kyma-sync-ca-cli2",
    ]
    assert kyma_certs(*kcp, "init-ca", "--force").returncode == 0
    missing = kyma_certs(*kcp, "issue", "skr-404", "--to-runtime")
    assert missing.returncode == 1 and "skr-404" in missing.stderr
    access_file = tmp_path / "access.yaml"
    access_file.write_text(yaml.safe_dump({"modules": {"keda": {}}}))
    unknown = kyma_certs(*kcp, "kubeconfig", "nope", "skr-1", "--access", str(access_file))
    assert unknown.returncode == 1 and "'nope'" in unknown.stderr
