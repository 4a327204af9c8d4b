"""The Helm charts: lint clean, render, carry valid configuration, and are accepted by a real apiserver."""

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from clients import kube, objects
from contract import wire
from devenv import nats as nats_mod
from devenv import testbin
from eventbus import cli as eventbus_cli
from eventbus import layout, setup
from listener import settings as listener_settings
from reconciler import crds
from reconciler import settings as reconciler_settings
from watcher import config as watcher_config

CHARTS = Path(__file__).parents[2] / "charts"
REQUIRED = {"kyma-watcher": ["--set", "runtime=skr-1"], "kyma-listener": [], "kyma-reconciler": []}


@pytest.fixture(scope="module")
def helm() -> Path:
    return testbin.ensure_helm(directory=testbin.default_cache_root() / "tools")


def render(helm: Path, chart: str, *extra: str, namespace: str = "kyma-system") -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            str(helm),
            "template",
            chart,
            str(CHARTS / chart),
            "--namespace",
            namespace,
            "--include-crds",
            *REQUIRED[chart],
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def embedded(docs: list[dict[str, Any]], key: str) -> Any:
    [config_map] = [d for d in docs if d["kind"] == "ConfigMap" and key in d.get("data", {})]
    return yaml.safe_load(config_map["data"][key])


@pytest.mark.parametrize("chart", sorted(REQUIRED))
def test_chart_lints_clean(helm: Path, chart: str) -> None:
    """helm lint --strict passes with the required values."""
    result = subprocess.run(
        [str(helm), "lint", "--strict", str(CHARTS / chart), *REQUIRED[chart]], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_watcher_chart_config_is_valid_and_rbac_covers_exactly_the_watches(helm: Path) -> None:
    """The rendered watcher.yaml passes WatcherConfig; the ClusterRole reads exactly the watched resources."""
    docs = render(helm, "kyma-watcher")
    config = watcher_config.WatcherConfig.model_validate(embedded(docs, "watcher.yaml"))
    [role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert [(r["apiGroups"][0], r["resources"][0]) for r in role["rules"]] == [
        (w.group, w.resource) for w in config.watches
    ]
    assert all(r["verbs"] == ["get", "list", "watch"] for r in role["rules"])
    assert {d["kind"] for d in docs} >= {"DaemonSet", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"}


def test_watcher_chart_requires_the_runtime_name(helm: Path) -> None:
    """Rendering without runtime fails and says what is missing."""
    result = subprocess.run([str(helm), "template", "w", str(CHARTS / "kyma-watcher")], capture_output=True, text=True)
    assert result.returncode != 0 and "runtime (the Kyma name) is required" in result.stderr


@pytest.mark.parametrize(
    ("values", "proxy"),
    [
        pytest.param([], False, id="passthrough"),
        pytest.param(
            ["--set", "ingress.mode=forward-client-cert", "--set", "ingress.trustedProxies={10.1.2.3/32}"],
            True,
            id="forwarded",
        ),
    ],
)
def test_listener_chart_config_matches_the_ingress_mode(helm: Path, values: list[str], proxy: bool) -> None:
    """Passthrough serves mTLS itself; forwarded trusts the header from the trusted proxies only, and a
    NetworkPolicy lets only the ingress controller's namespace reach the events port."""
    docs = render(helm, "kyma-listener", *values)
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.proxy.enabled is proxy and (config.tls is None) is proxy
    assert (
        config.nats.credentials.nkey_seed_file is not None and config.nats.credentials.inbox_prefix == "_INBOX_listener"
    )
    [ingress] = [d for d in docs if d["kind"] == "Ingress"]
    annotations = ingress["metadata"]["annotations"]
    assert ("nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream" in annotations) is proxy
    assert {d["kind"] for d in docs} >= {
        "Deployment",
        "Service",
        "Ingress",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    }
    policies = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "kyma-listener"]
    assert bool(policies) is proxy
    for policy in policies:
        events_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == config.port)
        [source] = events_rule["from"]
        assert source == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
        }


