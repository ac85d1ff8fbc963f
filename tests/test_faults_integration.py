"""Faults on a real fabric: a dead uplink, a restarted controller, an interrupted or killed run.

A link fault is judged on the data plane: the test reads the kernel's own counters and link states
(/proc/net/dev, /sys/class/net) while the run goes on, and the hosts' captures through tshark.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from incastlab.cleanup import find_leftovers
from runmodel.records import read_faults, read_jsonl
from tests.conftest import run_cli, run_ok
from tests.reportpage import status_badges
from tests.running import Running, assert_exit_130_soon, interrupt_at
from tests.tshark import tshark_fields

pytestmark = pytest.mark.integration
SHORT = ["--workers", "3", "--capture", "ps-port"]


def events(run: Path, strategy: str) -> list[dict]:
    return [r for r in read_jsonl(run / strategy / "timeseries.jsonl") if r.get("kind") == "event"]


@dataclass(frozen=True)
class Poll:
    """One reading: when, the watched links' operstate ("absent" before the fabric is built and
    after it is gone, "changing" when it changed while the counters were read), every interface's
    (rx, tx) bytes."""

    t: float
    state: dict[str, str]
    bytes: dict[str, tuple[int, int]]


class LinkWatch:
    """Reads every root-namespace interface's byte counters (/proc/net/dev) and the watched links'
    operstate every `period` s in a thread, for as long as the block runs: the switches' ports as the
    kernel counts them, with nothing of incastlab in between."""

    def __init__(self, links: list[str], period: float = 0.02) -> None:
        self.links, self.period = links, period
        self.polls: list[Poll] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _states(self) -> dict[str, str]:
        out = {}
        for link in self.links:
            try:
                out[link] = Path(f"/sys/class/net/{link}/operstate").read_text().strip()
            except OSError:
                out[link] = "absent"
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            before = self._states()
            counters = {}
            for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
                name, _, rest = line.partition(":")
                f = rest.split()
                counters[name.strip()] = (int(f[0]), int(f[8]))
            after = self._states()
            # a link read in two states around its counters is "changing": in no outage, ending none
            state = {k: after[k] if before[k] == after[k] else "changing" for k in self.links}
            self.polls.append(Poll(time.time(), state, counters))

    def __enter__(self) -> LinkWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def outages(self, link: str) -> list[tuple[Poll, Poll]]:
        """(first, last) poll of each run of polls that found `link` down between two that found it
        up (operstate "down", or "lowerlayerdown" at the far end of a veth)."""
        out: list[tuple[Poll, Poll]] = []
        run: list[Poll] = []
        seen_up = False
        for p in self.polls:
            st = p.state[link]
            if st == "up":
                if run and seen_up:
                    out.append((run[0], run[-1]))
                run, seen_up = [], True
            elif st == "absent":
                run = []
            elif st != "changing":
                run.append(p)
        return out


def _moved(a: Poll, b: Poll, ifname: str) -> tuple[int, int]:
    """(rx, tx) bytes of `ifname` between two polls."""
    return b.bytes[ifname][0] - a.bytes[ifname][0], b.bytes[ifname][1] - a.bytes[ifname][1]


def _off_leaf_bytes(run: Path, leaf: str, t0: float, t1: float) -> tuple[int, int]:
    """(sent, received) frame bytes between the hosts of `leaf` and hosts of other leaves in
    (t0, t1], from the leaf's hosts' own captures (tshark): what its uplinks had to carry."""
    hosts = json.loads((run / "plan.json").read_text())["hosts"]
    mine = {h["mac"]: h["name"] for h in hosts if h["leaf"] == leaf}
    others = {h["mac"] for h in hosts if h["leaf"] != leaf}
    sent = received = 0
    for mac, name in mine.items():
        pcap = run / "ring" / "pcap" / f"{name}.pcap"
        assert pcap.exists(), f"{name} is on {leaf}: its capture is needed to know what crossed the leaf"
        for t, src, dst, n in tshark_fields(pcap, "frame.time_epoch", "eth.src", "eth.dst", "frame.len"):
            if t0 < float(t) <= t1:
                sent += int(n) if src == mac and dst in others else 0
                received += int(n) if dst == mac and src in others else 0
    return sent, received


def _check_outage(run: Path, watch: LinkWatch, target: str) -> None:
    """One link-down of `target` (a leaf's uplink) on the data plane: for the 3 s faults.jsonl says
    it was down, both of its ends count no byte and the kernel finds it down, and the leaf's other
    uplink carries every frame the leaf's hosts exchanged with other leaves (their captures) at a
    rate that shows the ring kept training."""
    plan = json.loads((run / "plan.json").read_text())
    uplink_mbit = json.loads((run / "config.json").read_text())["fabric"]["uplink_mbit"]
    link = next(k for k in plan["links"] if f"{k['a']}-eth{k['a_port']}" == target)
    peer = f"{link['b']}-eth{link['b_port']}"
    other = next(
        f"{k['a']}-eth{k['a_port']}"
        for k in plan["links"]
        if k["a"] == link["a"] and k is not link and k["kind"] == "uplink"
    )
    fired = [f for f in read_faults(run / "ring" / "faults.jsonl") if f.target == target]
    t_down = next(f.t for f in fired if f.state == "down")
    t_up = next(f.t for f in fired if f.state == "up")

    # the window faults.jsonl claims, less the moment between `ip link set up` and its record
    claimed = [p for p in watch.polls if t_down < p.t < t_up - 0.05]
    a, b = claimed[0], claimed[-1]
    up = next(p for p in watch.polls if p.state[target] == "up")
    print(
        f"{target} down {b.t - a.t:.2f} s by faults.jsonl; before, (rx, tx) bytes "
        f"{_moved(up, a, target)} on it, {_moved(up, a, other)} on {other}"
    )
    assert b.t - a.t >= 2.5, f"{target} was down {b.t - a.t:.2f} s, not the fault's 3 s"
    for end in (target, peer):
        assert _moved(a, b, end) == (0, 0), f"{end} moved {_moved(a, b, end)} (rx, tx) bytes while down"
    states = {p.state[target] for p in claimed}
    assert states == {"down"} and len(watch.outages(target)) == 1, f"{target} was {states} in the kernel"

    rx, tx = _moved(a, b, other)
    sent, received = _off_leaf_bytes(run, link["a"], a.t, b.t)
    print(f"while down: {other} tx {tx} rx {rx} B; {link['a']}'s hosts sent {sent}, received {received} B")
    edge = 40 * 1514  # frames still in a queue at either end of the window
    assert abs(tx - sent) <= 0.01 * sent + edge, (tx, sent)
    assert abs(rx - received) <= 0.01 * received + edge, (rx, received)
    floor = 0.25 * uplink_mbit * 1e6 / 8 * (b.t - a.t)
    assert min(tx, rx) >= floor, f"the ring hardly used {other} while {target} was down"


def test_a_dead_uplink_carries_nothing_and_the_other_takes_its_traffic(clean_host, tmp_path):
    """Each of lf2's two uplinks goes down for 3 s in turn (steps 2 and 18): ECMP may have put all
    of the ring's flows on one spine, so one of the two outages moves them. A flap of lf3-eth2 shows
    in the kernel as three short outages."""
    outages, flapped, steps = {"lf2-eth1": 2, "lf2-eth2": 18}, "lf3-eth2", 30
    faults = [f"link-down:{link}@step{at}" for link, at in outages.items()] + [f"flap:{flapped}@step5"]
    with LinkWatch([*outages, flapped]) as watch:
        args = [
            "compare",
            "--strategies",
            "ring",
            "--steps",
            str(steps),
            "--workers",
            "3",
            "--capture",
            "all",
        ]
        run_ok(args + [arg for f in faults for arg in ("--fault", f)], tmp_path)
    run = tmp_path / "latest"
    for target in outages:
        _check_outage(run, watch, target)

    flaps = watch.outages(flapped)
    print(f"{flapped} down for {[round(q.t - p.t, 2) for p, q in flaps]} s")
    assert len(flaps) == 3 and all(q.t - p.t < 1.0 for p, q in flaps), "a flap: down and up three times"

    ev = events(run, "ring")
    assert any(e["event"] == "port_down" and e["switch"] == "lf2" and e["port"] == 1 for e in ev)
    reroutes = [e for e in ev if e["event"] == "reroute"]
    assert reroutes[0]["state"] == "down" and reroutes[0]["dead_links"] == ["lf2-sp1"]
    assert reroutes[-1]["state"] == "up"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["strategies"]["ring"]["steps"] == steps and summary["complete"]


def test_controller_restart_keeps_forwarding_and_leaves_a_visible_gap(clean_host, tmp_path):
    fault = ["--fault", "controller-restart@step2"]
    run_ok(["compare", "--strategies", "ps", "--steps", "12", *SHORT, *fault], tmp_path)
    run = tmp_path / "latest"
    fired = read_jsonl(run / "ps" / "faults.jsonl")
    t_kill = next(f["t"] for f in fired if f["state"] == "killed")
    t_back = next(f["t"] for f in fired if f["state"] == "restarted")
    samples = sorted(r["t"] for r in read_jsonl(run / "ps" / "timeseries.jsonl") if r.get("kind") == "port")
    gaps = [b - a for a, b in zip(samples, samples[1:], strict=False) if a <= t_back and b >= t_kill]
    assert max(gaps) >= (t_back - t_kill) * 0.9, "the statistics gap must show in the time series"
    assert any(s > t_back for s in samples), "statistics resume after the restart"
    steps = [r for r in read_jsonl(run / "ps" / "worker-0.jsonl") if "step" in r]
    assert len(steps) == 12, "training went on through the gap (flows stayed installed)"


def test_async_carries_on_without_a_killed_worker_and_says_so(clean_host, tmp_path):
    fault = ["--fault", "kill-worker:1@step2"]
    proc = run_ok(["compare", "--strategies", "async", "--steps", "8", *SHORT, *fault], tmp_path)
    assert "training goes on with 2 workers" in proc.stderr
    run = tmp_path / "latest" / "async"
    fired = [(f["event"], f["target"]) for f in read_jsonl(run / "faults.jsonl")]
    assert fired == [("fired", "1")], "the kill follows worker 1's own steps, so it finds it running"
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "complete" and list(status["lost_workers"]) == ["1"]
    for rank in (0, 2):
        rows = read_jsonl(run / f"worker-{rank}.jsonl")
        assert rows[-1].get("event") == "done" and len(rows) == 9
    lost = [r for r in read_jsonl(run / "ps.jsonl") if r.get("event") == "worker_lost"]
    assert [r["worker"] for r in lost] == [1]


# Ctrl-C points of a compare run: (line saying the run got there, line saying it moved on, the
# largest random delay it cannot outlast). The controller takes ~0.6 s to answer, bring-up 3-6 s,
# a step of 3 workers well over a second (4 steps remain after step 2), the report a few seconds;
# "report: building" comes after the fabric is down, the report's path on stdout when it is done.
COMPARE_POINTS = {
    "controller start": ("starting controller", "building fabric", 0.1),
    "fabric build": ("building fabric", "fabric up in", 1.0),
    "mid-strategy": (r"ps: step [2-5]/6\b", r"ps: done", 0.5),  # progress lines may skip a step
    "report": ("report: building", r"^report: (?!building)", 0.1),
}
COMPARE = ["compare", "--strategies", "ps,ring", "--steps", "6", *SHORT]


def run_dir(results: Path) -> Path:
    return next(p for p in results.iterdir() if p.name != "latest")


def assert_readable_incomplete_run(run: Path, summary_expected: bool = True) -> None:
    """summary.json says incomplete; `incastlab report` rebuilds a report that says so."""
    if summary_expected:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["complete"] is False
    rebuilt = run_cli(["report", str(run)], timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert status_badges((run / "report.html").read_text()) == ["incomplete"]


@pytest.mark.parametrize("point", list(COMPARE_POINTS))
def test_ctrl_c_at_any_point_of_a_compare_run(clean_host, tmp_path, rng, point):
    at, moved_on, max_delay = COMPARE_POINTS[point]
    run = Running([*COMPARE, "--results", str(tmp_path)])
    code, secs = interrupt_at(run, rng, at, moved_on, max_delay)
    assert_exit_130_soon(code, secs, run)
    assert find_leftovers().empty(), f"Ctrl-C during {point} left {find_leftovers().describe()}"
    if point == "mid-strategy":
        assert_readable_incomplete_run(run_dir(tmp_path))


def test_a_killed_run_is_cleaned_and_the_next_one_starts(clean_host, tmp_path, rng):
    run = Running([*COMPARE, "--results", str(tmp_path)])
    code, _ = interrupt_at(run, rng, *COMPARE_POINTS["mid-strategy"], sig=signal.SIGKILL, group=False)
    assert code == -signal.SIGKILL
    assert not find_leftovers().empty(), "kill -9 leaves the fabric behind: that is what clean is for"
    cleaned = run_cli(["clean"], timeout=120)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert find_leftovers().empty(), f"clean left {find_leftovers().describe()}"
    assert_readable_incomplete_run(run_dir(tmp_path), summary_expected=False)
    again = run_cli(
        ["compare", "--strategies", "ring", "--steps", "2", *SHORT, "--results", str(tmp_path)], timeout=600
    )
    assert again.returncode == 0, "the next run starts cleanly: " + again.stderr[-1500:]
