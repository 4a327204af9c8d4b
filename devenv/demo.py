"""The end-to-end demo: the whole pipeline on this machine, then two scenarios with timings.

Everything is real and separate: NATS, a KCP and two runtime apiservers, `kyma-listener`,
one `kyma-watcher` per runtime and `kyma-reconciler` as their own processes, with certificates
issued by `certs` and least-privilege kubeconfigs minted for watchers and reconciler. Only the
KCP-side peering manager (cloud-manager's job) is a stand-in, run inside this process.
"""

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import yaml

from certs import access, rotation, stores
from clients import informer, kube
from contract import wire
from devenv import landscape as landscape_mod
from devenv import net, process, standins
from pki import authority, kubeconfigs
from reconciler import crds

RECONCILER_ACCESS = {
    "clusterRules": [
        {
            "apiGroups": ["", "operator.kyma-project.io", "cloud-resources.kyma-project.io", "apiextensions.k8s.io"],
            "resources": ["*"],
            "verbs": ["*"],
        }
    ],
}
WATCHER_ACCESS = {
    "clusterRules": [
        {
            "apiGroups": ["", "operator.kyma-project.io", "cloud-resources.kyma-project.io"],
            "resources": ["configmaps", "vpcpeerings", "moduletemplates", "kymas"],
            "verbs": ["get", "list", "watch"],
        }
    ],
    "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "update"]},
    ],
}
MERGE = "application/merge-patch+json"
DEMO_BINDING = {
    "apiVersion": crds.SYNC_BINDING.api_version,
    "kind": "SyncBinding",
    "metadata": {"name": "demo"},
    "spec": {
        "namespaces": ["default"],
        "runtimeSelector": {"matchLabels": {"kyma-project.io/channel": "regular"}},
        "targetNamespaces": ["demo"],
    },
}
"""SyncResources in KCP namespace default may sync to runtimes on channel regular, into namespace demo only."""


@dataclasses.dataclass
class Timeline:
    started: float = dataclasses.field(default_factory=time.perf_counter)

    def say(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:7.2f}s] {message}", flush=True)


