"""Host hygiene of the fabric stage: find and remove what a run leaves on the machine.

A run marks every process it starts with the environment variable INCASTLAB_RUN (Mininet's host
shells inherit it, and so does everything started in them), names its bridges sp<N>/lf<N> and its
veths <node>-eth<N>, tags its OVS QoS rows with external-ids:incastlab=1, labels the containers that
are its hosts incastlab.run=<marker value> and the images it builds incastlab.image; make vm-check's
libvirt domain and volumes are named incastlab*, its network incastlab-mgmt; the container servers
of a cluster check are labelled incastlab.server (topologies.testservers). That is what the sweep
looks for, so it never touches another program's bridges, processes, containers or VMs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from runmodel.fabric import Plan
from topologies.containers import dangling_images, remove_containers, remove_images, run_containers
from topologies.testservers import stop as stop_test_servers
from topologies.testservers import test_server_leftovers

MARKER = "INCASTLAB_RUN"
BRIDGE_RE = re.compile(r"^(sp|lf)\d+$")
VETH_RE = re.compile(r"^(sp|lf|h)\d+-eth\d+$")
NETNS_PREFIX = "incastlab-"
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]
VM_PREFIX = "incastlab"  # scripts/vm-check.sh and the Vagrantfile's default_prefix
VM_NETWORK = "incastlab-mgmt"  # the Vagrantfile's libvirt management network
LIBVIRT_SOCKET = Path("/run/libvirt/libvirt-sock")
VM_CHECK_PID = Path(__file__).resolve().parent.parent / "build" / "vm" / "vm-check.pid"


def _kind(says: Callable[[list[Any]], str]) -> Any:
    """A kind of leftover: an empty list by default; `says` names a non-empty one for describe()."""
    return field(default_factory=list, metadata={"says": says})


@dataclass
class Leftovers:
    """What an earlier run left behind, one list per kind (each kind says how describe() names it)."""

    bridges: list[str] = _kind(lambda v: f"bridges {' '.join(v)}")
    veths: list[str] = _kind(lambda v: f"{len(v)} veths")
    pids: list[int] = _kind(lambda v: f"processes {' '.join(map(str, v))}")
    netns: list[str] = _kind(lambda v: f"namespaces {' '.join(v)}")
    qos: list[str] = _kind(lambda v: f"{len(v)} OVS QoS rows")
    # containers labelled incastlab.run, running or not; incastlab's dangling (untagged) images
    containers: list[str] = _kind(lambda v: f"containers {' '.join(sorted(v, key=natural))}")
    images: list[str] = _kind(lambda v: f"{len(v)} dangling incastlab images")
    vm: list[str] = _kind(lambda v: f"libvirt {' '.join(v)}")  # make vm-check's domain/volume/network
    # container servers (topologies.testservers) once their owner is gone; a crashed cluster run's servers
    servers: list[str] = _kind(lambda v: f"servers {' '.join(v)}")

    def empty(self) -> bool:
        """True when nothing is left."""
        return not any(getattr(self, f.name) for f in fields(self))

    def describe(self) -> str:
        """One line naming what is left."""
        parts = [f.metadata["says"](getattr(self, f.name)) for f in fields(self) if getattr(self, f.name)]
        return ", ".join(parts) or "nothing"


def natural(name: str) -> tuple[Any, ...]:
    """Sort key that puts incastlab-h2 before incastlab-h10 (names as a reader counts them)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _out(argv: list[str], stdin: str | None = None, timeout: float = 20) -> str:
    """A command's stdout ('' if it is missing or overran `timeout`): sweeps never hang."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ""


def _ancestors() -> set[int]:
    """This process and its parents: never signalled by a sweep."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def marked_pids(run: str | None = None) -> list[int]:
    """Processes that carry the run marker (of any run, or of `run`), not this one or its parents."""
    mine = _ancestors()
    needle = (MARKER + "=" + (run + "\0" if run else "")).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env and not _zombie(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def run_pids(run: str) -> list[int]:
    """Processes started by the run whose marker value is `run` ([] for an empty value)."""
    return marked_pids(run) if run else []


def find_leftovers(vm: bool = True) -> Leftovers:
    """Everything of incastlab's still on this host (with vm=False, not make vm-check's libvirt objects)."""
    left = Leftovers()
    left.bridges = [b for b in _out(["ovs-vsctl", "--timeout=5", "list-br"]).split() if BRIDGE_RE.match(b)]
    for line in _out(["ip", "-o", "link", "show"]).splitlines():
        parts = line.split(":", 2)
        if len(parts) > 2:
            name = parts[1].strip().split("@")[0]
            if VETH_RE.match(name):
                left.veths.append(name)
    left.pids = marked_pids()
    left.netns = [
        n.split()[0] for n in _out(["ip", "netns", "list"]).splitlines() if n.startswith(NETNS_PREFIX)
    ]
    left.qos = _out(
        ["ovs-vsctl", "--timeout=5", "--bare", "--columns=_uuid", "find", "qos", "external-ids:incastlab=1"]
    ).split()
    left.containers = run_containers()
    left.images = dangling_images()
    left.vm = vm_leftovers() if vm else []
    left.servers = test_server_leftovers()
    return left


def vm_check_running() -> bool:
    """True while a make vm-check holds its VM (its pid file names a live process)."""
    try:
        os.kill(int(VM_CHECK_PID.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def vm_leftovers() -> list[str]:
    """make vm-check's libvirt objects still defined (domain:NAME, volume:NAME, network:NAME), none
    while a vm-check runs or where libvirt is not installed or not answering."""
    # no socket: libvirtd is not running (asking would start it where systemd socket-activates it)
    if shutil.which("virsh") is None or not LIBVIRT_SOCKET.exists() or vm_check_running():
        return []
    found = [
        f"domain:{d}"
        for d in _out([*VIRSH, "list", "--all", "--name"], timeout=5).split()
        if d.startswith(VM_PREFIX)
    ]
    volumes = [
        line.split()[0]
        for line in _out([*VIRSH, "vol-list", "default"], timeout=5).splitlines()
        if line.split()
    ]
    found += [f"volume:{v}" for v in volumes if v.startswith(VM_PREFIX)]
    found += [
        f"network:{n}"
        for n in _out([*VIRSH, "net-list", "--all", "--name"], timeout=5).split()
        if n == VM_NETWORK
    ]
    return found


def remove_vm(items: list[str]) -> None:
    """Destroy and undefine what vm_leftovers found (the domain's qemu process ends with it)."""
    for item in items:
        kind, name = item.split(":", 1)
        if kind == "domain":
            _out([*VIRSH, "destroy", name], timeout=30)
            _out([*VIRSH, "undefine", name], timeout=30)
        elif kind == "volume":
            _out([*VIRSH, "vol-delete", name, "--pool", "default"], timeout=30)
        elif kind == "network":
            _out([*VIRSH, "net-destroy", name], timeout=30)
            _out([*VIRSH, "net-undefine", name], timeout=30)


def kill_pids(pids: list[int], grace: float = 2.0) -> None:
    """SIGTERM, then SIGKILL what is still alive after `grace` seconds."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _zombie(p)]
        time.sleep(0.05)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def remove(left: Leftovers) -> None:
    """Remove what find_leftovers found: containers and processes first, then bridges, QoS rows, veths,
    and incastlab's dangling images.

    Every step is one command with a timeout (one `docker rm -f`, one OVS transaction for all bridges,
    one `ip -batch` for all veths), so a sweep takes seconds however large the fabric was.
    """
    remove_containers(left.containers)
    kill_pids(left.pids)
    if left.bridges:
        argv = ["ovs-vsctl", "--timeout=15"]
        for b in left.bridges:
            argv += ["--", "--if-exists", "del-br", b]
        _out(argv, timeout=20)
    _destroy_qos(left.qos)
    if left.veths:  # deleting one end of a veth pair deletes both; -force goes on past the gone ones
        _out(["ip", "-force", "-batch", "-"], stdin="".join(f"link del {v}\n" for v in left.veths))
    for ns in left.netns:
        _out(["ip", "netns", "del", ns])
    remove_images(left.images)
    remove_vm(left.vm)
    if left.servers:
        stop_test_servers()


def _destroy_qos(qos: list[str]) -> None:
    """Drop the QoS rows found and the queue rows incastlab created (OVS keeps both until destroyed)."""
    queues = _out(
        ["ovs-vsctl", "--timeout=5", "--bare", "--columns=_uuid", "find", "queue", "external-ids:incastlab=1"]
    ).split()
    if not qos and not queues:
        return
    argv = ["ovs-vsctl", "--timeout=20"]
    for uuid in qos:
        argv += ["--", "--if-exists", "destroy", "qos", uuid]
    for uuid in queues:
        argv += ["--", "--if-exists", "destroy", "queue", uuid]
    _out(argv)


def sweep_fabric(plan: Plan | None = None) -> None:
    """After a fabric stops: remove its bridges, veths and QoS rows if Mininet missed any."""
    left = find_leftovers(vm=False)
    left.pids = []  # processes and containers are the run's business (see clean_all)
    left.netns = []
    left.containers = []
    left.images = []
    left.servers = []
    if plan is not None:
        names = {s.name for s in plan.switches}
        left.bridges = [b for b in left.bridges if b in names]
    remove(left)
