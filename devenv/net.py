"""Loopback ports and readiness probes."""

import pathlib
import random
import socket
import ssl
import urllib.error
import urllib.request

LOOPBACK = "127.0.0.1"
LISTENING_PORTS_FROM = 10_000
"""Servers of the harness listen on ports from here up to the kernel's ephemeral range (or above it)."""
_EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port free now, for a server about to start; never the same one twice in this process.

    It comes from outside the kernel's ephemeral range (below it, or above it where it starts low). A port
    the kernel picks for a bind to port 0 is one it also gives outgoing connections as their source port,
    and it hands a freed port out again, so between this check and the server's bind another could take it:
    the harness's apiserver failed with "address already in use" about once in 13 runs of the suite. Another
    process of the harness may still pick the same port at random, rarely.
    """
    ports = _listening_ports()
    for _ in range(200):
        port = random.choice(ports)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise OSError(f"no free loopback port in {ports}")


def _listening_ports() -> range:
    try:
        start, end = (int(bound) for bound in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        start, end = 32_768, 60_999  # Linux's default
    for ports in (range(LISTENING_PORTS_FROM, start), range(end + 1, 65_536)):
        if len(ports) >= 1_000:
            return ports
    raise OSError(f"the ephemeral port range {start}-{end} leaves fewer than 1,000 ports for servers")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def http_ok(url: str, *, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False
