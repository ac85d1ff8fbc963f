"""`incastlab incast` for real: a short sweep on the fabric, its figures against the wire and the kernel.

One sweep (N = 1 and 6 senders, 4 rounds, the base and a 1 ms minimum RTO) shared by the tests. Each
figure of incast.json is checked against something the tool did not compute: the client's own
capture read by tshark (when each round's first request left and its last byte arrived, who sent
data, the bytes delivered, the link's idle gaps), the senders' captures (the segments they sent),
plan.json (which address is which host, the client's link rate), the senders' kernel counters
(hosts.json, nstat per namespace) and the configuration the sweep was given (rounds, block size).
The 1 ms cure is asserted outright: at N = 6 the base must collapse and time out, and the cure must
not.
"""

from __future__ import annotations

import functools
import json
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli, run_in_fresh_folder
from tests.tshark import tshark_count, tshark_fields, tshark_unique_bytes

pytestmark = pytest.mark.integration

SENDERS = (1, 6)
ROUNDS = 4
SRU = 48 * 1024  # the sweep's default block (config.json sru_bytes says so too)
LINES = ("base", "rto_min_ms=1")
PAYLOAD_SHARE = 1448 / 1514  # a full frame's TCP payload (MTU 1500, timestamps) over its wire bytes
IDLE_GAP_S = 0.002  # a gap between two data arrivals at the client longer than this: the link sat idle
# a 200 ms timer's wait on the wire, less the lead a last send queued in the sender's qdisc may have;
# a 1 ms timer (4 ms at 250 Hz) reaches it only after six backoffs of one segment in a row
TIMER_WAIT_S = 0.9 * 0.2


@pytest.fixture(scope="module")
def incast_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    senders = ",".join(map(str, SENDERS))
    args = ["incast", "--senders", senders, "--rounds", str(ROUNDS), "--lines", ",".join(LINES)]
    return run_in_fresh_folder(tmp_path_factory, "incast", args, timeout=900)[0]


def rows(run: Path) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["line"], r["senders"]): r for r in json.loads((run / "incast.json").read_text())["rows"]}


def point_dir(run: Path, line: str, n: int) -> Path:
    return run / line.replace("=", "-") / f"n{n:02d}"


@functools.cache
def hosts_by_ip(run: Path) -> dict[str, dict[str, Any]]:
    """plan.json's hosts by address."""
    return {h["ip"]: h for h in json.loads((run / "plan.json").read_text())["hosts"]}


def client_host(run: Path) -> dict[str, Any]:
    client = json.loads((run / "config.json").read_text())["client"]
    return next(h for h in hosts_by_ip(run).values() if h["name"] == client)


# -- what the client's capture says about one point ---------------------------------------------------
@dataclass(frozen=True)
class Wire:
    """One point as the client's own capture saw it (tshark), hosts named by plan.json."""

    senders: frozenset[str]  # hosts whose data reached the client
    rounds: tuple[tuple[float, float], ...]  # per round: its first request out, its last data byte in
    arrivals: tuple[float, ...]  # every data segment into the client, in order

    @property
    def duration_s(self) -> float:
        return self.rounds[-1][1] - self.rounds[0][0]

    def gaps(self) -> list[float]:
        """Idle gaps of the client's link inside the rounds (longer than IDLE_GAP_S)."""
        t0, t1 = self.rounds[0][0], self.rounds[-1][1]
        times = [t0, *[t for t in self.arrivals if t0 <= t <= t1], t1]
        return [b - a for a, b in zip(times, times[1:], strict=False) if b - a > IDLE_GAP_S]


@functools.cache
def wire(run: Path, line: str, n: int) -> Wire:
    """The rounds of a point from h1.pcap: the client sends each round one 4-byte request per server
    at once and the next round's only after every block arrived, so the k-th group of n new requests
    (a resent request has the sequence number of its first copy) opens round k, and round k ends with
    the last data segment before round k + 1's first request."""
    client = client_host(run)
    pcap = point_dir(run, line, n) / "pcap" / f"{client['name']}.pcap"
    requests: list[tuple[float, str]] = []
    seen: set[tuple[str, str]] = set()
    arrivals: list[tuple[float, str]] = []
    for t, src, dst, seq, length in tshark_fields(
        pcap, "frame.time_epoch", "ip.src", "ip.dst", "tcp.seq_raw", "tcp.len", display="tcp.len > 0"
    ):
        if src == client["ip"] and int(length) == 4 and (dst, seq) not in seen:
            seen.add((dst, seq))
            requests.append((float(t), dst))
        elif dst == client["ip"]:
            arrivals.append((float(t), src))
    assert len(requests) == ROUNDS * n, f"{line} N={n}: {len(requests)} requests on the wire"
    starts = []
    for k in range(ROUNDS):
        group = requests[k * n : (k + 1) * n]
        assert len({dst for _, dst in group}) == n, f"{line} N={n} round {k}: {group}"
        starts.append(group[0][0])
    bounds = [*starts[1:], float("inf")]
    ends = [max(t for t, _ in arrivals if a <= t < b) for a, b in zip(starts, bounds, strict=True)]
    return Wire(
        senders=frozenset(hosts_by_ip(run)[src]["name"] for _, src in arrivals),
        rounds=tuple(zip(starts, ends, strict=True)),
        arrivals=tuple(t for t, _ in arrivals),
    )


