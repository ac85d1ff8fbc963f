"""What `incastlab clean` removes: every stage's leftovers of a crashed run, found by their marks.

The fabric's bridges, veths, QoS rows and the marked processes (topologies.hygiene). Nothing that
is not incastlab's is ever touched: see the marks in topologies/hygiene.py.
"""

from __future__ import annotations

from topologies.hygiene import MARKER, Leftovers, find_leftovers, kill_pids, marked_pids, remove, run_pids

__all__ = ["MARKER", "Leftovers", "clean_all", "find_leftovers", "kill_pids", "marked_pids", "run_pids"]


def clean_all() -> Leftovers:
    """`incastlab clean`: remove every leftover of any incastlab run; returns what was found."""
    left = find_leftovers()
    remove(left)
    return left
