"""The machines of a cluster run (`--servers`): reaching them by ssh, and checking each one before
anything is built.

Every server is reached as root with ssh in BatchMode (a key, never a password prompt), with the
user's own ssh set-up, or the config file INCASTLAB_SSH_CONFIG names (the container servers' one,
topologies.testservers). preflight_servers asks each server, in one ssh call, for what a run needs
there: Open vSwitch answering, Mininet's mnexec, this checkout's code and venv at the same paths, an
underlay MTU that carries a VXLAN-wrapped full frame, and which machine it is (so one machine named
twice is refused). Every missing piece is one line; nothing has been built when they are printed.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topologies.fabric import FabricError

ROOT = Path(__file__).resolve().parent.parent
SSH_CONFIG_ENV = "INCASTLAB_SSH_CONFIG"
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
FABRIC_MTU = 1500  # every fabric link's MTU, across a tunnel or not
LOCAL = ("localhost", "127.0.0.1")
# commands whose code reaches hosts and ports on this machine directly (probes, incast, ecmp)
FABRIC_ONLY = "--servers: this command does not run over several machines (fabric, dashboard, compare do)"


class ServerError(FabricError):
    """A server is not ready; the message names each missing piece, one per line."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def ssh_argv(server: str, *command: str, tty: bool = False) -> list[str]:
    """`ssh` to `server` as root in BatchMode (with INCASTLAB_SSH_CONFIG's config when set)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    if config := os.environ.get(SSH_CONFIG_ENV):
        argv += ["-F", config]
    if tty:
        argv.append("-tt")
    return [*argv, f"root@{server}", *command]


def run_on(server: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a shell command on a server as root (locally for localhost); never raises on failure."""
    argv = ["sh", "-c", command] if server in LOCAL else ssh_argv(server, command)
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 255, "", f"no answer within {timeout:g} s")


def resolve(server: str) -> str | None:
    """A server's IPv4 address (itself when it is one; getent otherwise), None if it has none."""
    try:
        return str(ipaddress.IPv4Address(server))
    except ValueError:
        pass
    out = subprocess.run(["getent", "ahostsv4", server], capture_output=True, text=True).stdout
    found = re.findall(r"\d+\.\d+\.\d+\.\d+", out)
    return found[0] if found else None


@dataclass(frozen=True)
class Report:
    """What one server said about itself (key=value lines of the check script)."""

    server: str
    values: dict[str, str]


def check_script(peers: Sequence[str], python: Path, code: Path, writable: Path | None = None) -> str:
    """The shell that reports a server's state as key=value lines (run in one ssh call)."""
    lines = [
        "echo machine=$(cat /etc/machine-id 2>/dev/null)-$(hostname)",
        "command -v ovs-vsctl >/dev/null && ovs-vsctl --timeout=3 show >/dev/null 2>&1 && echo ovs=ok",
        "command -v mnexec >/dev/null && echo mnexec=ok",
        f"test -x {python} && echo venv=ok",
        f"test -f {code}/incastlab/cli.py && echo code=ok",
        "echo bridges=$(ovs-vsctl --timeout=3 list-br 2>/dev/null | grep -E '^(sp|lf)[0-9]+$')",
    ]
    if writable is not None:
        lines.append(f"test -d {writable} && test -w {writable} && echo writable=ok")
    for peer in peers:  # the MTU of the interface each tunnel leaves by
        lines.append(
            f"dev=$(ip route get {peer} 2>/dev/null | grep -o 'dev [^ ]*' | cut -d' ' -f2); "
            f'test -n "$dev" && echo mtu_{peer}=$(cat /sys/class/net/$dev/mtu)'
        )
    return "; ".join(f"{{ {line}; }}" for line in lines) + "; true"


def ask(
    server: str, peers: Sequence[str], python: Path, code: Path, writable: Path | None = None
) -> Report | str:
    """The server's report, or the line saying it cannot be reached."""
    proc = run_on(server, check_script(peers, python, code, writable))
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        why = said[-1] if said else f"ssh exit {proc.returncode}"
        return f"server {server}: not reachable by ssh as root in BatchMode ({why})"
    values = dict(ln.split("=", 1) for ln in proc.stdout.splitlines() if "=" in ln)
    return Report(server, values)