def kernel(run: Path, line: str, n: int) -> dict[str, dict[str, int]]:
    hosts = json.loads((point_dir(run, line, n) / "hosts.json").read_text())
    return {h: c["kernel"] for h, c in hosts.items()}


def wire_loss(run: Path, line: str, n: int) -> int:
    """Packets the senders' captures show leaving for the client that the client's capture lacks."""
    d = point_dir(run, line, n) / "pcap"
    client = client_host(run)
    ip = {h["name"]: a for a, h in hosts_by_ip(run).items()}
    sent = sum(
        tshark_count(d / f"{h}.pcap", f"ip.src=={ip[h]} && ip.dst=={client['ip']}")
        for h in ip
        if h in wire(run, line, n).senders
    )
    return sent - tshark_count(d / f"{client['name']}.pcap", f"ip.dst=={client['ip']}")


def longest_wait_before_a_resend(run: Path, line: str, n: int) -> float:
    """Over the senders' own captures: the longest time a sender sent no data before resending a
    segment (one below the highest sequence number it had sent): its longest timer wait, on the wire."""
    ip = {h["name"]: a for a, h in hosts_by_ip(run).items()}
    longest = 0.0
    for host in wire(run, line, n).senders:
        pcap = point_dir(run, line, n) / "pcap" / f"{host}.pcap"
        last, top = None, 0
        for t, seq, length in tshark_fields(
            pcap, "frame.time_epoch", "tcp.seq", "tcp.len", display=f"ip.src=={ip[host]} && tcp.len > 0"
        ):
            if last is not None and int(seq) < top:
                longest = max(longest, float(t) - last)
            top, last = max(top, int(seq) + int(length)), float(t)
    return longest


# -- the tests ------------------------------------------------------------------------------------------
def test_every_point_asked_its_senders_every_round_and_got_every_block(incast_run: Path) -> None:
    """The client's capture: N senders per point, none the client, and ROUNDS x SRU unique bytes from
    each; the kernel: nobody else sent a TCP segment; the row: that many bytes, rounds and senders."""
    data = json.loads((incast_run / "incast.json").read_text())
    assert data["schema"].startswith("incastlab.incast/") and data["complete"] is True
    by = rows(incast_run)
    assert set(by) == {(line, n) for line in LINES for n in SENDERS}
    client = client_host(incast_run)
    for (line, n), r in by.items():
        w = wire(incast_run, line, n)
        assert len(w.senders) == n and client["name"] not in w.senders, (line, n, w.senders)
        talked = {h for h, k in kernel(incast_run, line, n).items() if k.get("TcpOutSegs", 0) > 0}
        assert talked == {client["name"], *w.senders}, (line, n, talked)
        pcap = point_dir(incast_run, line, n) / "pcap" / f"{client['name']}.pcap"
        per_sender = [
            b for (_st, _src, _sp, dst), b in tshark_unique_bytes(pcap).items() if dst == client["ip"]
        ]
        assert sorted(per_sender) == [ROUNDS * SRU] * n, (line, n, per_sender)
        assert r["state"] == "complete" and r["rounds"] == len(w.rounds) == ROUNDS, r
        assert r["app_bytes"] == r["delivered_bytes_pcap"] == ROUNDS * n * SRU, r


