"""End to end: the README's demo, as CI runs it — every component a process of its own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devenv import testbin

from .. import otlp

pytestmark = pytest.mark.integration


def test_demo_scenario_converges_and_exits_cleanly(testbin_binaries: testbin.Binaries, tmp_path: Path) -> None:
    """SyncResource converges, drift is reset, the VpcPeering is mirrored with status back and cleaned up.

    Every component exports its spans to a real OTLP receiver, configured only by the standard
    OTEL_* variables: a change in a runtime shows as one trace from the watcher to the reconcile.
    """
    with otlp.receiving() as (endpoint, receiver):
        result = _run_demo(testbin_binaries, tmp_path, otlp_endpoint=endpoint)
        traces = receiver.traces()
    _assert_demo_output(result, tmp_path)
    services = {"kyma-watcher", "kyma-listener", "kyma-reconciler"}
    whole = [spans for spans in traces.values() if {s.service for s in spans} >= services]
    assert whole, f"no trace spans all of {services}: {[sorted({s.service for s in t}) for t in traces.values()][:20]}"
    names = {(s.service, s.name) for s in whole[0]}
    assert ("kyma-watcher", "watcher.observe") in names and ("kyma-reconciler", "reconcile sync_resources") in names
    by_id = {s.span_id: s for s in whole[0]}
    consume = next(s for s in whole[0] if s.name.startswith("consume "))
    assert by_id[consume.parent_span_id].service == "kyma-listener", "the consumer continues the listener's span"


def _run_demo(
    testbin_binaries: testbin.Binaries, tmp_path: Path, *, otlp_endpoint: str
) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "devenv.cli",
            "--testbin",
            str(testbin_binaries.directory),
            "demo",
            "--exit-when-done",
            "--workdir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        },
    )


def _assert_demo_output(result: "subprocess.CompletedProcess[str]", tmp_path: Path) -> None:
    output = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    for expected in (
        "control plane up",
        "certificates issued to skr-1, skr-2",
        "listener up at https://127.0.0.1:",
        '"nats_credentials"',
        "NATS admin: nats --server tls://127.0.0.1:",
        "NATS team team-cloud (reads module cloud-manager only)",
        "SyncResource converged in",
        "skr-2: demo-settings data={'feature': 'on'}",
        "drift reset after",
        "mirrored to KCP as mirror-skr-1/demo.peer-to-shared-vpc",
        "KCP status flowed back to skr-1",
        "mirror and runtime object gone",
        "Kyma CR kyma-system/default present",
        "demo done",
    ):
        assert expected in output, f"missing {expected!r} in:\n{output}"
    for runtime in ("skr-1", "skr-2"):
        assert {p.name for p in (tmp_path / "demo" / "runtimes" / runtime).iterdir()} >= {
            "tls.crt",
            "tls.key",
            "ca.crt",
        }
    logs = tmp_path / "demo" / "logs"
    assert {p.name for p in logs.iterdir()} >= {
        "listener.log",
        "watcher-skr-1.log",
        "watcher-skr-2.log",
        "reconciler.log",
    }
