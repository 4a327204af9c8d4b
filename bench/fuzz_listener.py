"""Fuzz the listener: nothing invalid, and nothing from the wrong runtime, is ever accepted.

A real nats-server and `kyma-listener` process; inputs from hypothesis go over mTLS with the
certificate of runtime skr-1: arbitrary JSON documents, arbitrary bytes, and valid events with
random mutations (fields dropped, replaced by arbitrary values, runtime or module changed).
A 202 counts as wrongly accepted unless the body is a valid event of runtime skr-1 for a known
module. Prints the counts by kind and status.

    python bench/fuzz_listener.py --examples 500
"""

import argparse
import collections
import datetime
import http.client
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import errors, events, ids
from devenv import nats, net
from pki import authority

MODULES = ("kyma-sync", "cloud-manager")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=15), children, max_size=5),
    max_leaves=20,
)


def valid_event(n: int) -> dict[str, Any]:
    event = events.ChangeEvent.create(
        runtime=ids.RuntimeId("skr-1"),
        module=ids.ModuleName("kyma-sync"),
        target=events.WatchedObject(
            group="",
            version="v1",
            resource="configmaps",
            kind="ConfigMap",
            namespace="default",
            name="cm",
            uid=f"uid-{n}",
        ),
        resource_version=str(n),
        change_type=events.ChangeType.MODIFIED,
        body={"data": {"k": "v"}},
    )
    document: dict[str, Any] = json.loads(events.encode(event))
    return document


class Target:
    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.counts: collections.Counter[tuple[str, int]] = collections.Counter()
        self.wrong: list[bytes] = []

    def post(self, kind: str, body: bytes) -> None:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
        try:
            connection.request("POST", "/v1/events", body=body, headers={"Content-Type": "application/json"})
            status = connection.getresponse().status
        finally:
            connection.close()
        self.counts[(kind, status)] += 1
        if status == 202 and not self._acceptable(body):
            self.wrong.append(body)

    @staticmethod
    def _acceptable(body: bytes) -> bool:
        try:
            event = events.decode(body)
        except errors.ContractError:
            return False
        return event.runtime == "skr-1" and event.module in MODULES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=500, help="inputs per strategy (default 500)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kyma-fuzz-"))
    ca = authority.Authority.create("fuzz-ca")
    day = datetime.timedelta(days=1)
    serving, client_cert = ca.issue_server(["127.0.0.1"], lifetime=day), ca.issue_runtime("skr-1", lifetime=day)
    for name, data in {
        "srv.crt": serving.cert_pem,
        "srv.key": serving.key_pem,
        "c.crt": client_cert.cert_pem,
        "c.key": client_cert.key_pem,
        "bundle.crt": ca.to_files()[authority.BUNDLE],
    }.items():
        (work / name).write_bytes(data)
    bus = nats.NatsServer(workdir=work / "nats")
    bus.start()
    bus.prepare()
    port, management = net.free_port(), net.free_port()
    (work / "listener.yaml").write_text(
        yaml.safe_dump(
            {
                "host": "127.0.0.1",
                "port": port,
                "management_port": management,
                "modules": list(MODULES),
                "default_runtime_modules": list(MODULES),
                "tls": {"cert_file": str(work / "srv.crt"), "key_file": str(work / "srv.key")},
                "trust": {"client_ca_file": str(work / "bundle.crt")},
                "nats": {"servers": [bus.url], "credentials": bus.credentials("listener").model_dump(mode="json")},
                "rate_limit": {"events_per_second": 100000, "burst": 100000},
            }
        )
    )
    listener = subprocess.Popen(
        [sys.executable, "-m", "listener.cli", "--config", str(work / "listener.yaml"), "--log-level", "ERROR"]
    )
    try:
        deadline = time.monotonic() + 30
        while not net.http_ok(f"http://127.0.0.1:{management}/readyz"):
            if time.monotonic() > deadline:
                raise SystemExit("listener did not become ready")
            time.sleep(0.1)
        context = ssl.create_default_context(cafile=str(work / "bundle.crt"))
        context.load_cert_chain(work / "c.crt", work / "c.key")
        target = Target(port, context)
        fuzz = settings(
            max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )

        @fuzz
        @given(json_values)
        def arbitrary_json(document: Any) -> None:
            target.post("arbitrary-json", json.dumps(document).encode())

        @fuzz
        @given(st.binary(max_size=2000))
        def arbitrary_bytes(data: bytes) -> None:
            target.post("arbitrary-bytes", data)

        @fuzz
        @given(
            st.integers(0, 10**6),
            st.lists(st.tuples(st.sampled_from(sorted(valid_event(0))), json_values), max_size=3),
            st.lists(st.sampled_from(sorted(valid_event(0))), max_size=2),
            st.sampled_from(["skr-1", "skr-2", "SKR_1", ""]),
            st.sampled_from([*MODULES, "unknown", "a.b"]),
            st.booleans(),
        )
        def mutated_events(
            n: int, replace: list[tuple[str, Any]], drop: list[str], runtime: str, module: str, rederive_id: bool
        ) -> None:
            document = valid_event(n)
            document["runtime"], document["module"] = runtime, module
            for key, value in replace:
                document[key] = value
            for key in drop:
                document.pop(key, None)
            if rederive_id:
                # A consistent id gets the input past the id check, to the identity and module checks.
                try:
                    document["event_id"] = events.derive_event_id(
                        runtime=document["runtime"],
                        module=document["module"],
                        uid=document["target"]["uid"],
                        resource_version=document["resource_version"],
                    )
                except (KeyError, TypeError):
                    pass
            target.post("mutated-event", json.dumps(document).encode())

        started = time.perf_counter()
        for run in (arbitrary_json, arbitrary_bytes, mutated_events):
            run()
        by_kind: dict[str, dict[str, int]] = collections.defaultdict(dict)
        for (kind, status), count in sorted(target.counts.items()):
            by_kind[kind][str(status)] = count
        print(
            json.dumps(
                {
                    "inputs_tried": sum(target.counts.values()),
                    "accepted_202": sum(c for (_, status), c in target.counts.items() if status == 202),
                    "accepted_wrongly": len(target.wrong),
                    "seconds": round(time.perf_counter() - started, 1),
                    "statuses_by_kind": by_kind,
                },
                indent=2,
            )
        )
        if target.wrong:
            raise SystemExit(f"wrongly accepted, e.g. {target.wrong[0][:300]!r}")
    finally:
        listener.terminate()
        listener.wait(timeout=15)
        bus.stop()


if __name__ == "__main__":
    main()