def test_durations_and_goodput_are_the_client_captures(incast_run: Path) -> None:
    """duration_s: the first request of round 1 to the last data byte of the last round, on the wire;
    round_s_median and _max: the same per round; goodput: the configured bytes over that time, a share
    of the link rate plan.json gave the client. The client's clock and its capture differ by the
    moment between a packet and its system call (measured: under 0.5 ms)."""
    rate_mbit = client_host(incast_run)["rate_mbit"]
    for (line, n), r in rows(incast_run).items():
        w = wire(incast_run, line, n)
        rounds = [b - a for a, b in w.rounds]
        print(f"{line} N={n}: wire {w.duration_s:.6f} s, row {r['duration_s']:.6f} s")
        assert r["duration_s"] == pytest.approx(w.duration_s, abs=0.005, rel=0.01)
        assert r["round_s_median"] == pytest.approx(statistics.median(rounds), abs=0.005, rel=0.01)
        assert r["round_s_max"] == pytest.approx(max(rounds), abs=0.005, rel=0.01)
        mbit = ROUNDS * n * SRU * 8 / w.duration_s / 1e6
        assert r["goodput_mbit"] == pytest.approx(mbit, rel=0.02)
        assert r["goodput_frac"] == pytest.approx(mbit / rate_mbit, rel=0.02)
        assert r["goodput_frac"] <= PAYLOAD_SHARE * 1.01  # a shaped link carries no more than its rate


def test_kernel_counters_are_summed_over_the_senders_seen_on_the_wire(incast_run: Path) -> None:
    for (line, n), r in rows(incast_run).items():
        senders = wire(incast_run, line, n).senders
        k = kernel(incast_run, line, n)
        timeouts = {h: k[h].get("TcpExtTCPTimeouts", 0) for h in senders}
        assert r["timeouts_by_host"] == timeouts, (line, n)
        assert r["timeouts_kernel"] == sum(timeouts.values())
        assert r["retransmits_kernel"] == sum(k[h].get("TcpRetransSegs", 0) for h in senders)
        assert r["loss_probes_kernel"] == sum(k[h].get("TcpExtTCPLossProbes", 0) for h in senders)
        assert r["spurious_rtos_kernel"] == sum(k[h].get("TcpExtTCPSpuriousRTOs", 0) for h in senders)
        # the senders' own captures tell the same story: the timeouts found there vs the kernel's. At
        # a 1 ms minimum RTO a tail loss probe fires as soon as the timer would (srtt/2 + 1 ms), and
        # the capture may take one for a timeout: there the kernel's probes widen the window upward
        assert set(r["timeouts_pcap_by_host"]) == senders
        slack = max(2, 0.1 * r["timeouts_kernel"])
        above = slack if line == "base" else r["loss_probes_kernel"]
        assert r["timeouts_kernel"] - slack <= r["timeouts_pcap"] <= r["timeouts_kernel"] + above, (line, n)


def test_retransmissions_agree_with_tshark_on_the_senders_captures(incast_run: Path) -> None:
    n = max(SENDERS)
    d = point_dir(incast_run, "base", n)
    ip = {h["name"]: a for a, h in hosts_by_ip(incast_run).items()}
    theirs = 0
    for host in wire(incast_run, "base", n).senders:
        # Wireshark calls a resent segment "out-of-order" when it leaves within its RTT heuristic of the
        # last one (a loss probe or fast retransmit on a sub-ms path): both are the kernel's retransmits
        theirs += tshark_count(
            d / "pcap" / f"{host}.pcap",
            f"(tcp.analysis.retransmission || tcp.analysis.out_of_order) && ip.src=={ip[host]}",
        )
    ours = rows(incast_run)[("base", n)]["retransmits_kernel"]
    print(f"retransmissions at N={n}: kernel {ours}, tshark {theirs}")
    assert ours > 0, "six senders into a 3-packet port must lose packets"
    assert abs(theirs - ours) <= max(3, 0.05 * ours)


def test_the_lost_time_is_the_time_the_client_link_sat_idle(incast_run: Path) -> None:
    """At base N=6 the collapse is idle time: lost_s (duration - the bytes at the link's payload rate)
    is the sum of the client's idle gaps on the wire, nearly all of it while a sender waited for its
    timer (timeout_idle_s); the timer waits cannot outlast the point, and they explain the idle time.
    A round that waited for a 200 ms timer lasts longer than TIMER_WAIT_S; one that did not needs
    6 x 48 KiB at 20 Mbit/s, 0.13 s."""
    n = max(SENDERS)
    r = rows(incast_run)[("base", n)]
    w = wire(incast_run, "base", n)
    idle = sum(w.gaps())
    print(
        f"base N={n}: idle {idle:.3f} s on the wire; lost {r['lost_s']}, idle in stalls {r['timeout_idle_s']}"
    )
    assert idle > 0.2, "six senders into a 3-packet port must wait for a timer"
    assert r["lost_s"] == pytest.approx(idle, abs=0.02, rel=0.1)
    assert 0.8 * idle <= r["timeout_idle_s"] <= idle + 0.001
    assert 0.75 * idle <= r["explained_s"] <= w.duration_s
    slow = sum(1 for a, b in w.rounds if b - a > TIMER_WAIT_S)
    assert r["rounds_with_timeout"] == slow, [round(b - a, 3) for a, b in w.rounds]