def judge(
    report: Report, python: Path, code: Path, unreachable: Sequence[str] = (), writable: Path | None = None
) -> list[str]:
    """One line per missing piece of a server that answered (the MTU toward a server that did not
    answer is not judged: that server has its own line)."""
    s, v = report.server, report.values
    lines = []
    if v.get("ovs") != "ok":
        lines.append(f"server {s}: Open vSwitch is not installed or not answering (ovs-vsctl show failed)")
    if v.get("mnexec") != "ok":
        lines.append(f"server {s}: Mininet is not installed (no mnexec)")
    if v.get("venv") != "ok":
        lines.append(f"server {s}: no venv at {python} (the checkout and its venv at the same paths)")
    if v.get("code") != "ok":
        lines.append(f"server {s}: no incastlab code at {code}")
    if writable is not None and v.get("writable") != "ok":
        lines.append(f"server {s}: cannot write the results folder {writable} (share it at the same path)")
    if v.get("bridges"):
        lines.append(
            f"server {s}: leftovers of an earlier run (bridges {v['bridges']}): remove them with "
            "`incastlab clean`"
        )
    for key, mtu in sorted(v.items()):
        short = mtu.isdigit() and int(mtu) < FABRIC_MTU + VXLAN_OVERHEAD
        if key.startswith("mtu_") and short and key[4:] not in unreachable:
            lines.append(
                f"server {s}: MTU {mtu} toward {key[4:]} cannot carry a {FABRIC_MTU}-byte frame in "
                f"VXLAN (needs {FABRIC_MTU + VXLAN_OVERHEAD})"
            )
    return lines


def preflight_servers(
    servers: Sequence[str],
    python: Path | None = None,
    code: Path = ROOT,
    say: Callable[[str], None] | None = None,
    writable: Path | None = None,
) -> dict[str, str]:
    """Check every server before anything is built; returns server -> its IPv4 address.

    ServerError with one line per missing piece: a server that does not resolve, is not reachable, is
    the same machine as another (by address, or by machine-id and hostname), or lacks OVS, Mininet,
    the venv or the code, or whose underlay MTU is too small for a tunnelled full frame."""
    python = python or Path(sys.executable)
    lines: list[str] = []
    addresses: dict[str, str] = {}
    for s in servers:
        ip = "127.0.0.1" if s in LOCAL else resolve(s)
        if ip is None:
            lines.append(f"server {s}: no such host (it does not resolve)")
            continue
        same = next((o for o, oip in addresses.items() if oip == ip), None)
        if same is not None:
            lines.append(f"server {s}: the same machine as {same} ({ip}): name each machine once")
            continue
        addresses[s] = ip
    with ThreadPoolExecutor(max_workers=max(1, len(addresses))) as pool:
        answers = list(
            pool.map(
                lambda s: ask(s, [ip for o, ip in addresses.items() if o != s], python, code, writable),
                addresses,
            )
        )
    seen: dict[str, str] = {}
    down = [addresses[s] for s, a in zip(addresses, answers, strict=True) if isinstance(a, str)]
    for answer in answers:
        if isinstance(answer, str):
            lines.append(answer)
            continue
        lines += judge(answer, python, code, down, writable)
        machine = answer.values.get("machine", "")
        if machine and machine in seen:
            lines.append(
                f"server {answer.server}: the same machine as {seen[machine]}: name each machine once"
            )
        seen.setdefault(machine, answer.server)
    if lines:
        raise ServerError(lines)
    if say is not None:
        say(f"servers: {', '.join(f'{s} ({ip})' for s, ip in addresses.items())} ready")
    return addresses


def listen_address(servers: Sequence[str], addresses: dict[str, str], of_host: str) -> str:
    """Where the OpenFlow listener goes: loopback when every switch is on this machine; with remote
    servers the address given (never every address), or, when loopback was left as it is, this
    machine's source address toward the first remote server (a named address, as `ip route get`
    names it)."""
    remote = [addresses[s] for s in servers if s not in LOCAL]
    if not remote:
        return of_host
    if of_host in ("0.0.0.0", "", "::"):
        raise ServerError(["--of-host: OpenFlow on every address is refused; name one the servers reach"])
    if not of_host.startswith("127."):
        return of_host
    out = subprocess.run(["ip", "route", "get", remote[0]], capture_output=True, text=True).stdout
    found = re.search(r"\bsrc (\d+\.\d+\.\d+\.\d+)", out)
    if not found:
        raise ServerError([f"no route from this machine to server {remote[0]} for the OpenFlow listener"])
    return found.group(1)


def refuse_for_cluster(cfg: Any, results: Path, say: Callable[[str], None]) -> Any:
    """A run over cfg.controller.servers: what it cannot do yet refused in one line (jobs, stragglers
    and faults act on local hosts), then every server checked, the results folder writable on each
    at the same path (captures, records and counters are written there). Returns the hosts'
    runtime (namespaces on the servers)."""
    from runmodel.strategy import JOB
    from topologies.containers import HostRuntime

    if cfg.faults or cfg.stragglers or any(s.kind == JOB for s in cfg.strategy_specs):
        raise ServerError(["--servers: faults, stragglers and jobs do not run over several machines yet"])
    preflight_servers(cfg.controller.servers, say=say, writable=Path(results).resolve())
    return HostRuntime("netns", "hosts are namespaces on the servers")
