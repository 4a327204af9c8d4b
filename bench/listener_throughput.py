"""Accepted events/s and latency through listener + JetStream on loopback.

Starts a real nats-server and a `kyma-listener` process, then drives it from this process with
many concurrent mTLS clients, each a distinct runtime with its own certificate, over keep-alive
connections. Prints accepted events/s, p50/p99 request latency, and accepted events per second
of listener CPU (what one listener core takes).

--nats-bench NATS: first runs the NATS CLI's `nats bench js pub sync` on the same server with
the same number of clients, messages of the same size and message ids (dedup), for the ratio the
listener is held to (a synchronous JetStream publish per event is the listener's floor).
--profile FILE: runs the listener under cProfile and prints where its time went.
--listeners N: N listener processes sharing the port (SO_REUSEPORT: the kernel spreads connections),
each with its own management port; their CPU is summed.
--fresh-connections: every event on a connection of its own (a TLS handshake each), as in a large
fleet where a runtime reports less often than connections are kept alive (a watcher closes an idle
one after 15 s, aiohttp's default; the listener after keepalive_seconds, 30): 10,000 runtimes at
200 events/s report every 50 s.
--forwarded: the listener in forward-client-cert mode, as behind an ingress that terminates mTLS:
the clients send plain HTTP with nginx's header (the URL-encoded PEM of their certificate), from a
trusted proxy address; the listener checks chain, revocation and identity as in mTLS mode (once per
certificate, then cached). The TLS work moves to the ingress (not measured here).

    python bench/listener_throughput.py --clients 64 --events 20000 --nats-bench ~/go/bin/nats
"""

import argparse
import asyncio
import json
import os
import pstats
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import aiohttp
import yaml

from contract import events, ids
from devenv import nats, net
from pki import pki


def _event(runtime: str, n: int) -> bytes:
    return events.encode(
        events.ChangeEvent.create(
            runtime=ids.runtime_id(runtime),
            module=ids.module_name("bench"),
            target=events.WatchedObject(
                group="",
                version="v1",
                resource="configmaps",
                kind="ConfigMap",
                namespace="default",
                name=f"cm-{n}",
                uid=f"{runtime}-uid-{n}",
            ),
            resource_version=str(n),
            change_type=events.ChangeType.MODIFIED,
            body={"metadata": {"name": f"cm-{n}"}, "data": {"k": "v" * 200}},
        )
    )


FORWARDED_HEADER = "ssl-client-cert"