async def until(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> float:
    began = time.perf_counter()
    while not await check():
        if time.perf_counter() - began > timeout:
            raise TimeoutError(f"demo: {what} did not happen within {timeout:.0f}s")
        await asyncio.sleep(0.05)
    return time.perf_counter() - began


def _start(name: str, argv: list[str], workdir: Path, procs: list[process.ManagedProcess]) -> process.ManagedProcess:
    managed = process.ManagedProcess(
        name=name, argv=[sys.executable, "-m", *argv], log_path=workdir / "logs" / f"{name}.log"
    )
    managed.start()
    procs.append(managed)
    return managed


async def _prepare(running: landscape_mod.Landscape, kcp: kube.ApiClient, say: Timeline) -> Path:
    """Register runtimes in KCP, issue certificates, mint kubeconfigs; returns the CA store."""
    workdir = running.workdir
    await kube.ensure_namespace(kcp, wire.KCP_NAMESPACE)
    await crds.install(kcp, [*crds.kcp_crds(), crds.vpc_peering_crd()])
    await crds.install_if_absent(kcp, crds.lifecycle_manager_crds())  # KCP here has no lifecycle-manager
    await kube.create_or_replace(kcp, crds.SYNC_BINDING.path(), DEMO_BINDING)
    for name, cluster in running.runtimes.items():
        await stores.write_secret(
            kcp,
            namespace=wire.KCP_NAMESPACE,
            name=wire.master_kubeconfig_secret(name),
            data={wire.KUBECONFIG_KEY: kubeconfigs.dump(cluster.admin_kubeconfig()).encode()},
            labels={wire.KYMA_NAME_LABEL: name},
        )
        await kube.request(
            kcp,
            "POST",
            crds.KYMA.path(wire.KCP_NAMESPACE),
            body={
                "apiVersion": crds.KYMA.api_version,
                "kind": "Kyma",
                "metadata": {
                    "name": name,
                    "namespace": wire.KCP_NAMESPACE,
                    "labels": {"kyma-project.io/channel": "regular"},
                },
                "spec": {"channel": "regular", "modules": [{"name": "btp-operator"}]},
            },
        )
        async with await kube.api_client(cluster.admin_kubeconfig()) as runtime_api:
            await crds.install(runtime_api, [crds.vpc_peering_crd()])
            await kube.ensure_namespace(runtime_api, "demo")
    store = stores.DirectoryStore(workdir / "ca")
    await store.write(authority.Authority.create("kyma-sync-demo-ca").to_files())
    config = access.AccessConfig.model_validate(
        {"modules": {"kyma-sync": RECONCILER_ACCESS, "kyma-watcher": WATCHER_ACCESS}}
    )
    report = await rotation.rotate_once(kcp=kcp, store=store, settings=rotation.RotationSettings(module_access=config))
    if report.failures:
        raise RuntimeError(f"demo: issuing credentials failed: {report.failures}")
    say.say(
        f"certificates issued to {', '.join(sorted(report.certificates))}; kubeconfigs minted: {', '.join(sorted(report.kubeconfigs))}"
    )
    return store.directory


async def _runtime_files(kcp: kube.ApiClient, running: landscape_mod.Landscape, runtime: str) -> dict[str, str]:
    """The watcher's kubeconfig (minted, least privilege) and certificate, as files."""
    directory = running.workdir / "runtimes" / runtime
    directory.mkdir(parents=True, exist_ok=True)
    secret = await kube.request(
        kcp,
        "GET",
        f"/api/v1/namespaces/{wire.KUBECONFIG_NAMESPACE}/secrets/"
        f"{wire.module_kubeconfig_secret('kyma-watcher', runtime)}",
    )
    (directory / "kubeconfig").write_bytes(base64.b64decode(secret["data"][wire.KUBECONFIG_KEY]))
    async with await kube.api_client(running.runtimes[runtime].admin_kubeconfig()) as runtime_api:
        tls = await kube.request(
            runtime_api,
            "GET",
            f"/api/v1/namespaces/{rotation.RUNTIME_SECRET_NAMESPACE}/secrets/{rotation.RUNTIME_SECRET_NAME}",
        )
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (directory / key).write_bytes(base64.b64decode(tls["data"][key]))
    return {"dir": str(directory), "kubeconfig": str(directory / "kubeconfig")}


@contextlib.asynccontextmanager
async def pipeline(running: landscape_mod.Landscape, kcp: kube.ApiClient, say: Timeline) -> AsyncIterator[None]:
    workdir = running.workdir
    ca_dir = await _prepare(running, kcp, say)
    ca = authority.Authority.from_files(await stores.DirectoryStore(ca_dir).read())
    serving = ca.issue_server(["127.0.0.1", "localhost"], lifetime=datetime.timedelta(days=1))
    (workdir / "listener.crt").write_bytes(serving.cert_pem)
    (workdir / "listener.key").write_bytes(serving.key_pem)
    port, listener_management = net.free_port(), net.free_port()
    configs = workdir / "config"
    configs.mkdir(exist_ok=True)
    (configs / "listener.yaml").write_text(
        yaml.safe_dump(
            {
                "host": "127.0.0.1",
                "port": port,
                "management_port": listener_management,
                "modules": ["kyma-sync", "cloud-manager"],
                # Both runtimes run cloud-manager (VpcPeerings); any other runtime may report kyma-sync only.
                "runtime_modules": {runtime: ["kyma-sync", "cloud-manager"] for runtime in running.runtimes},
                "tls": {"cert_file": str(workdir / "listener.crt"), "key_file": str(workdir / "listener.key")},
                "trust": {"client_ca_file": str(ca_dir / authority.BUNDLE), "crl_file": str(ca_dir / authority.CRL)},
                "nats": {"servers": [running.nats.url], "credentials": _credentials(running, "listener")},
            }
        )
    )
    (configs / "reconciler.yaml").write_text(
        yaml.safe_dump(
            {
                "nats": {"servers": [running.nats.url], "credentials": _credentials(running, "reconciler")},
                "management_port": net.free_port(),
                "mirror": {"enabled": True},
                "sync_resources": {"resync_seconds": 600},
                # The demo's runtimes have no lifecycle-manager to install its Kyma and ModuleTemplate CRDs.
                "kyma": {"runtime_crds": "create-if-absent"},
                "module_templates": {"runtime_crds": "create-if-absent"},
            }
        )
    )
    procs: list[process.ManagedProcess] = []
    try:
        listener = _start("listener", ["listener.cli", "--config", str(configs / "listener.yaml")], workdir, procs)
        listener.wait_ready(lambda: net.http_ok(f"http://127.0.0.1:{listener_management}/readyz"), timeout=30)
        say.say(f"listener up at https://127.0.0.1:{port} (mTLS)")
        for runtime in running.runtimes:
            files = await _runtime_files(kcp, running, runtime)
            synced = "kyma-project.io/synced-by=kyma-sync"
            (configs / f"watcher-{runtime}.yaml").write_text(
                yaml.safe_dump(
                    {
                        "runtime": runtime,
                        "listeners": [{"url": f"https://127.0.0.1:{port}"}],
                        "tls": {
                            "cert_file": f"{files['dir']}/tls.crt",
                            "key_file": f"{files['dir']}/tls.key",
                            "ca_file": f"{files['dir']}/ca.crt",
                        },
                        "watches": [
                            {
                                "version": "v1",
                                "resource": "configmaps",
                                "label_selector": synced,
                                "module": "kyma-sync",
                            },
                            {
                                "group": "operator.kyma-project.io",
                                "version": "v1beta2",
                                "resource": "moduletemplates",
                                "label_selector": synced,
                                "module": "kyma-sync",
                            },
                            {
                                "group": "cloud-resources.kyma-project.io",
                                "version": "v1beta1",
                                "resource": "vpcpeerings",
                                "label_selector": f"!{wire.MIRROR_OPT_OUT_LABEL}",
                                "module": "cloud-manager",
                            },
                        ],
                        "management_port": net.free_port(),
                    }
                )
            )
            _start(
                f"watcher-{runtime}",
                [
                    "watcher.cli",
                    "--config",
                    str(configs / f"watcher-{runtime}.yaml"),
                    "--kubeconfig",
                    files["kubeconfig"],
                    "--identity",
                    f"{runtime}-node-0",
                ],
                workdir,
                procs,
            )
        say.say(
            f"watchers started in {', '.join(running.runtimes)} (least-privilege kubeconfigs, runtime certificates)"
        )
        _start(
            "reconciler",
            [
                "reconciler.cli",
                "--config",
                str(configs / "reconciler.yaml"),
                "--kcp-kubeconfig",
                str(running.kcp.admin_kubeconfig_path),
            ],
            workdir,
            procs,
        )
        say.say("reconciler started (SyncResources, mirror, ModuleTemplates, Kyma)")
        yield
    finally:
        for managed in reversed(procs):
            managed.stop()


async def scenario(running: landscape_mod.Landscape, kcp: kube.ApiClient, say: Timeline) -> None:
    skr = {name: await kube.api_client(c.admin_kubeconfig()) for name, c in running.runtimes.items()}
    try:
        sr_path = f"{crds.SYNC_RESOURCE.path('default')}/demo"
        cm = "/api/v1/namespaces/demo/configmaps/demo-settings"
        await kube.request(
            kcp,
            "POST",
            crds.SYNC_RESOURCE.path("default"),
            body={
                "apiVersion": crds.SYNC_RESOURCE.api_version,
                "kind": "SyncResource",
                "metadata": {"name": "demo", "namespace": "default"},
                "spec": {
                    "target": {"selector": {"matchLabels": {"kyma-project.io/channel": "regular"}}},
                    "items": [
                        {
                            "name": "settings",
                            "strategy": "CreateAndSync",
                            "resource": {
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "metadata": {"name": "demo-settings", "namespace": "demo"},
                                "data": {"feature": "on"},
                            },
                        },
                        {
                            "name": "defaults",
                            "strategy": "CreateAndIgnore",
                            "resource": {
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "metadata": {"name": "demo-defaults", "namespace": "demo"},
                                "data": {"tune": "me"},
                            },
                        },
                        {
                            "name": "secret",
                            "strategy": "CreateAndSync",
                            "resource": {
                                "apiVersion": "v1",
                                "kind": "Secret",
                                "metadata": {"name": "never", "namespace": "demo"},
                                "stringData": {"x": "y"},
                            },
                        },
                    ],
                },
            },
        )
        say.say("SyncResource default/demo created: 3 items to every runtime on channel 'regular'")

        async def sr_state() -> bool:
            state = ((await kube.get_or_none(kcp, sr_path) or {}).get("status") or {}).get("state")
            return state == "Warning"

        took = await until(sr_state, timeout=60, what="SyncResource convergence")
        say.say(
            f"SyncResource converged in {took:.2f}s: state Warning (the Secret item is a restricted kind, not synced)"
        )
        for name, api in skr.items():
            found = await kube.get_or_none(api, cm)
            say.say(f"  {name}: demo-settings data={found['data'] if found else None}")

        await kube.request(
            skr["skr-1"],
            "PATCH",
            cm,
            body={"data": {"feature": "off"}},
            content_type=MERGE,
            query=[("fieldManager", "kubectl")],
        )
        say.say("user edits demo-settings in skr-1 (feature=off)")

        async def reset() -> bool:
            return ((await kube.get_or_none(skr["skr-1"], cm)) or {}).get("data") == {"feature": "on"}

        took = await until(reset, timeout=30, what="drift reset")
        say.say(f"drift reset after {took:.2f}s (watcher -> listener -> JetStream -> reconciler)")

        peering = crds.VPC_PEERING.path("demo") + "/peer-to-shared-vpc"
        await kube.request(
            skr["skr-1"],
            "POST",
            crds.VPC_PEERING.path("demo"),
            body={
                "apiVersion": crds.VPC_PEERING.api_version,
                "kind": "VpcPeering",
                "metadata": {"name": "peer-to-shared-vpc", "namespace": "demo"},
                "spec": {"remoteVpc": "vpc-0123"},
            },
        )
        say.say("user creates VpcPeering demo/peer-to-shared-vpc in skr-1")
        mirror = crds.VPC_PEERING.path("mirror-skr-1") + "/demo.peer-to-shared-vpc"
        took = await until(lambda: _exists(kcp, mirror), timeout=30, what="mirror in KCP")
        say.say(f"mirrored to KCP as mirror-skr-1/demo.peer-to-shared-vpc after {took:.2f}s")

        async def status_back() -> bool:
            return bool(((await kube.get_or_none(skr["skr-1"], peering)) or {}).get("status", {}).get("peeringId"))

        took = await until(status_back, timeout=30, what="peering status in the runtime")
        status = ((await kube.get_or_none(skr["skr-1"], peering)) or {}).get("status")
        say.say(f"KCP status flowed back to skr-1 after {took:.2f}s: {status}")
        await kube.request(skr["skr-1"], "DELETE", peering)

        async def both_gone() -> bool:
            return not await _exists(kcp, mirror) and not await _exists(skr["skr-1"], peering)

        took = await until(both_gone, timeout=30, what="peering cleanup")
        say.say(f"user deletes the VpcPeering: mirror and runtime object gone after {took:.2f}s")

        async def kyma_in_runtime() -> bool:
            found = await kube.get_or_none(skr["skr-2"], f"{crds.KYMA.path('kyma-system')}/default")
            return found is not None and {m["name"] for m in found["spec"].get("modules", [])} == {"btp-operator"}

        took = await until(kyma_in_runtime, timeout=30, what="Kyma CR in the runtime")
        say.say(f"Kyma CR kyma-system/default present in the runtimes with KCP's modules (checked after {took:.2f}s)")
    finally:
        for api in skr.values():
            await api.close()


async def _exists(api: kube.ApiClient, path: str) -> bool:
    return await kube.get_or_none(api, path) is not None


async def run(running: landscape_mod.Landscape, *, wait: Callable[[], Awaitable[None]]) -> None:
    say = Timeline()
    async with await kube.api_client(running.kcp.admin_kubeconfig()) as kcp, pipeline(running, kcp, say):
        stop_manager = asyncio.Event()
        manager = asyncio.create_task(
            informer.follow(
                kcp,
                crds.VPC_PEERING,
                namespace=None,
                label_selector=wire.RUNTIME_LABEL,
                handler=standins.PeeringManager(kcp),
                stop=stop_manager,
            )
        )
        try:
            await _team(running, say)
            await scenario(running, kcp, say)
            say.say(f"demo done; component logs in {running.workdir / 'logs'}")
            await wait()
        finally:
            stop_manager.set()
            await manager


def _credentials(running: landscape_mod.Landscape, identity: str) -> dict[str, object]:
    return running.nats.credentials(identity).model_dump(mode="json")


DEMO_TEAM, DEMO_TEAM_MODULE = "team-cloud", "cloud-manager"


async def _team(running: landscape_mod.Landscape, say: Timeline) -> None:
    """A central team's identity (module cloud-manager only), and how to connect as it and as the admin."""
    team = await running.nats.add_team(DEMO_TEAM, module=DEMO_TEAM_MODULE)
    admin = running.nats.credentials()
    say.say(
        f"NATS admin: nats --server {running.nats.url} --tlsca {admin.ca_file} --nkey {admin.nkey_seed_file} "
        "stream info KYMA_EVENTS"
    )
    say.say(
        f"NATS team {DEMO_TEAM} (reads module {DEMO_TEAM_MODULE} only): python examples/central_team_subscriber.py "
        f"--nats {running.nats.url} --ca {team.ca_file} --nkey {team.nkey_seed_file} --team {DEMO_TEAM} "
        f"--module {DEMO_TEAM_MODULE}"
    )