def test_listener_chart_refuses_forwarding_without_trusted_proxies(helm: Path) -> None:
    """Forwarded client certificates need the proxies named: there is no default network to trust."""
    result = subprocess.run(
        [str(helm), "template", "l", str(CHARTS / "kyma-listener"), "--set", "ingress.mode=forward-client-cert"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "ingress.trustedProxies" in result.stderr


@pytest.fixture(scope="module")
def bus_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Chart values for a NATS with the users kyma-eventbus declares (admin, listener, reconciler, a team)."""
    directory = tmp_path_factory.mktemp("eventbus")
    setup.init(
        directory / "bus",
        server=layout.ServerSettings(store_dir=directory / "js"),
        hosts=["kyma-listener-nats.kyma-system.svc"],
        reconciler_modules=["kyma-sync", "cloud-manager"],
    )
    setup.add_team(directory / "bus", name="team-btp", module="btp-operator")
    values = directory / "values.yaml"
    authorization = layout.authorization(layout.load(directory / "bus"))
    values.write_text(
        yaml.safe_dump({"nats": {"deploy": True, "authorization": authorization, "teamNamespaces": ["team-btp"]}})
    )
    return values


def test_listener_chart_can_bring_its_own_secured_nats(helm: Path, bus_values: Path) -> None:
    """nats.deploy renders TLS, exactly kyma-eventbus's users and permissions, a NetworkPolicy and the streams job."""
    docs = render(helm, "kyma-listener", "-f", str(bus_values))
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.nats.servers == ("tls://kyma-listener-nats.kyma-system.svc:4222",)
    [nats_config] = [d for d in docs if d["kind"] == "ConfigMap" and "server.conf" in d["data"]]
    server_conf = json.loads(nats_config["data"]["server.conf"])
    assert server_conf["authorization"] == yaml.safe_load(bus_values.read_text())["nats"]["authorization"]
    assert "no_auth_user" not in server_conf and server_conf["tls"]["cert_file"].startswith("/etc/nats/tls/")
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"]
    sources = policy["spec"]["ingress"][0]["from"]
    assert {"kubernetes.io/metadata.name": "team-btp"} in [
        s.get("namespaceSelector", {}).get("matchLabels") for s in sources
    ]
    assert all("podSelector" in s or "namespaceSelector" in s for s in sources) and len(sources) == 4
    [job] = [d for d in docs if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:2] == ["kyma-eventbus", "ensure-streams"]
    assert "StatefulSet" in {d["kind"] for d in docs}


def test_the_rendered_nats_configuration_is_accepted_by_nats_server(
    helm: Path, bus_values: Path, tmp_path: Path
) -> None:
    """nats-server -t accepts the chart's configuration (once its paths point at real files)."""
    docs = render(helm, "kyma-listener", "-f", str(bus_values))
    [nats_config] = [d for d in docs if d["kind"] == "ConfigMap" and "server.conf" in d["data"]]
    bus_dir = bus_values.parent / "bus"
    text = (
        nats_config["data"]["server.conf"]
        .replace("/etc/nats/tls/tls.crt", str(bus_dir / layout.CERT_FILE))
        .replace("/etc/nats/tls/tls.key", str(bus_dir / layout.KEY_FILE))
        .replace('"/data"', json.dumps(str(tmp_path / "js")))
    )
    (tmp_path / "server.conf").write_text(text)
    result = subprocess.run(
        [str(nats_mod.find_nats_server()), "-t", "-c", str(tmp_path / "server.conf")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_reconciler_chart_config_is_valid_and_ships_the_crds(helm: Path) -> None:
    """reconciler.yaml passes ReconcilerSettings; the chart's CRDs are exactly reconciler.crds."""
    docs = render(helm, "kyma-reconciler", namespace="kcp-system")
    reconciler_settings.ReconcilerSettings.model_validate(embedded(docs, "reconciler.yaml"))
    shipped = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert sorted(shipped, key=lambda d: d["metadata"]["name"]) == sorted(
        crds.kcp_crds(), key=lambda d: d["metadata"]["name"]
    )


@pytest.mark.integration
@pytest.mark.parametrize("chart", sorted(REQUIRED))
async def test_rendered_objects_are_accepted_by_a_real_apiserver(
    helm: Path, kcp_api: kube.ApiClient, chart: str, bus_values: Path
) -> None:
    """Every rendered object passes a server-side dry-run apply (schema, defaults, admission)."""
    namespace = "charts-" + chart.removeprefix("kyma-")
    await kube.ensure_namespace(kcp_api, namespace)
    await kube.ensure_namespace(kcp_api, "kyma-sync-kubeconfigs")
    cluster = objects.ClusterObjects(kcp_api, field_manager=wire.RECONCILER_FIELD_MANAGER)
    docs = (
        render(helm, chart, "-f", str(bus_values), namespace=namespace)
        if chart == "kyma-listener"
        else render(helm, chart, namespace=namespace)
    )
    for doc in docs:
        await cluster.apply(doc, dry_run=True)


def test_default_values_route_every_watched_module_end_to_end(helm: Path) -> None:
    """Out of the box, each module a watcher reports is one the listener lets a runtime report and one the
    reconciler consumes (and `kyma-eventbus init` grants it): otherwise its events are refused or never read."""
    watcher = watcher_config.WatcherConfig.model_validate(embedded(render(helm, "kyma-watcher"), "watcher.yaml"))
    listener = listener_settings.ListenerSettings.model_validate(
        embedded(render(helm, "kyma-listener"), "listener.yaml")
    )
    reconciler = reconciler_settings.ReconcilerSettings.model_validate(
        embedded(render(helm, "kyma-reconciler", namespace="kcp-system"), "reconciler.yaml")
    )
    init = eventbus_cli.parser().parse_args(["init", "d", "--host", "h"])
    reported = {w.module for w in watcher.watches}
    mirrored = {k.module for k in reconciler.mirror.kinds} if reconciler.mirror.enabled else set()
    consumed = {wire.SYNC_MODULE} | mirrored
    assert reported <= set(listener.default_runtime_modules) <= set(listener.modules)
    assert reported <= consumed <= set(init.reconciler_modules.split(","))
    assert reconciler.nats.durable_prefix == init.durable_prefix


def test_secret_references_are_granted_only_in_the_namespaces_named(helm: Path) -> None:
    """secretRef: the reconciler may read Secrets in exactly the listed KCP namespaces (a Role each), nowhere else."""
    docs = render(helm, "kyma-reconciler", "--set", "syncResources.secretNamespaces={team-a}", namespace="kcp-system")
    config = reconciler_settings.ReconcilerSettings.model_validate(embedded(docs, "reconciler.yaml"))
    assert config.sync_resources.secret_namespaces == ("team-a",)
    secret_rules = [
        (d["kind"], d["metadata"].get("namespace"))
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        and any("secrets" in rule.get("resources", []) for rule in d.get("rules", []))
    ]
    assert sorted(secret_rules) == [("Role", "kyma-sync-kubeconfigs"), ("Role", "team-a")]
