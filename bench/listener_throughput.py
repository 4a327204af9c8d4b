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
--floor: after the listener, the same clients and events against bench/listener_floor.py, which does
none of the listener's work: first aiohttp with the listener's TLS settings answering every POST
(floor_http), then the same also publishing every body to JetStream through nats-py with as many
headers (floor_http_and_publish: the floor of any listener on these libraries). What separates the
listener from floor_http_and_publish is its own work: identity, rate, validation, authorisation,
CloudEvents headers, spans, metrics. One run each, in that order.
Every run prints its server's CPU per event and how busy it was (a server well below one core was
held back by the load generator, which shares this machine).

    python bench/listener_throughput.py --clients 64 --events 20000 --nats-bench ~/go/bin/nats [--floor]
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


def event(runtime: str, n: int) -> bytes:
    """The benchmark's event ``n`` of ``runtime``, as sent (a ConfigMap change with a 200-byte value)."""
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
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure listener_floor.py (aiohttp and nats-py doing none of the listener's work) with the same load",
    )
    args = parser.parse_args()
    if args.floor and (args.forwarded or args.listeners != 1 or args.profile or args.event_loop != "uvloop"):
        parser.error(
            "--floor compares one listener, mTLS at the listener, on uvloop, not profiled: it cannot be combined "
            "with --forwarded, --listeners, --profile or --event-loop asyncio"
        )

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
    try:
        bus.prepare()
        result = await _measure(args, work, bus, server_ca=server_ca, runtime_ca=runtime_ca)
    finally:
        bus.stop()
    print(json.dumps(result, indent=2))
    if args.profile:
        pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)


async def _measure(
    args: argparse.Namespace, work: Path, bus: nats.NatsServer, *, server_ca: pki.KeyPair, runtime_ca: pki.KeyPair
) -> dict[str, object]:
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
        _nats_bench(args.nats_bench, bus, clients=args.clients, messages=args.events, size=len(event("bench-0", 0)))
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
        clients = [_client_of(args, work, server_ca, runtime_ca, c) for c in range(args.clients)]
        workloads = [[event(f"bench-{c}", n) for n in range(args.events // args.clients)] for c in range(args.clients)]
        url = f"{'http' if args.forwarded else 'https'}://127.0.0.1:{port}/v1/events"
        measured = await _drive(url, clients, workloads, [listener.pid for listener in listeners], args)
    finally:
        for listener in listeners:
            _stop(listener)
    floors = {
        f"floor_{name}": await _floor(work, bus, clients, workloads, args, publish=publish)
        for name, publish in (("http", False), ("http_and_publish", True))
        if args.floor
    }
    result: dict[str, object] = {
        "clients": args.clients,
        "listeners": args.listeners,
        "event_loop": args.event_loop,
        "client_certificate": "forwarded by an ingress" if args.forwarded else "mTLS at the listener",
        "connections": "one per event" if args.fresh_connections else "one per client, kept alive",
        "listener": measured,
        **floors,
    }
    if reference:
        result["nats_bench_js_pub_sync_msgs_per_second"] = reference["msgs_per_second"]
        for name, figures in {"listener": measured, **floors}.items():
            result[f"ratio_per_core_{name}_to_nats_bench"] = round(
                figures["accepted_events_per_core_second"] / reference["msgs_per_second"], 3
            )
    return result


Client = tuple[ssl.SSLContext | None, dict[str, str]]


def _client_of(args: argparse.Namespace, work: Path, server_ca: pki.KeyPair, runtime_ca: pki.KeyPair, n: int) -> Client:
    """Runtime ``bench-<n>``: its TLS context with its own certificate, or (--forwarded) nginx's header."""
    runtime = f"bench-{n}"
    pair = pki.runtime_client_cert(runtime_ca, runtime)
    headers = {"Content-Type": "application/json"}
    if args.forwarded:
        return None, headers | {FORWARDED_HEADER: urllib.parse.quote(pair.cert_pem.decode())}
    cert, key = work / f"{runtime}.crt", work / f"{runtime}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    context = ssl.create_default_context(cadata=server_ca.cert_pem.decode())
    context.load_cert_chain(cert, key)
    return context, headers


async def _drive(
    url: str, clients: list[Client], workloads: list[list[bytes]], pids: list[int], args: argparse.Namespace
) -> dict[str, float]:
    """Every client posts its events one after another; the figures, with the CPU the processes ``pids`` took."""
    latencies: list[float] = []
    cpu_before = sum(_cpu_seconds(pid) for pid in pids)
    started = time.perf_counter()
    accepted = sum(
        await asyncio.gather(
            *(
                _client(url, context, headers, bodies, latencies, fresh_connections=args.fresh_connections)
                for (context, headers), bodies in zip(clients, workloads, strict=True)
            )
        )
    )
    elapsed = time.perf_counter() - started
    cpu = sum(_cpu_seconds(pid) for pid in pids) - cpu_before
    if not accepted or not cpu:
        raise SystemExit(f"{url}: {accepted} of {sum(map(len, workloads))} events accepted, {cpu} s of CPU: no figures")
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "events_sent": sum(len(bodies) for bodies in workloads),
        "events_accepted": accepted,
        "seconds": round(elapsed, 2),
        "accepted_events_per_second": round(accepted / elapsed),
        "latency_p50_ms": round(quantiles[49] * 1000, 2),
        "latency_p99_ms": round(quantiles[98] * 1000, 2),
        "server_cpu_seconds": round(cpu, 2),
        "server_cores_busy": round(cpu / elapsed, 2),
        "server_cpu_us_per_event": round(cpu / accepted * 1e6, 1),
        "accepted_events_per_core_second": round(accepted / cpu),
    }


_FLOOR_START_SECONDS = 30
"""For the floor server to connect to NATS and listen."""


def _stop(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def _floor(
    work: Path,
    bus: nats.NatsServer,
    clients: list[Client],
    workloads: list[list[bytes]],
    args: argparse.Namespace,
    *,
    publish: bool,
) -> dict[str, float]:
    """The same clients and events against ``listener_floor.py``: the libraries without the listener's work."""
    port = net.free_port()
    credentials = bus.credentials("listener")
    assert credentials.nkey_seed_file is not None and credentials.ca_file is not None
    command = [
        sys.executable,
        str(Path(__file__).with_name("listener_floor.py")),
        "--port",
        str(port),
        "--cert",
        str(work / "server.crt"),
        "--key",
        str(work / "server.key"),
        "--client-ca",
        str(work / "ca.crt"),
    ]
    if publish:
        command += ["--publish", "--nats", bus.url, "--nkey", str(credentials.nkey_seed_file)]
        command += ["--nats-ca", str(credentials.ca_file), "--inbox-prefix", credentials.inbox_prefix or "_INBOX"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as floor:
        try:
            assert floor.stdout is not None
            started = await asyncio.wait_for(asyncio.to_thread(floor.stdout.readline), _FLOOR_START_SECONDS)
            if started.strip() != "ready":
                raise SystemExit("the floor server did not start")
            return await _drive(f"https://127.0.0.1:{port}/v1/events", clients, workloads, [floor.pid], args)
        finally:
            _stop(floor)


if __name__ == "__main__":
    asyncio.run(main())
