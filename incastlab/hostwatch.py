"""What a run cannot go on without, watched while its fabric is up: ovs-vswitchd and the results disk.

The fabric's switches live in ovs-vswitchd (the userspace datapath dies with it; the kernel's is left
with flows nobody updates), so if it dies, or is replaced by a restart that loses every flow, the
workers wait on traffic that never comes. A results disk that fills stops tcpdump, the workers' logs
and the summary in whatever state they are. Either way the run must stop at once and say why,
instead of running into its timeout or presenting half-written files as a result.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from incastlab.cleanup import MARKER
from topologies.fabric import OVS_CTL

OVS_RUNDIR = Path(os.environ.get("OVS_RUNDIR", "/var/run/openvswitch"))
# Room a run needs to finish writing once stopped: status, summary, report and its figures.
DISK_FLOOR_BYTES = 8 * 2**20


def vswitchd_pid() -> int | None:
    """The pid of the running ovs-vswitchd (its pidfile, checked against /proc), or None."""
    try:
        pid = int((OVS_RUNDIR / "ovs-vswitchd.pid").read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    name, _, rest = stat.partition(") ")
    return pid if name.endswith("(ovs-vswitchd") and not rest.startswith("Z") else None


def restart_vswitchd() -> bool:
    """`ovs-ctl start` (it starts only the daemons that are not running); True if ovs-vswitchd
    runs afterwards. The daemons outlive the run, so they do not carry its marker."""
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    try:
        subprocess.run(
            [OVS_CTL, "start", "--system-id=random"], capture_output=True, timeout=60, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        pass
    return vswitchd_pid() is not None


def disk_short(path: Path, floor: int = DISK_FLOOR_BYTES) -> str | None:
    """One line saying the disk that holds `path` (or its nearest existing parent) has less than
    `floor` bytes free, or None when it has enough."""
    where = Path(path).resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        st = os.statvfs(where)
    except OSError:
        return None
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    if free >= floor:
        return None
    mib = 2**20
    return (
        f"results disk full: {free / mib:.1f} MiB free of {total / mib:.0f} MiB under {where} "
        f"(a run needs {floor / mib:.0f} MiB to write its records)"
    )


class RunWatch:
    """Checks ovs-vswitchd and the results disk every PERIOD_S in a thread while the fabric is up; the
    first fault found goes to `on_fault` (one line) once, and the watch ends."""

    PERIOD_S = 0.1

    def __init__(self, workdir: Path, on_fault: Callable[[str], object]) -> None:
        self.workdir = workdir
        self.on_fault = on_fault
        self.pid: int | None = None
        self.fault: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-watch", daemon=True)

    def start(self) -> None:
        """Start watching (ovs-vswitchd only if one runs now: the fabric was built through it)."""
        self.pid = vswitchd_pid()
        self._thread.start()

    def check(self) -> str | None:
        """What is wrong now, in one line, or None."""
        if self.pid is not None and (now := vswitchd_pid()) != self.pid:
            after = "a new one is running" if now else "none is running"
            return (
                f"ovs-vswitchd (pid {self.pid}) died mid-run ({after}): the fabric's switches and "
                f"their flows are gone"
            )
        return disk_short(self.workdir)

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD_S):
            if (why := self.check()) is not None:
                self.fault = why
                self.on_fault(why)
                return

    def stop(self) -> None:
        """Stop watching (before teardown, which removes the switches itself)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
