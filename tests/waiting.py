"""Waiting for things to happen, instead of sleeping and hoping they did.

`wait_for(predicate, timeout, what)` polls until the predicate returns something truthy and
returns that value; on timeout it raises WaitTimeout (an AssertionError, so pytest reports a
failure) naming `what` and the predicate's last value. A predicate that raises ends the wait
with its exception (e.g. "a process exited before ...").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from analysis.packets import PcapError
from analysis.pcapfile import read_pcap

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """`what` did not happen within the timeout."""


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll `predicate` until it returns a truthy value (returned); raise WaitTimeout naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def tcp_listening(pid: int, port: int) -> bool:
    """True once a TCP socket listens on `port` in the network namespace of process `pid`.

    Reads /proc/<pid>/net/tcp and tcp6, which show the namespace the process is in, so it works
    for a server started in a Mininet host as well as for one in the root namespace.
    """
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def polls_since(get: Callable[[str], Any], t0: float, names: set[str], kind: str = "port") -> int:
    """How many statistics polls of the controller, newer than `t0`, cover every port in `names`.

    `get` is ControllerProcess.get. Counts the distinct sample times of /api/timeseries?since=t0
    for each port and returns the smallest count: 2 means that every port has a sample whose
    request was sent after t0 (the first may have been in flight already).
    """
    samples = get(f"/api/timeseries?since={t0}")["samples"]
    times: dict[str, set[float]] = {n: set() for n in names}
    for s in samples:
        if s.get("kind") == kind and s.get("name") in times and s["t"] > t0:
            times[s["name"]].add(s["t"])
    return min((len(v) for v in times.values()), default=0)


def wait_for_polls(
    get: Callable[[str], Any],
    t0: float,
    names: set[str],
    timeout: float = 15,
    kind: str = "port",
    polls: int = 2,
) -> None:
    """Wait until the controller has polled every port in `names` `polls` times after `t0`."""
    wait_for(
        lambda: polls_since(get, t0, names, kind) >= polls,
        timeout,
        f"{polls} controller polls of {sorted(names)} ({kind}) after t={t0:.2f}",
    )


def pcap_fins(path: Path) -> int:
    """The FIN segments a capture holds so far (its last record may still be being written)."""
    try:
        return int(((read_pcap(path, allow_truncated=True).flags & 1) != 0).sum())
    except (PcapError, OSError):
        return 0
