"""Who this node is, as the other parts of the cluster know it."""

from __future__ import annotations

import socket


def host_name() -> str:
    return socket.gethostname()


def node_ip_address() -> str:
    """The address Ray itself picks for a node: the interface that routes outward.

    Connecting a UDP socket sends nothing; it only asks the kernel for a route.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("8.8.8.8", 80))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"
