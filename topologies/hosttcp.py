"""TCP settings of the hosts' network namespaces: congestion control and minimum RTO.

The congestion control is set on the host's fabric route (`ip route ... congctl cubic`): a
namespace other than the root one may only pick a default from the host-wide
tcp_allowed_congestion_control list (here "reno bbr"), while a route's congctl applies to every
connection over it, both ends, and touches nothing outside the namespace. The minimum RTO is the
per-namespace sysctl net.ipv4.tcp_rto_min_us. Both are applied inside each host's namespace
(nsenter on the host shell's namespace, not through the shell) and read back from there, so a run
records what the kernel really used, not what was asked.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from runmodel.params import ParamError

CC_KEY = "net/ipv4/tcp_congestion_control"
DEFAULT_RTO_MIN_MS = 200.0  # Linux's TCP_RTO_MIN
RTO_MIN_KEY = "net/ipv4/tcp_rto_min_us"


class HostTcpError(RuntimeError):
    """A TCP setting could not be applied in a host; the message is one line."""


@dataclass(frozen=True)
class HostTcp:
    """What a host's TCP runs with."""

    cc: str
    rto_min_ms: float | None  # None: this kernel has no per-namespace minimum RTO
    quickack: bool = False  # the fabric route says `quickack 1`: delayed ACKs off


def available_cc() -> list[str]:
    """Congestion controls this kernel offers (loaded or built in)."""
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def rto_min_settable() -> bool:
    """True where the kernel has the per-namespace net.ipv4.tcp_rto_min_us sysctl."""
    return Path("/proc/sys", RTO_MIN_KEY).exists()


def check_cc(cc: str) -> None:
    """Refuse a congestion control this kernel does not have, before anything is built."""
    have = available_cc()
    if cc in have:
        return
    probe = subprocess.run(["modprobe", "-q", f"tcp_{cc}"], capture_output=True, check=False)
    if probe.returncode == 0 and cc in available_cc():
        return
    raise ParamError(
        f"cc {cc!r} is not available in this kernel (available: {' '.join(have) or 'none'}); "
        + (
            "DCTCP also needs ECN marking, e.g. in the Vagrant VM"
            if cc == "dctcp"
            else "pick another with --cc"
        )
    )


def check_rto_min(rto_min_ms: float | None) -> None:
    """Refuse a minimum RTO the kernel cannot set per namespace."""
    if rto_min_ms is None:
        return
    if not rto_min_settable():
        raise ParamError("rto_min_ms: this kernel has no per-namespace net.ipv4.tcp_rto_min_us")
    if not 0 < rto_min_ms <= 2000:
        raise ParamError(f"rto_min_ms must be in (0, 2000], got {rto_min_ms:g}")


def _in_netns(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", *argv],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key


FABRIC_NET = "10.0.0.0/8"


def apply(pid: int, nic: str, ip: str, cc: str, rto_min_ms: float | None, quickack: bool = False) -> None:
    """Set the congestion control (on the fabric route) and the minimum RTO in pid's namespace;
    quickack: the route also switches delayed ACKs off (`quickack 1`)."""
    steps = [
        [
            "ip",
            "route",
            "replace",
            FABRIC_NET,
            "dev",
            nic,
            "proto",
            "kernel",
            "scope",
            "link",
            "src",
            ip,
            "congctl",
            cc,
            *(["quickack", "1"] if quickack else []),
        ]
    ]
    if rto_min_ms is not None:
        key = RTO_MIN_KEY.replace("/", ".")
        steps.append(["sysctl", "-q", "-w", f"{key}={int(round(rto_min_ms * 1000))}"])
    for argv in steps:
        done = _in_netns(pid, argv)
        if done.returncode != 0:
            raise HostTcpError(
                f"`{' '.join(argv)}` failed in the namespace of pid {pid}: "
                f"{(done.stderr or done.stdout).strip() or done.returncode}"
            )


def read(pid: int) -> HostTcp:
    """What TCP in the namespace of process `pid` uses now on the fabric route."""
    route = _in_netns(pid, ["ip", "route", "show", FABRIC_NET])
    words = route.stdout.split()
    if "congctl" in words and words.index("congctl") + 1 < len(words):
        cc = words[words.index("congctl") + 1]
        if cc == "lock" and words.index("congctl") + 2 < len(words):
            cc = words[words.index("congctl") + 2]
    else:
        done = _in_netns(pid, ["cat", _sysctl_path(CC_KEY)])
        if done.returncode != 0:
            raise HostTcpError(f"cannot read the congestion control of pid {pid}: {done.stderr.strip()}")
        cc = done.stdout.strip()
    rto: float | None = None
    if rto_min_settable():
        got = _in_netns(pid, ["cat", _sysctl_path(RTO_MIN_KEY)])
        if got.returncode == 0 and got.stdout.strip().isdigit():
            rto = int(got.stdout.strip()) / 1000.0
    quick = (
        "quickack" in words
        and words.index("quickack") + 1 < len(words)
        and words[words.index("quickack") + 1] == "1"
    )
    return HostTcp(cc, rto, quick)
