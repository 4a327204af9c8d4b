"""One Kubernetes control plane: etcd plus kube-apiserver, RBAC on, certificates of our own.

Each cluster gets its own CA, so a credential of one cluster never works on another — as with
real runtimes. The admin identity (system:masters, bypasses RBAC) is used only by the test/demo
harness; components get least-privilege credentials. Its kubeconfig holds a bearer token: with a
client certificate the apiserver verified the certificate's signature on every request, a fifth of
its CPU while a test created objects as fast as it could. The admin's certificate remains for the
readiness probe.
"""

import dataclasses
import secrets
import ssl
from pathlib import Path
from typing import Any

from devenv import net, process, testbin
from pki import kubeconfigs, pki

_ETCD_READY_TIMEOUT = 30.0
_APISERVER_READY_TIMEOUT = 90.0
ADMIN_USER = "kyma-sync-admin"


@dataclasses.dataclass
class KubeCluster:
    name: str
    workdir: Path
    binaries: testbin.Binaries
    etcd_port: int = dataclasses.field(default_factory=net.free_port)
    etcd_peer_port: int = dataclasses.field(default_factory=net.free_port)
    port: int = dataclasses.field(default_factory=net.free_port)
    ca: pki.KeyPair = dataclasses.field(init=False)
    admin: pki.KeyPair = dataclasses.field(init=False)
    admin_token: str = dataclasses.field(init=False, repr=False)
    _etcd: process.ManagedProcess | None = None
    _apiserver: process.ManagedProcess | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ca = pki.create_ca(f"{self.name}-ca")
        self.admin = pki.issue(self.ca, common_name=ADMIN_USER, organizations=["system:masters"], client=True)
        serving = pki.loopback_server_cert(self.ca, common_name=f"{self.name}-apiserver")
        self.admin_token = secrets.token_urlsafe(32)
        sa_private, sa_public = pki.signing_key_pem()
        for file_name, content in {
            "ca.crt": self.ca.cert_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "sa.key": sa_private,
            "sa.pub": sa_public,
            "tokens.csv": f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'.encode(),
        }.items():
            (self.workdir / file_name).write_bytes(content)
        self.admin_kubeconfig_path.write_text(kubeconfigs.dump(self.admin_kubeconfig()))

    @property
    def server(self) -> str:
        return f"https://{net.LOOPBACK}:{self.port}"

    @property
    def admin_kubeconfig_path(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def admin_kubeconfig(self) -> dict[str, Any]:
        return kubeconfigs.build(
            cluster=self.name,
            server=self.server,
            ca_pem=self.ca.cert_pem,
            user=ADMIN_USER,
            token=self.admin_token,
        )

    def start(self) -> None:
        """Start both processes without waiting; wait_ready() waits (lets clusters boot in parallel)."""
        etcd_url = f"http://{net.LOOPBACK}:{self.etcd_port}"
        self._etcd = process.ManagedProcess(
            name=f"{self.name}/etcd",
            argv=[
                str(self.binaries.etcd),
                "--name",
                self.name,
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://{net.LOOPBACK}:{self.etcd_peer_port}",
                "--initial-advertise-peer-urls",
                f"http://{net.LOOPBACK}:{self.etcd_peer_port}",
                "--initial-cluster",
                f"{self.name}=http://{net.LOOPBACK}:{self.etcd_peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level",
                "warn",
            ],
            log_path=self.workdir / "etcd.log",
        )
        self._etcd.start()
        self._apiserver = process.ManagedProcess(
            name=f"{self.name}/kube-apiserver",
            argv=[
                str(self.binaries.kube_apiserver),
                "--etcd-servers",
                etcd_url,
                "--bind-address",
                net.LOOPBACK,
                "--advertise-address",
                net.LOOPBACK,
                "--secure-port",
                str(self.port),
                "--tls-cert-file",
                str(self.workdir / "apiserver.crt"),
                "--tls-private-key-file",
                str(self.workdir / "apiserver.key"),
                "--client-ca-file",
                str(self.workdir / "ca.crt"),
                "--token-auth-file",
                str(self.workdir / "tokens.csv"),
                "--service-cluster-ip-range",
                "10.0.0.0/24",
                "--allow-privileged=true",
                "--authorization-mode",
                "RBAC",
                "--disable-admission-plugins",
                "ServiceAccount",
                "--service-account-issuer",
                f"{self.server}/",
                "--service-account-key-file",
                str(self.workdir / "sa.pub"),
                "--service-account-signing-key-file",
                str(self.workdir / "sa.key"),
                "--enable-priority-and-fairness=false",
                "--v",
                "0",
            ],
            log_path=self.workdir / "kube-apiserver.log",
        )
        self._apiserver.start()

    def wait_ready(self) -> None:
        assert self._etcd is not None and self._apiserver is not None, "start() first"
        etcd_health = f"http://{net.LOOPBACK}:{self.etcd_port}/health"
        self._etcd.wait_ready(lambda: net.http_ok(etcd_health), timeout=_ETCD_READY_TIMEOUT)
        self._wait_apiserver_ready()

    def _wait_apiserver_ready(self) -> None:
        assert self._apiserver is not None, "start() first"
        context = self.admin_ssl_context()
        self._apiserver.wait_ready(
            lambda: net.http_ok(f"{self.server}/readyz", context=context),
            timeout=_APISERVER_READY_TIMEOUT,
        )

    def admin_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        cert_file, key_file = self.workdir / "admin.crt", self.workdir / "admin.key"
        cert_file.write_bytes(self.admin.cert_pem)
        key_file.write_bytes(self.admin.key_pem)
        context.load_cert_chain(cert_file, key_file)
        return context

    def pids(self) -> dict[str, int]:
        """The running processes by role (``etcd``, ``apiserver``), for benchmarks that account their CPU."""
        return {
            role: proc.pid for role, proc in (("etcd", self._etcd), ("apiserver", self._apiserver)) if proc and proc.pid
        }

    def stop(self) -> None:
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                proc.stop()

    def stop_apiserver(self) -> None:
        """Make the cluster unreachable (etcd keeps its data), as for an outage."""
        if self._apiserver is not None:
            self._apiserver.stop()

    def start_apiserver(self) -> None:
        assert self._apiserver is not None, "start() first"
        self._apiserver.start()
        self._wait_apiserver_ready()