async def _client(
    url: str,
    context: ssl.SSLContext | None,
    headers: dict[str, str],
    bodies: list[bytes],
    latencies: list[float],
    *,
    fresh_connections: bool,
) -> int:
    accepted = 0
    connector = aiohttp.TCPConnector(
        ssl=context if context is not None else False, limit=1, force_close=fresh_connections
    )
    async with aiohttp.ClientSession(connector=connector) as session:
        for body in bodies:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                if response.status == 202:
                    accepted += 1
            latencies.append(time.perf_counter() - started)
    return accepted


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _nats_bench(binary: Path, bus: nats.NatsServer, *, clients: int, messages: int, size: int) -> dict[str, float]:
    """`nats bench js pub sync` as the admin (it creates its own stream): aggregate msgs/s and its CPU."""
    credentials = bus.credentials()
    assert credentials.nkey_seed_file is not None and credentials.ca_file is not None
    started = time.perf_counter()
    out = subprocess.run(
        [
            str(binary),
            "--server",
            bus.url,
            "--nkey",
            str(credentials.nkey_seed_file),
            "--tlsca",
            str(credentials.ca_file),
            "bench",
            "js",
            "pub",
            "sync",
            "kyma-bench.sync",
            "--create",
            "--dedup",
            "--clients",
            str(clients),
            "--msgs",
            str(messages),
            "--size",
            str(size),
            "--no-progress",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    elapsed = time.perf_counter() - started
    aggregate = re.search(r"(?:Pub stats|aggregated stats):.*?([\d,]+) msgs/sec", out, re.IGNORECASE | re.DOTALL)
    if aggregate is None:
        raise SystemExit(f"cannot read nats bench's result:\n{out}")
    return {"msgs_per_second": float(aggregate.group(1).replace(",", "")), "seconds": round(elapsed, 2)}


async def _wait_ready(url: str, timeout: float = 30) -> None:
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("listener did not become ready")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64, help="concurrent runtimes (default 64)")
    parser.add_argument("--events", type=int, default=20000, help="events in total (default 20000)")
    parser.add_argument("--nats-bench", type=Path, help="the NATS CLI binary, for the reference figure")
    parser.add_argument("--profile", type=Path, help="run the listener under cProfile, write the profile here")
    parser.add_argument("--listeners", type=int, default=1, help="listener processes sharing the port (default 1)")
    parser.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop", help="the listener's loop")
    parser.add_argument(
        "--forwarded", action="store_true", help="forward-client-cert mode: TLS terminated by an ingress (not measured)"
    )
    parser.add_argument(
        "--fresh-connections", action="store_true", help="a new connection (TLS handshake) for every event"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kyma-bench-listener-"))
    server_ca, runtime_ca = pki.create_ca("bench-ingress"), pki.create_ca("bench-runtimes")
    serving = pki.loopback_server_cert(server_ca, common_name="listener")
    for name, data in {
        "server.crt": serving.cert_pem,
        "server.key": serving.key_pem,
        "ca.crt": runtime_ca.cert_pem,
    }.items():
        (work / name).write_bytes(data)
    bus = nats.NatsServer(workdir=work / "nats")
    bus.start()
    bus.prepare()
    port, managements = net.free_port(), [net.free_port() for _ in range(args.listeners)]
    config = {
        "host": "127.0.0.1",
        "port": port,
        "event_loop": args.event_loop,
        "modules": ["bench"],
        "default_runtime_modules": ["bench"],
        **(
            {"proxy": {"enabled": True, "client_cert_header": FORWARDED_HEADER, "trusted_proxies": ["127.0.0.1/32"]}}
            if args.forwarded
            else {"tls": {"cert_file": str(work / "server.crt"), "key_file": str(work / "server.key")}}
        ),
        "trust": {"client_ca_file": str(work / "ca.crt")},
        "rate_limit": {"events_per_second": 1e6, "burst": 1_000_000},
        "nats": {"servers": [bus.url], "credentials": bus.credentials("listener").model_dump(mode="json")},
    }
    for n, management in enumerate(managements):
        (work / f"listener-{n}.yaml").write_text(yaml.safe_dump({**config, "management_port": management}))
    reference = (
        _nats_bench(args.nats_bench, bus, clients=args.clients, messages=args.events, size=len(_event("bench-0", 0)))
        if args.nats_bench
        else None
    )
    profiling = ["-m", "cProfile", "-o", str(args.profile)] if args.profile else []
    listeners = [
        subprocess.Popen(
            [
                sys.executable,
                *(profiling if n == 0 else []),
                "-m",
                "listener.cli",
                "--config",
                str(work / f"listener-{n}.yaml"),
                "--log-level",
                "WARNING",
            ]
        )
        for n in range(args.listeners)
    ]
    try:
        for management in managements:
            await _wait_ready(f"http://127.0.0.1:{management}/readyz")
        per_client = args.events // args.clients
        clients: list[tuple[ssl.SSLContext | None, dict[str, str]]] = []
        workloads = []
        for c in range(args.clients):
            runtime = f"bench-{c}"
            pair = pki.runtime_client_cert(runtime_ca, runtime)
            headers = {"Content-Type": "application/json"}
            if args.forwarded:
                clients.append((None, headers | {FORWARDED_HEADER: urllib.parse.quote(pair.cert_pem.decode())}))
            else:
                cert, key = work / f"{runtime}.crt", work / f"{runtime}.key"
                cert.write_bytes(pair.cert_pem)
                key.write_bytes(pair.key_pem)
                context = ssl.create_default_context(cadata=server_ca.cert_pem.decode())
                context.load_cert_chain(cert, key)
                clients.append((context, headers))
            workloads.append([_event(runtime, n) for n in range(per_client)])
        latencies: list[float] = []
        url = f"{'http' if args.forwarded else 'https'}://127.0.0.1:{port}/v1/events"
        cpu_before = sum(_cpu_seconds(listener.pid) for listener in listeners)
        started = time.perf_counter()
        accepted = sum(
            await asyncio.gather(
                *(
                    _client(url, context, headers, work_, latencies, fresh_connections=args.fresh_connections)
                    for (context, headers), work_ in zip(clients, workloads, strict=True)
                )
            )
        )
        elapsed = time.perf_counter() - started
        listener_cpu = sum(_cpu_seconds(listener.pid) for listener in listeners) - cpu_before
        quantiles = statistics.quantiles(latencies, n=100)
        print(
            json.dumps(
                {
                    "clients": args.clients,
                    "listeners": args.listeners,
                    "event_loop": args.event_loop,
                    "client_certificate": "forwarded by an ingress" if args.forwarded else "mTLS at the listener",
                    "connections": "one per event" if args.fresh_connections else "one per client, kept alive",
                    "events_sent": per_client * args.clients,
                    "events_accepted": accepted,
                    "seconds": round(elapsed, 2),
                    "accepted_events_per_second": round(accepted / elapsed),
                    "latency_p50_ms": round(quantiles[49] * 1000, 2),
                    "latency_p99_ms": round(quantiles[98] * 1000, 2),
                    "listener_cpu_seconds": round(listener_cpu, 2),
                    "accepted_events_per_listener_core_second": round(accepted / listener_cpu),
                    **(
                        {
                            "nats_bench_js_pub_sync_msgs_per_second": reference["msgs_per_second"],
                            "ratio_per_listener_core_to_nats_bench": round(
                                accepted / listener_cpu / reference["msgs_per_second"], 3
                            ),
                        }
                        if reference
                        else {}
                    ),
                },
                indent=2,
            )
        )
    finally:
        for listener in listeners:
            listener.terminate()
        for listener in listeners:
            listener.wait(timeout=15)
        bus.stop()
    if args.profile:
        pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    asyncio.run(main())
