"""An iperf3 incast on a built fabric: h2..h8 each send to a server of its own on h1, so that h1's
leaf port (the PS port of the default plan) queues and drops. Shared by the tests that need real
incast traffic through the fabric (the controller's drop counts, the live dashboard).
"""

from __future__ import annotations

import subprocess
from typing import Any

from tests.waiting import tcp_listening, wait_for

SENDERS = 7  # h2..h8: every other host of the default 2x4x2 fabric
H1_IP = "10.0.0.1"


def start_incast(
    fab: Any, base_port: int, *client_args: str
) -> tuple[list[subprocess.Popen], list[subprocess.Popen]]:
    """(servers, clients): one-shot iperf3 servers on h1 at base_port.., and once they all listen,
    one client per sender host run with `client_args` (how long or how much: "-t 6", "-n 1M")."""
    servers = [fab.host("h1").popen(["iperf3", "-s", "-1", "-p", str(base_port + k)]) for k in range(SENDERS)]
    wait_for(
        lambda: all(tcp_listening(s.pid, base_port + k) for k, s in enumerate(servers)),
        15,
        "the iperf3 servers on h1 to listen",
    )
    clients = [
        fab.host(f"h{k + 2}").popen(["iperf3", "-c", H1_IP, "-p", str(base_port + k), *client_args])
        for k in range(SENDERS)
    ]
    return servers, clients
