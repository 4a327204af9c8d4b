"""The Helm charts: lint clean, render, carry valid configuration, and are accepted by a real apiserver."""

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry

from certs import cli as certs_cli
from certs import rotation
from clients import kube, objects
from contract import wire
from devenv import nats as nats_mod
from devenv import testbin
from eventbus import cli as eventbus_cli
from eventbus import layout, setup
from listener import metrics as listener_metrics
from listener import settings as listener_settings
from observability import metrics as observability_metrics
from reconciler import cli as reconciler_cli
from reconciler import consumer, crds, manager, mirror, sync_resources, workqueue
from reconciler import settings as reconciler_settings
from watcher import config as watcher_config
from watcher import metrics as watcher_metrics

CHARTS = Path(__file__).parents[2] / "charts"
REQUIRED = {"kyma-watcher": ["--set", "runtime=skr-1"], "kyma-listener": [], "kyma-reconciler": [], "kyma-certs": []}


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


def test_listener_chart_maps_runtime_ids_with_read_access_to_kymas_only(helm: Path) -> None:
    """identity.source=runtime-id: the configuration says so, and the pod may get/list/watch Kymas in one namespace."""
    docs = render(helm, "kyma-listener", "--set", "identity.source=runtime-id")
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.identity.source == "runtime-id" and config.identity.kyma_namespace == wire.KCP_NAMESPACE
    [role] = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-kymas")]
    assert role["metadata"]["namespace"] == wire.KCP_NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["operator.kyma-project.io"], "resources": ["kymas"], "verbs": ["get", "list", "watch"]}
    ]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "kyma-listener"
    default = [d for d in render(helm, "kyma-listener") if d["kind"] in ("Deployment", "Role")]
    assert [d["kind"] for d in default] == ["Deployment"], "kyma-name identities need no KCP access"
    assert default[0]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_listener_chart_routes_the_upstream_endpoint_only_when_components_are_mapped(helm: Path) -> None:
    def paths(docs: list[dict[str, Any]]) -> list[str]:
        [ingress] = [d for d in docs if d["kind"] == "Ingress"]
        return [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]]

    assert "/v2" not in paths(render(helm, "kyma-listener"))
    docs = render(helm, "kyma-listener", "--set", "upstreamComponents.lifecycle-manager=kyma-sync")
    assert "/v2" in paths(docs)
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.upstream_components == {"lifecycle-manager": "kyma-sync"}


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
    await kube.ensure_namespace(kcp_api, wire.KCP_NAMESPACE)  # the certs chart's Roles live there
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


# --- Chart conventions (issue 18): schemas, NOTES, helm test hooks, labels ---------------------------------


def helm_fails(helm: Path, chart: str, *extra: str) -> str:
    """Render `chart` with `extra` values expecting helm to refuse; its error output."""
    result = subprocess.run(
        [str(helm), "template", chart, str(CHARTS / chart), *REQUIRED[chart], *extra], capture_output=True, text=True
    )
    assert result.returncode != 0, f"helm rendered {chart} with {extra}"
    return result.stderr


# Every optional object turned on at once: the label and hook checks then see every kind a chart can render.
EVERYTHING = {
    "kyma-listener": [
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "ingress.mode=forward-client-cert",
        "--set",
        "ingress.trustedProxies={10.1.2.0/24}",
    ],
    "kyma-reconciler": [
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.dashboard.enabled=true",
        "--set",
        "syncResources.secretNamespaces={team-a}",
    ],
    "kyma-watcher": ["--set", "monitoring.serviceMonitor.enabled=true"],
}
SHARDED = ["--set", "sharding.enabled=true", "--set", "replicas=3"]
EXPOSURES = {
    "ingress-nginx": [],
    "istio": ["--set", "exposure.type=istio"],
    "gateway-api": ["--set", "exposure.type=gateway-api", "--set", "gatewayApi.parentRefs[0].name=kcp-gateway"],
    "none": ["--set", "exposure.type=none"],
}


@pytest.mark.parametrize(
    ("chart", "bad", "named"),
    [
        pytest.param("kyma-listener", ["--set", "replicas=two"], "/replicas", id="listener-type"),
        pytest.param("kyma-listener", ["--set", "exposure.type=traefik"], "/exposure/type", id="listener-enum"),
        pytest.param("kyma-listener", ["--set", "ingres.mode=passthrough"], "'ingres'", id="listener-typo"),
        pytest.param("kyma-reconciler", ["--set-string", "managementPort=ninety"], "/managementPort", id="reconciler"),
        pytest.param(
            "kyma-reconciler",
            ["--set", "monitoring.prometheusRule.thresholds.streamFillRatio=80"],
            "/streamFillRatio",
            id="reconciler-ratio",
        ),
        pytest.param("kyma-watcher", ["--set", "runtime=SKR_1"], "/runtime", id="watcher-runtime"),
        pytest.param("kyma-watcher", ["--set", "listeners[0].url=kyma-listener.example"], "/url", id="watcher-url"),
    ],
)
def test_every_chart_validates_its_values_against_its_schema(
    helm: Path, chart: str, bad: list[str], named: str
) -> None:
    """values.schema.json is a valid draft-07 schema that the defaults pass (lint --strict runs it) and that
    refuses a wrong type, value or key with helm's schema error, naming the value."""
    schema = json.loads((CHARTS / chart / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHARTS / chart / "values.yaml").read_text()))
    lint = subprocess.run(
        [str(helm), "lint", "--strict", str(CHARTS / chart), *REQUIRED[chart], *bad], capture_output=True, text=True
    )
    assert lint.returncode != 0
    error = helm_fails(helm, chart, *bad)
    assert "don't meet the specifications of the schema" in error and named in error, error


