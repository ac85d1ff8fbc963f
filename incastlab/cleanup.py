"""What `incastlab clean` removes: every stage's leftovers of a crashed run, found by their marks.

The fabric's bridges, veths, QoS rows and the marked processes (topologies.hygiene). Nothing that
is not incastlab's is ever touched: see the marks in topologies/hygiene.py.
"""

from __future__ import annotations

import shutil

from topologies.fabric import FabricError, ensure_ovs
from topologies.hygiene import MARKER, Leftovers, find_leftovers, kill_pids, marked_pids, remove, run_pids

__all__ = ["MARKER", "Leftovers", "clean_all", "find_leftovers", "kill_pids", "marked_pids", "run_pids"]


def clean_all() -> Leftovers:
    """`incastlab clean`: remove every leftover of any incastlab run; returns what was found.

    Open vSwitch is started first where it is installed: after a reboot or a killed machine its
    database still holds a crashed run's bridges, which come back with the daemons at the next run."""
    if shutil.which("ovs-vsctl"):
        try:
            ensure_ovs()
        except FabricError:
            pass  # what OVS holds cannot be asked; the rest is still swept, and cmd_clean checks after
    left = find_leftovers()
    remove(left)
    from topologies.cluster import clean_servers, servers_in_use

    said = clean_servers(servers_in_use())  # a cluster run's servers, when one crashed
    left.servers += [f"{s} ({line})" for s, line in said.items() if line != "removed: nothing"]
    return left
