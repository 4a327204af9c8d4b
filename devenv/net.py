"""Loopback ports and readiness probes."""

import pathlib
import random
import socket
import ssl
import urllib.error
import urllib.request

LOOPBACK = "127.0.0.1"
LISTENING_PORTS_FROM = 10_000
"""Servers of the harness listen on ports from here up to the kernel's ephemeral range."""
_EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port free now, for a server about to start; never the same one twice in this process.

    It comes from below the kernel's ephemeral range. A port the kernel picks for a bind to port 0 is
    one it also gives outgoing connections as their source port, so between this check and the server's
    bind a client's connection could take it: the harness's apiserver failed with "address already in
    use" about once in 13 runs of the suite.
    """
    for _ in range(200):
        port = random.randrange(LISTENING_PORTS_FROM, _ephemeral_start())
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise OSError(f"no free loopback port between {LISTENING_PORTS_FROM} and {_ephemeral_start()}")


def _ephemeral_start() -> int:
    try:
        start = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        start = 32_768  # Linux's default
    return max(start, LISTENING_PORTS_FROM + 1_000)


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
