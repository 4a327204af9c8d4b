"""The harness's servers get ports no outgoing connection can take between the check and their bind."""

import pathlib
import socket

from devenv import net


def test_free_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    """The kernel gives outgoing connections source ports from its ephemeral range, so a port picked there by
    a bind to port 0 could be taken before the server binds it (the apiserver's "address already in use")."""
    start = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [net.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports), "no port handed out twice"
    assert all(net.LISTENING_PORTS_FROM <= port < start for port in ports)
    for port in ports[:20]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((net.LOOPBACK, port))  # free indeed