def render_notes(helm: Path, chart: str, tmp_path: Path, *extra: str) -> str:
    """NOTES.txt as `helm install` prints it. helm renders NOTES only against a cluster, so a copy of the chart
    renders it through `tpl` in a ConfigMap: the same engine, helpers and values, offline."""
    copy = tmp_path / chart
    shutil.copytree(CHARTS / chart, copy)
    (copy / "notes.txt").write_text((copy / "templates" / "NOTES.txt").read_text())
    (copy / "templates" / "zz-notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    show = ["--namespace", "kcp-system", "--show-only", "templates/zz-notes.yaml"]
    out = subprocess.run(
        [str(helm), "template", chart, str(copy), *show, *REQUIRED[chart], *extra],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return str(yaml.safe_load(out)["data"]["notes"])


@pytest.mark.parametrize(
    ("chart", "values", "expected"),
    [
        pytest.param(
            "kyma-listener", [], ["https://kyma-listener.kcp.example.com", "helm test kyma-listener"], id="listener"
        ),
        pytest.param(
            "kyma-listener",
            [*EXPOSURES["istio"], *EVERYTHING["kyma-listener"], "--set", "istio.gateway.port=8443"],
            ["https://kyma-listener.kcp.example.com:8443", "X-Forwarded-Client-Cert", "10.1.2.0/24", "ServiceMonitor"],
            id="listener-istio-forwarded",
        ),
        pytest.param("kyma-listener", EXPOSURES["none"], ["Exposure: none"], id="listener-none"),
        pytest.param(
            "kyma-reconciler",
            EVERYTHING["kyma-reconciler"],
            ["helm test kyma-reconciler", "PrometheusRule", "RUNBOOKS.md", "grafana_dashboard"],
            id="reconciler",
        ),
        pytest.param(
            "kyma-reconciler",
            SHARDED,
            [
                "--reconciler-replicas kyma-reconciler-0,kyma-reconciler-1,kyma-reconciler-2",
                "statefulset/kyma-reconciler",
                "shard 0",
            ],
            id="reconciler-sharded",
        ),
        pytest.param(
            "kyma-watcher",
            ["--set", "paused=true"],
            ["runtime skr-1", "PAUSED", "helm test kyma-watcher"],
            id="watcher",
        ),
    ],
)
def test_notes_render_what_to_do_next(
    helm: Path, tmp_path: Path, chart: str, values: list[str], expected: list[str]
) -> None:
    """Every chart's NOTES.txt renders (for the variants it branches on) and says how to reach and check it."""
    notes = render_notes(helm, chart, tmp_path, *values)
    assert all(text in notes for text in expected), notes
    assert "<no value>" not in notes


def _readyz_server(status: int) -> tuple[http.server.HTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"ready" if status == 200 else b"caches not synced yet: kymas"
            self.send_response(status if self.path == "/readyz" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/readyz"


@pytest.mark.parametrize("chart", sorted(REQUIRED))
def test_helm_test_hook_checks_readyz_on_the_management_port(helm: Path, chart: str) -> None:
    """`helm test` runs a hardened pod (the component's own image) that GETs /readyz through the chart's Service on
    the management port; its check exits 0 on 200 and fails, printing the component's reason, on 503."""
    docs = render(helm, chart, namespace="kcp-system")
    [pod] = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert pod["kind"] == "Pod" and pod["spec"]["restartPolicy"] == "Never"
    [container] = pod["spec"]["containers"]
    workload = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet"))
    assert container["image"] == workload["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    script, url = container["args"]
    management = next(
        p["containerPort"]
        for p in workload["spec"]["template"]["spec"]["containers"][0]["ports"]
        if p["name"] == "management"
    )
    services = {
        f"http://{d['metadata']['name']}.kcp-system.svc:{p['port']}/readyz"
        for d in docs
        if d["kind"] == "Service"
        for p in d["spec"]["ports"]
        if p["name"] == "management" and p["targetPort"] == "management" and p["port"] == management
    }
    assert url in services
    for status, succeeds in ((200, True), (503, False)):
        server, local = _readyz_server(status)
        try:
            result = subprocess.run(
                [sys.executable, *container["command"][1:], script, local], capture_output=True, text=True, timeout=30
            )
        finally:
            server.shutdown()
            server.server_close()
        assert (result.returncode == 0) is succeeds, result.stderr
        assert succeeds or "503 caches not synced yet" in result.stderr


RECOMMENDED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
)


@pytest.mark.parametrize(
    ("chart", "values", "with_nats"),
    [
        pytest.param("kyma-listener", EVERYTHING["kyma-listener"], False, id="listener-nginx"),
        pytest.param("kyma-listener", [*EVERYTHING["kyma-listener"], *EXPOSURES["istio"]], False, id="listener-istio"),
        pytest.param("kyma-listener", EXPOSURES["gateway-api"], False, id="listener-gateway-api"),
        pytest.param("kyma-listener", [], True, id="listener-nats"),
        pytest.param("kyma-reconciler", EVERYTHING["kyma-reconciler"], False, id="reconciler"),
        pytest.param("kyma-reconciler", [*EVERYTHING["kyma-reconciler"], *SHARDED], False, id="reconciler-sharded"),
        pytest.param("kyma-watcher", EVERYTHING["kyma-watcher"], False, id="watcher"),
    ],
)
def test_every_object_carries_the_recommended_labels(
    helm: Path, bus_values: Path, chart: str, values: list[str], with_nats: bool
) -> None:
    """name, instance, version (the image tag), part-of and managed-by on every rendered object, hooks included.
    (CRDs are exempt: helm installs crds/ as they are, and they are generated by reconciler.crds.)"""
    nats = ["-f", str(bus_values)] if with_nats else []
    docs = [
        d
        for d in render(helm, chart, "--set", "image.tag=1.2.3+build.4", *nats, *values)
        if d["kind"] != "CustomResourceDefinition"
    ]
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        assert all(key in labels for key in RECOMMENDED_LABELS), (doc["kind"], doc["metadata"]["name"], labels)
        assert (labels["app.kubernetes.io/name"], labels["app.kubernetes.io/instance"]) == (chart, chart)
        assert labels["app.kubernetes.io/version"] == "1.2.3_build.4"  # "+" is not allowed in a label value
        assert (labels["app.kubernetes.io/part-of"], labels["app.kubernetes.io/managed-by"]) == ("kyma-sync", "Helm")


# --- Monitoring bundle (issue 18): ServiceMonitors, alerts, dashboard ---------------------------------------


def _exposed(registry: CollectorRegistry) -> set[str]:
    """The sample names a registry's metrics are scraped as (a counter gets _total, a histogram three series)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}
    return {family.name + s for family in registry.collect() for s in suffixes.get(family.type, ("",))}


def _code_metrics() -> set[str]:
    """Every metric the components export: their own metric classes on the registry each one serves."""
    registry = observability_metrics.component_registry()
    listener_metrics.ListenerMetrics(registry)
    watcher_metrics.WatcherMetrics(registry)
    workqueue.QueueMetrics(registry)
    consumer.ConsumerMetrics(registry)
    sync_resources.OrphanCount(registry)
    mirror.HeldMirrors(registry)
    manager.RuntimeInfo(registry)
    rotation.RotationMetrics(registry)
    return _exposed(registry)


KNOWN_METRICS = _code_metrics() | {"up"}  # up: Prometheus writes it for every target


_PROMQL_NOISE = [
    re.compile(r'"(?:[^"\\]|\\.)*"'),  # strings (label values)
    re.compile(r"\$\{?\w+\}?"),  # Grafana variables
    re.compile(r"\{[^{}]*\}"),  # label matchers
    re.compile(r"\[[^\]]*\]"),  # ranges
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),  # label lists
]
_IDENTIFIER = re.compile(r"(?<![\w.:])[a-zA-Z_:][\w:]*(?![\w:])(?!\s*\()")  # not a function: no "(" follows
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (what is left once strings, matchers, ranges, grouping labels,
    functions and keywords are taken out); also checks that its brackets balance."""
    expr = _PROMQL_NOISE[0].sub(" ", expr)
    depth = 0
    for char in expr:
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth >= 0, expr
    assert depth == 0 and expr.count("{") == expr.count("}") and expr.count("[") == expr.count("]"), expr
    for noise in _PROMQL_NOISE[1:]:
        expr = noise.sub(" ", expr)
    return {name for name in _IDENTIFIER.findall(expr) if name not in _KEYWORDS}


def test_metric_names_reads_promql() -> None:
    """The helper the checks below rely on: names, not functions, labels, durations or numbers."""
    assert metric_names(
        'histogram_quantile(0.95, sum by (module, le) (rate(a_bucket{namespace=~"$namespace", x="y{"}[$__rate_interval])))'
        " / on (pod) group_left (node) b offset 1h > 1e+06 and c_total unless vector(0)"
    ) == {"a_bucket", "b", "c_total"}


def test_known_metric_names_come_from_the_code() -> None:
    """The derivation sees what the components register, under the names Prometheus scrapes them by (counters
    with _total, histograms as _bucket/_sum/_count), process metrics included."""
    assert {
        "kyma_listener_requests_total",
        "kyma_listener_publish_seconds_bucket",
        "kyma_watcher_queue_depth",
        "kyma_reconciler_reconciles_total",
        "kyma_reconciler_dead_letters_total",
        "kyma_reconciler_change_applied_seconds_bucket",
        "kyma_eventbus_stream_max_bytes",
        "kyma_listener_runtime_heartbeat_timestamp_seconds",
        "kyma_certs_rotation_last_success_timestamp_seconds",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    } <= KNOWN_METRICS


@pytest.mark.parametrize("chart", sorted(REQUIRED))
def test_service_monitor_scrapes_the_management_port_as_the_component_job(helm: Path, chart: str) -> None:
    """Off by default; when on, the ServiceMonitor selects the chart's Service whose port `management` leads to
    the container's management port (where /metrics is served), and names the job after the component, which is
    what the alerts and the dashboard select."""
    assert not [d for d in render(helm, chart) if d["kind"] == "ServiceMonitor"]
    docs = render(
        helm,
        chart,
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.labels.release=prom",
    )
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["labels"]["release"] == "prom"
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("management", "/metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        d
        for d in docs
        if d["kind"] == "Service"
        and selector.items() <= d["metadata"]["labels"].items()
        and any(p["name"] == "management" for p in d["spec"]["ports"])
    ]
    [service] = services
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == chart
    workload = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet"))
    assert service["spec"]["selector"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    [port] = [p for p in service["spec"]["ports"] if p["name"] == "management"]
    container = workload["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "management", "containerPort": port["port"]} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["port"] == port["targetPort"] == "management"


MONITORING = [
    "--set",
    "monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.dashboard.enabled=true",
]


def test_monitoring_bundle_is_opt_in(helm: Path) -> None:
    """Without the monitoring values no monitoring.coreos.com object and no dashboard is rendered (the CRDs are
    not everywhere)."""
    docs = render(helm, "kyma-reconciler", namespace="kcp-system")
    assert not [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert not [d for d in docs if "grafana_dashboard" in d["metadata"].get("labels", {})]


def _alerts(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_alerts_are_complete_and_read_known_metrics(helm: Path) -> None:
    """Every alert has expr, for, a severity and summary/description/runbook annotations; its runbook names its
    section in charts/RUNBOOKS.md, which exists; every metric its expression reads is one kyma-sync exports; the
    issue's cases are covered; thresholds and routing labels come from the values."""
    docs = render(
        helm,
        "kyma-reconciler",
        *MONITORING,
        "--set",
        "monitoring.prometheusRule.alertLabels.team=kyma",
        "--set",
        "monitoring.prometheusRule.thresholds.heartbeatSilentSeconds=600",
        "--set",
        "monitoring.prometheusRule.runbookBaseUrl=https://git.example.com/kyma-sync/charts/RUNBOOKS.md",
        namespace="kcp-system",
    )
    alerts = _alerts(docs)
    runbooks = (CHARTS / "RUNBOOKS.md").read_text()
    anchors = {line.removeprefix("## ").strip().lower() for line in runbooks.splitlines() if line.startswith("## ")}
    names = [a["alert"] for a in alerts]
    assert len(names) == len(set(names))
    for alert in alerts:
        anchor = alert["alert"].lower()
        assert re.fullmatch(r"KymaSync[A-Za-z]+", alert["alert"]) and re.fullmatch(r"\d+[smh]", alert["for"]), alert
        assert alert["labels"] == {"severity": alert["labels"]["severity"], "team": "kyma"}
        assert alert["labels"]["severity"] in ("critical", "warning", "info")
        annotations = alert["annotations"]
        assert all(annotations.get(key) for key in ("summary", "description", "runbook")), alert
        assert f"RUNBOOKS.md#{anchor}" in annotations["runbook"] and anchor in anchors, alert["alert"]
        assert annotations["runbook_url"] == f"https://git.example.com/kyma-sync/charts/RUNBOOKS.md#{anchor}"
        used = metric_names(alert["expr"])
        assert used and used <= KNOWN_METRICS, (alert["alert"], used - KNOWN_METRICS)
        assert set(re.findall(r'\bjob="([^"]+)"', alert["expr"])) <= set(REQUIRED)  # the ServiceMonitors' jobs
    assert anchors == {name.lower() for name in names}, "a runbook without its alert, or the reverse"
    assert {
        "KymaSyncEventsRefused",  # events refused ...
        "KymaSyncEventsDeadLettered",  # ... or dead-lettered
        "KymaSyncEventStreamNearLimit",
        "KymaSyncReconcileErrors",  # per controller
        "KymaSyncCredentialRotationFailing",
        "KymaSyncCredentialRotationLate",
        "KymaSyncWatcherSilent",  # a runtime's heartbeat stopped
    } <= set(names)
    by_name = {a["alert"]: a for a in alerts}
    assert "> 600" in by_name["KymaSyncWatcherSilent"]["expr"]
    assert "by (namespace, controller)" in by_name["KymaSyncReconcileErrors"]["expr"]
    silent = by_name["KymaSyncWatcherSilent"]["expr"]
    assert "max by (runtime) (kyma_listener_runtime_heartbeat_timestamp_seconds)" in silent  # newest of replicas
    assert "and on (runtime) max by (runtime) (kyma_reconciler_runtime_info)" in silent  # live runtimes only
    assert "unless on (runtime)" in by_name["KymaSyncWatcherNeverHeard"]["expr"]


def test_alerts_without_a_runbook_url_still_carry_the_runbook(helm: Path) -> None:
    """runbook_url only when the values say where RUNBOOKS.md is served; the runbook text is always there."""
    for alert in _alerts(render(helm, "kyma-reconciler", *MONITORING, namespace="kcp-system")):
        assert "runbook_url" not in alert["annotations"] and alert["annotations"]["runbook"]
        assert set(alert["labels"]) == {"severity"}


def test_dashboard_is_grafana_json_over_known_metrics(helm: Path) -> None:
    """The dashboard ConfigMap carries grafana_dashboard: "1" and valid dashboard JSON whose every panel queries
    only metrics kyma-sync exports, covering what the issue asks to see."""
    docs = render(
        helm,
        "kyma-reconciler",
        *MONITORING,
        "--set",
        "monitoring.dashboard.namespace=monitoring",
        namespace="kcp-system",
    )
    [config_map] = [d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    [(key, text)] = config_map["data"].items()
    dashboard = json.loads(text)
    assert key.endswith(".json") and dashboard["uid"] == "kyma-sync" and dashboard["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "namespace"}
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    used: set[str] = set()
    for panel in panels:
        assert panel["title"] and panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names and names <= KNOWN_METRICS, (panel["title"], names - KNOWN_METRICS)
            assert 'namespace=~"$namespace"' in target["expr"], panel["title"]
            used |= names
    assert {
        "kyma_reconciler_change_applied_seconds_bucket",  # per-module processing p95, change seen -> applied
        "kyma_reconciler_queue_depth",  # queue depth ...
        "kyma_reconciler_reconcile_seconds_bucket",  # ... latency ...
        "kyma_reconciler_retries_total",  # ... retries
        "kyma_listener_published_events_total",  # events/s by module
        "kyma_reconciler_runtime_errors_total",  # per-runtime errors, top-k
        "kyma_certs_rotation_last_success_timestamp_seconds",  # rotation age
        "kyma_listener_runtime_heartbeat_timestamp_seconds",
        "kyma_eventbus_stream_bytes",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    } <= used


# --- Listener exposure (issue 18): ingress-nginx, Gateway API, Istio, none -------------------------------------


def _events_port(docs: list[dict[str, Any]], config: listener_settings.ListenerSettings) -> tuple[str, int]:
    """The listener Service's name and the port of it that leads to the container's events port."""
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "kyma-listener"]
    [port] = [p for p in service["spec"]["ports"] if p["targetPort"] == "events"]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "events", "containerPort": config.port} in container["ports"]
    return service["metadata"]["name"], port["port"]


ROUTE_KINDS = {"Ingress", "TLSRoute", "Gateway", "VirtualService"}


def test_gateway_api_routes_tls_passthrough_to_the_events_port(helm: Path) -> None:
    """A TLSRoute on the given Gateway listener forwards the host's TLS to the events port, where the listener
    terminates mTLS; v1 where the cluster serves it, else v1alpha2. No other route, no NetworkPolicy needed."""
    docs = render(helm, "kyma-listener", *EXPOSURES["gateway-api"], "--set", "gatewayApi.parentRefs[0].sectionName=tls")
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.tls is not None and not config.proxy.enabled
    [route] = [d for d in docs if d["kind"] in ROUTE_KINDS]
    assert (route["kind"], route["apiVersion"]) == ("TLSRoute", "gateway.networking.k8s.io/v1alpha2")
    assert route["spec"]["parentRefs"] == [{"name": "kcp-gateway", "sectionName": "tls"}]
    assert route["spec"]["hostnames"] == ["kyma-listener.kcp.example.com"]
    [rule] = route["spec"]["rules"]
    service, port = _events_port(docs, config)
    assert rule["backendRefs"] == [{"name": service, "port": port}]
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]
    served = render(
        helm, "kyma-listener", *EXPOSURES["gateway-api"], "--api-versions", "gateway.networking.k8s.io/v1/TLSRoute"
    )
    assert [d["apiVersion"] for d in served if d["kind"] == "TLSRoute"] == ["gateway.networking.k8s.io/v1"]


def test_gateway_api_refuses_what_it_cannot_do(helm: Path) -> None:
    """No Gateway to attach to, or forwarded client certificates (Gateway API has no standard for them): refused
    when rendering, saying why."""
    assert "gatewayApi.parentRefs" in helm_fails(helm, "kyma-listener", "--set", "exposure.type=gateway-api")
    forwarded = ["--set", "ingress.mode=forward-client-cert", "--set", "ingress.trustedProxies={10.1.2.0/24}"]
    assert "passthrough only" in helm_fails(helm, "kyma-listener", *EXPOSURES["gateway-api"], *forwarded)


def test_istio_passthrough_routes_by_sni_to_the_events_port(helm: Path) -> None:
    """An Istio Gateway in PASSTHROUGH mode on the ingress gateway pods and a VirtualService tls route for the
    host to the events port; the listener terminates mTLS itself."""
    docs = render(helm, "kyma-listener", *EXPOSURES["istio"])
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.tls is not None and not config.proxy.enabled
    routes = {d["kind"]: d for d in docs if d["kind"] in ROUTE_KINDS}
    assert set(routes) == {"Gateway", "VirtualService"}
    assert {d["apiVersion"] for d in routes.values()} == {"networking.istio.io/v1"}
    gateway, virtual_service = routes["Gateway"]["spec"], routes["VirtualService"]["spec"]
    assert gateway["selector"] == {"istio": "ingressgateway"}
    [server] = gateway["servers"]
    assert (server["port"]["protocol"], server["tls"]) == ("TLS", {"mode": "PASSTHROUGH"})
    assert virtual_service["gateways"] == [routes["Gateway"]["metadata"]["name"]]
    [tls_route] = virtual_service["tls"]
    assert tls_route["match"] == [{"port": server["port"]["number"], "sniHosts": server["hosts"]}]
    service, port = _events_port(docs, config)
    assert tls_route["route"] == [{"destination": {"host": service, "port": {"number": port}}}]
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_istio_forwarded_client_certificates_reach_the_listener_only_from_the_gateway(helm: Path) -> None:
    """MUTUAL mode: the gateway verifies the runtime's certificate and forwards it in X-Forwarded-Client-Cert (what
    the listener reads in proxy mode, from trustedProxies only); the VirtualService routes the watchers' paths to
    the events port; only the gateway pods may reach that port, and the listener pods get no sidecar (which
    would hide the gateway's address)."""
    docs = render(
        helm,
        "kyma-listener",
        *EXPOSURES["istio"],
        "--set",
        "ingress.mode=forward-client-cert",
        "--set",
        "ingress.trustedProxies={10.1.2.0/24}",
    )
    config = listener_settings.ListenerSettings.model_validate(embedded(docs, "listener.yaml"))
    assert config.tls is None and config.proxy.enabled
    assert config.proxy.client_cert_header == "X-Forwarded-Client-Cert"
    assert [str(n) for n in config.proxy.trusted_proxies] == ["10.1.2.0/24"]
    routes = {d["kind"]: d["spec"] for d in docs if d["kind"] in ROUTE_KINDS}
    [server] = routes["Gateway"]["servers"]
    assert server["port"]["protocol"] == "HTTPS"
    assert server["tls"]["mode"] == "MUTUAL" and server["tls"]["credentialName"] == "kyma-listener-gateway-tls"
    [http_route] = routes["VirtualService"]["http"]
    assert {m["uri"]["prefix"] for m in http_route["match"]} == {wire.EVENTS_PATH, wire.HEARTBEAT_PATH}
    service, port = _events_port(docs, config)
    assert http_route["route"] == [{"destination": {"host": service, "port": {"number": port}}}]
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"]
    events_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == config.port)
    assert events_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}},
            "podSelector": {"matchLabels": {"istio": "ingressgateway"}},
        }
    ]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"


def test_ingress_nginx_routes_every_watcher_path(helm: Path) -> None:
    """In forward-client-cert mode nginx routes by path: both the events and the heartbeat path reach the events
    port (in passthrough mode nginx routes by SNI and never sees a path)."""
    docs = render(
        helm,
        "kyma-listener",
        "--set",
        "ingress.mode=forward-client-cert",
        "--set",
        "ingress.trustedProxies={10.1.2.0/24}",
    )
    [ingress] = [d for d in docs if d["kind"] == "Ingress"]
    [rule] = ingress["spec"]["rules"]
    assert {p["path"] for p in rule["http"]["paths"]} == {wire.EVENTS_PATH, wire.HEARTBEAT_PATH}
    assert {p["backend"]["service"]["port"]["name"] for p in rule["http"]["paths"]} == {"events"}


@pytest.mark.parametrize("disable", [EXPOSURES["none"], ["--set", "ingress.enabled=false"]], ids=["none", "legacy"])
def test_no_exposure_renders_no_route(helm: Path, disable: list[str]) -> None:
    """exposure.type none (or the older ingress.enabled=false) renders the Service only; in forward-client-cert
    mode the NetworkPolicy still admits only the proxy named in ingress.controller*."""
    docs = render(helm, "kyma-listener", *disable)
    assert not [d for d in docs if d["kind"] in ROUTE_KINDS] and "Service" in {d["kind"] for d in docs}
    forwarded = render(
        helm,
        "kyma-listener",
        *disable,
        "--set",
        "ingress.mode=forward-client-cert",
        "--set",
        "ingress.trustedProxies={10.1.2.0/24}",
    )
    config = listener_settings.ListenerSettings.model_validate(embedded(forwarded, "listener.yaml"))
    assert config.proxy.client_cert_header == "ssl-client-cert"
    [policy] = [d for d in forwarded if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"][0]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}
    }


# Kinds whose CRDs come with Prometheus Operator, Gateway API or Istio: not installed in the test apiserver.
FOREIGN_GROUPS = ("monitoring.coreos.com/", "gateway.networking.k8s.io/", "networking.istio.io/")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("chart", "values"),
    [
        pytest.param("kyma-listener", [*EVERYTHING["kyma-listener"], *EXPOSURES["istio"]], id="listener-istio"),
        pytest.param("kyma-listener", [*EVERYTHING["kyma-listener"], *EXPOSURES["none"]], id="listener-none"),
        pytest.param(
            "kyma-listener",
            [
                *EXPOSURES["gateway-api"],
                "--set",
                "identity.source=runtime-id",
                "--set",
                "identity.kymaNamespace=team-a",
            ],
            id="listener-gateway-api-runtime-ids",
        ),
        pytest.param("kyma-reconciler", EVERYTHING["kyma-reconciler"], id="reconciler"),
        pytest.param("kyma-reconciler", [*EVERYTHING["kyma-reconciler"], *SHARDED], id="reconciler-sharded"),
        pytest.param("kyma-watcher", EVERYTHING["kyma-watcher"], id="watcher"),
    ],
)
async def test_every_variant_is_accepted_by_a_real_apiserver(
    helm: Path, kcp_api: kube.ApiClient, chart: str, values: list[str]
) -> None:
    """Beyond the defaults: each exposure, forwarded mode's NetworkPolicy, the sidecar label, the Services and
    the test hooks pass a server-side dry-run apply. Objects of CRDs this apiserver lacks (every variant renders
    some) are skipped: the tests above check their shape."""
    namespace = "charts-variants"
    await kube.ensure_namespace(kcp_api, namespace)
    await kube.ensure_namespace(kcp_api, "kyma-sync-kubeconfigs")
    await kube.ensure_namespace(kcp_api, "team-a")
    cluster = objects.ClusterObjects(kcp_api, field_manager=wire.RECONCILER_FIELD_MANAGER)
    docs = render(helm, chart, *values, namespace=namespace)
    foreign = [d for d in docs if d["apiVersion"].startswith(FOREIGN_GROUPS)]
    assert foreign
    for doc in docs:
        if doc not in foreign:
            await cluster.apply(doc, dry_run=True)


def test_watch_sets_are_wired_through_both_charts(helm: Path) -> None:
    """The reconciler writes watch sets when asked; the watcher follows them and may read just that ConfigMap."""
    reconciler = render(helm, "kyma-reconciler", "--set", "watchSets.enabled=true", namespace="kcp-system")
    config = reconciler_settings.ReconcilerSettings.model_validate(embedded(reconciler, "reconciler.yaml"))
    assert config.watch_sets.enabled and config.watch_sets.watcher_service_account == "kyma-watcher"
    watcher = render(helm, "kyma-watcher", "--set", "central.enabled=true")
    followed = watcher_config.WatcherConfig.model_validate(embedded(watcher, "watcher.yaml"))
    assert followed.central is not None and followed.central.config_map == "kyma-watcher-watch-set"
    [role] = [d for d in watcher if d["kind"] == "Role" and d["metadata"]["name"] == "kyma-watcher-watch-set"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kyma-watcher-watch-set"], "verbs": ["get"]}
    ]
    default = watcher_config.WatcherConfig.model_validate(embedded(render(helm, "kyma-watcher"), "watcher.yaml"))
    assert default.central is None


def test_the_reconciler_chart_can_install_the_watchers(helm: Path) -> None:
    docs = render(
        helm,
        "kyma-reconciler",
        "--set",
        "watcherInstall.enabled=true",
        "--set",
        "watcherInstall.listeners={https://kyma-listener.kcp.example.com}",
        "--set",
        "watcherInstall.kind=DaemonSet",
        namespace="kcp-system",
    )
    config = reconciler_settings.ReconcilerSettings.model_validate(embedded(docs, "reconciler.yaml"))
    assert config.watcher_install.enabled and config.watcher_install.kind == "DaemonSet"
    assert config.watcher_install.listeners == ("https://kyma-listener.kcp.example.com",)


def test_the_certs_chart_runs_a_command_line_kyma_certs_accepts(helm: Path) -> None:
    """The rotation loop's arguments as the chart renders them parse with kyma-certs' own parser."""
    docs = render(
        helm,
        "kyma-certs",
        "--set",
        "identity=runtime-id",
        "--set",
        "listenerTls.secret=kcp-system/kyma-listener-tls",
        "--set",
        "listenerTls.hosts={kyma-listener.kcp.example.com}",
        "--set-json",
        'moduleAccess={"kyma-sync": {"clusterRules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}}',
        namespace="kcp-system",
    )
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = certs_cli.parser().parse_args(container["args"])
    assert args.command == "rotate" and args.identity == "runtime-id" and args.concurrency == 16
    assert args.trust_secret == ("kcp-system", "kyma-sync-trust")
    assert args.listener_tls_secret == ("kcp-system", "kyma-listener-tls")
    assert args.listener_hosts == "kyma-listener.kcp.example.com"
    [access_map] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert "kyma-sync" in yaml.safe_load(access_map["data"]["access.yaml"])["modules"]
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    assert set(roles) == {"kcp-system", "kyma-sync-kubeconfigs"}


def test_the_reconciler_chart_shards_replicas_over_leases(
    helm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sharding.enabled: a StatefulSet whose pods take their identity from their name ($POD_NAME), a
    reconciler.yaml with sharding on (the identity left to the CLI), a command line kyma-reconciler accepts,
    and Leases in the release namespace, exactly as the shards need them."""
    docs = render(helm, "kyma-reconciler", *SHARDED, namespace="kcp-system")
    assert not [d for d in docs if d["kind"] == "Deployment"]
    [stateful_set] = [d for d in docs if d["kind"] == "StatefulSet"]
    [service] = [d for d in docs if d["kind"] == "Service"]
    spec = stateful_set["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == service["metadata"]["name"]
    assert spec["podManagementPolicy"] == "Parallel" and spec["updateStrategy"] == {"type": "RollingUpdate"}
    [container] = spec["template"]["spec"]["containers"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]

    config = reconciler_settings.ReconcilerSettings.model_validate(embedded(docs, "reconciler.yaml"))
    assert config.sharding.enabled and config.sharding.identity is None
    assert (config.sharding.shards, config.sharding.namespace) == (16, "kcp-system")
    assert config.sharding.lease_prefix == "kyma-reconciler", "the release name: two releases never share Leases"
    assert config.sharding.lease_duration_seconds == 10 and config.sharding.renew_interval_seconds == 2
    # The pod's command line with $POD_NAME set as the StatefulSet sets it: the pod name is the identity.
    monkeypatch.setenv("POD_NAME", "kyma-reconciler-1")
    args = reconciler_cli._parser().parse_args(container["command"][1:])
    assert args.config == Path("/etc/kyma-reconciler/reconciler.yaml") and args.identity == "kyma-reconciler-1"
    args.config = tmp_path / "reconciler.yaml"
    args.config.write_text(yaml.safe_dump(embedded(docs, "reconciler.yaml")))
    assert reconciler_cli._settings(args).sharding.identity == "kyma-reconciler-1"

    service_account = spec["template"]["spec"]["serviceAccountName"]
    lease_roles = [
        d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        and any("leases" in rule.get("resources", []) for rule in d.get("rules", []))
    ]
    [role] = lease_roles
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "kcp-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "update"]}
    ]
    [binding] = [d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "kyma-reconciler-leases",
    }
    assert binding["metadata"]["namespace"] == "kcp-system"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": service_account, "namespace": "kcp-system"}]


def test_the_reconciler_chart_is_unsharded_by_default(helm: Path) -> None:
    """Without sharding: one replica in a Recreate Deployment, no identity, no Lease access."""
    docs = render(helm, "kyma-reconciler", namespace="kcp-system")
    assert not [d for d in docs if d["kind"] == "StatefulSet"]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "env" not in container
    assert not reconciler_settings.ReconcilerSettings.model_validate(embedded(docs, "reconciler.yaml")).sharding.enabled
    assert not [d for d in docs if any("leases" in r.get("resources", []) for r in d.get("rules", []))]


def test_the_reconciler_chart_refuses_unsharded_replicas(helm: Path) -> None:
    """replicas above 1 would have every replica do every write: without sharding, rendering fails and says so."""
    error = helm_fails(helm, "kyma-reconciler", "--set", "replicas=2")
    assert "replicas=2 needs sharding.enabled=true" in error, error