def test_the_1ms_rto_cures_the_collapse_but_not_the_losses(incast_run: Path) -> None:
    """At N=6, unconditionally: at the base the senders time out (their kernels) and a sender waited
    a 200 ms timer before resending (its capture), and the client got at most half the link (its
    capture); at a 1 ms minimum RTO the senders still lose packets (their captures against the
    client's), but no sender waits that long before a resend, and the client's goodput is at least
    60 % of the link and twice the base's."""
    n = max(SENDERS)
    rate = client_host(incast_run)["rate_mbit"] * 1e6
    base, fast = wire(incast_run, "base", n), wire(incast_run, "rto_min_ms=1", n)
    base_frac = ROUNDS * n * SRU * 8 / base.duration_s / rate
    fast_frac = ROUNDS * n * SRU * 8 / fast.duration_s / rate
    wait = {line: longest_wait_before_a_resend(incast_run, line, n) for line in LINES}
    lost = {line: wire_loss(incast_run, line, n) for line in LINES}
    print(f"N={n}: goodput base {base_frac:.1%}, 1 ms {fast_frac:.1%}; lost {lost}; longest wait {wait}")
    k = kernel(incast_run, "base", n)
    assert sum(k[h].get("TcpExtTCPTimeouts", 0) for h in base.senders) > 0
    assert wait["base"] >= TIMER_WAIT_S and base_frac <= 0.5
    assert lost["base"] > 0 and lost["rto_min_ms=1"] > 0
    assert wait["rto_min_ms=1"] < TIMER_WAIT_S
    assert fast_frac >= 0.6 and fast_frac >= 2 * base_frac


def test_client_port_drops_are_the_packets_lost_on_the_wire(incast_run: Path) -> None:
    """The client port's qdisc drop counter against the senders' packets that never reached the
    client. Not equal: the userspace switch also loses packets outside the qdisc (the rest of a batch
    a full qdisc refused), and its counter has run up to a quarter above the wire's count."""
    for line in LINES:
        r = rows(incast_run)[(line, max(SENDERS))]
        lost = wire_loss(incast_run, line, max(SENDERS))
        print(f"{line} N={max(SENDERS)}: client port drops {r['client_port_drops']}, lost on the wire {lost}")
        assert lost > 0 and 0 < r["client_port_drops"] <= r["queue_drops"]
        assert abs(r["client_port_drops"] - lost) <= 5 + 0.35 * max(lost, r["client_port_drops"])


def test_a_rebuild_gives_every_row_again(incast_run: Path, tmp_path: Path) -> None:
    """`incast --rebuild` on a copy without incast.json, timeline.json and the report: the same rows,
    field by field, the same goals and the same timeline."""
    assert (incast_run / "report.html").stat().st_size > 5_000
    copy = tmp_path / "run"
    shutil.copytree(
        incast_run, copy, ignore=shutil.ignore_patterns("report.*", "incast.json", "timeline.json")
    )
    proc = run_cli(["incast", "--rebuild", str(copy)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before = json.loads((incast_run / "incast.json").read_text())
    after = json.loads((copy / "incast.json").read_text())
    assert [(r["line"], r["senders"]) for r in after["rows"]] == [
        (r["line"], r["senders"]) for r in before["rows"]
    ]
    for a, b in zip(before["rows"], after["rows"], strict=True):
        assert {k for k in a if a[k] != b.get(k)} == set(), (a["line"], a["senders"])
    assert after["goals"] == before["goals"] and after["timeline"] == before["timeline"]
    assert json.loads((copy / "timeline.json").read_text()) == json.loads(
        (incast_run / "timeline.json").read_text()
    )
    assert (copy / "report.html").stat().st_size > 5_000


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--senders", "0"], "senders must be >= 1"),
        (["--senders", "16"], "16 senders need 17 hosts"),
        (["--senders", "4-2"], "range '4-2' runs backwards"),
        (["--sru", "0"], "sru_bytes (--sru) must be >= 1"),
        (["--cc", "foo"], "invalid choice: 'foo'"),
        (["--lines", "rto_min_ms=0.0001"], "below the kernel's 1 us"),
        (["--rto-min-ms", "0"], "rto_min_ms must be > 0"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_built(
    args: list[str], says: str, tmp_path: Path
) -> None:
    proc = run_cli(["incast", *args, "--results", str(tmp_path)], timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert says in last and last.startswith("incastlab incast: "), proc.stderr
    assert not list(tmp_path.iterdir()), "a refused run writes no folder"
    assert subprocess.run(["ip", "link", "show", "lf1"], capture_output=True).returncode != 0
