"""Stopping the processes a run started in its hosts: SIGTERM, a grace, then SIGKILL.

One implementation for every launcher (training processes, incast servers and clients, a user's
job containers, the bench's processes, the controller): each hands over Popen-like objects
(poll, terminate, wait(timeout), kill), as `Fabric.workload_popen` and `Container.exec` return.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from typing import Protocol

STOP_GRACE_S = 5.0  # how long a process may take to exit on SIGTERM before it is killed


class Stoppable(Protocol):
    """What stop_processes needs of a process handle (subprocess.Popen, ContainerProc, JobProc)."""

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def stop_processes(
    procs: Iterable[Stoppable], grace: float = STOP_GRACE_S, kill_wait: float | None = None
) -> None:
    """SIGTERM every process still running, then SIGKILL those not gone `grace` seconds later.

    The grace is one deadline for all of them, not one each, so stopping many stuck processes takes
    `grace` and not a multiple of it. kill_wait: how long to wait for a killed one (None: until it
    is gone; a container's client may take its time).
    """
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in live:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            try:
                p.wait(kill_wait)
            except subprocess.TimeoutExpired:
                pass
