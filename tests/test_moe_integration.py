"""moe on a real fabric: every host pair's payload against bytes worked by hand at the run's size,
and the receivers' incast as the captures count it.

The splits run (tests.conftest.splits_run): `moe` on 6 workers (one expert each), 4 steps, batch
512, 0.5 MiB: width 102, C = ceil(1.25 x 512 / 6) = 107 rows of 102 floats, so every all-to-all
sends 43.7 kB (30 full segments) from every host to each of the 5 others at once, into 20-packet
switch port buffers. The expected bytes come from tests/splits_theory.py (moe_pairs), from the
run's config.json, not from the product's traffic_theory.

How the bytes are counted: tshark's unique TCP payload (tests/tshark.py: the union of each
direction's sequence ranges, so a retransmission is counted once) in each sender host's own
capture, to each other worker host, without the rendezvous store's connections (the master port).
gloo adds a small header per message: under 1 % here, 2 % allowed.

How the losses are counted: tc's drop counter counts the queue's refusals, not lost packets, on
OVS's userspace datapath (docs/DESIGN.md, "The fidelity verdict"), so a receiver's losses are the
captures': what the other hosts' captures show sent to it that its own never saw.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from runmodel.job import JobSpec
from tests.conftest import SPLITS_BATCH, SPLITS_STEPS, SPLITS_WORKERS
from tests.splits_theory import MoeSize, RunSize, moe_pairs, moe_size
from tests.tshark import tshark_fields, tshark_unique_bytes

pytestmark = pytest.mark.integration

STEPS, WORKERS, BATCH = SPLITS_STEPS, SPLITS_WORKERS, SPLITS_BATCH


def _job(run: Path) -> JobSpec:
    return JobSpec.load(RunFolder(run).strategy("moe").job_file)


def _pair_bytes(run: Path, job: JobSpec) -> dict[tuple[int, int], int]:
    """Unique payload bytes rank to rank over the run, from each sender's own capture."""
    sf = RunFolder(run).strategy("moe")
    plan = RunFolder(run).plan()
    rank_of = {plan.host(r.host).ip: r.rank for r in job.ranks}
    out: dict[tuple[int, int], int] = collections.Counter()
    for r in job.ranks:
        pcap = sf.pcap(r.host)
        store = {
            row[0] for row in tshark_fields(pcap, "tcp.stream", display=f"tcp.port == {job.master_port}")
        }
        for (stream, src, _, dst), n in tshark_unique_bytes(pcap).items():
            if stream not in store and rank_of.get(src) == r.rank and dst in rank_of:
                out[(r.rank, rank_of[dst])] += n
    return out


def test_every_pair_carries_its_hand_worked_bytes(splits_run: Path) -> None:
    """Every ordered pair of workers: STEPS x the pair bytes worked by hand within 2 % (a2a-only
    pairs and the ring's right-neighbour pairs alike); the run finished every step on every rank;
    summary.json's theory matrix is the same hand-worked bytes, to the byte."""
    size = RunSize.of_run(splits_run)
    assert (size.workers, size.steps, size.batch) == (WORKERS, STEPS, BATCH), size
    assert moe_size(size) == MoeSize(hidden=102, experts=6, per_rank=1, capacity=107, dense=5008)
    job = _job(splits_run)
    sf = RunFolder(splits_run).strategy("moe")
    for r in range(WORKERS):
        lines = [json.loads(x) for x in sf.worker_log(r).read_text().splitlines() if x.strip()]
        assert [d["step"] for d in lines if "step" in d and "event" not in d] == list(range(STEPS))
        assert lines[-1].get("event") == "done"
    want = moe_pairs(size)
    got = _pair_bytes(splits_run, job)
    ratio = {f"{a}->{b}": round(got[(a, b)] / (STEPS * t), 4) for (a, b), t in sorted(want.items())}
    print(f"per pair: captured / (hand-worked x {STEPS}): {ratio}")
    assert len(want) == WORKERS * (WORKERS - 1)
    for pair, per_step in want.items():
        assert abs(got[pair] - STEPS * per_step) <= 0.02 * STEPS * per_step, (pair, got[pair], per_step)
    theory = json.loads((splits_run / "summary.json").read_text())["strategies"]["moe"][
        "traffic_matrix_theory"
    ]
    assert theory == {f"{job.rank(a).host}->{job.rank(b).host}": STEPS * n for (a, b), n in want.items()}


def _tc_drops(run: Path) -> dict[str, int]:
    """Each switch port's qdisc drops over the run: the tc counter's last sample minus its first."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    path = RunFolder(run).strategy("moe").queue_depth_file
    for line in path.read_text().splitlines():
        d = json.loads(line)
        first.setdefault(d["port"], d["drops"])
        last[d["port"]] = d["drops"]
    return {p: last[p] - first[p] for p in last}


def _lost_towards(run: Path, job: JobSpec) -> dict[str, tuple[int, int]]:
    """Per worker host: (packets, data segments) that other workers' captures show sent to it and
    its own capture never saw (each transmission told apart by its IP id, each copy counted), i.e.
    what the fabric lost on the way."""
    sf = RunFolder(run).strategy("moe")
    plan = RunFolder(run).plan()
    ip = {r.host: plan.host(r.host).ip for r in job.ranks}
    fields = ("ip.src", "ip.dst", "ip.id", "tcp.srcport", "tcp.seq_raw", "tcp.len")
    seen = {h: collections.Counter(map(tuple, tshark_fields(sf.pcap(h), *fields, display="tcp"))) for h in ip}
    out = {}
    for h, addr in ip.items():
        sent: collections.Counter = collections.Counter()
        for s, rows in seen.items():
            if s != h:
                sent.update({k: n for k, n in rows.items() if k[0] == ip[s] and k[1] == addr})
        lost = {k: n - seen[h][k] for k, n in sent.items() if n > seen[h][k]}
        out[h] = (sum(lost.values()), sum(n for k, n in lost.items() if int(k[5] or 0) > 0))
    return out


def _report_receivers(run: Path) -> dict[str, tuple[str, int]]:
    """The receivers report.md names in moe's sentence: {host: (its leaf port, drops named)}."""
    md = (run / "report.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("- moe: ") and "receivers' incast" in x)
    found = re.findall(r"(\S+) \(to (\S+), \d+ senders: (\d+) drops?,", line)
    return {h: (port, int(n)) for port, h, n in found}


def test_receivers_lose_packets_as_the_captures_count(splits_run: Path) -> None:
    """The all-to-all's incast is every receiver's, in the captures: at least 4 of the 6 worker
    hosts lost data segments on the way to them (each receives from 5 at once), and none lost half
    of all of them (a PS's incast puts nearly all on its one host). The summary's fabric_drops_pcap
    is the sum of those losses (within 2 % or 2). The report names every worker host as a receiver
    with its port's drops; each is at most what that host's capture missed (a packet dropped on its
    last hop never reached it). tc apart: its drops at the worker host ports are a fifth of its
    total or more, no port with half, the rest at spine ports towards a leaf (the same fan-in, one
    hop up) and at the leaves' uplinks where ECMP hashed too many flows onto one spine."""
    job = _job(splits_run)
    plan = RunFolder(splits_run).plan()
    host_port = {r.host: f"{plan.host(r.host).leaf}-eth{plan.host(r.host).port}" for r in job.ranks}
    lost = _lost_towards(splits_run, job)
    named = _report_receivers(splits_run)
    drops = _tc_drops(splits_run)
    total, data = sum(drops.values()), {h: d for h, (_, d) in lost.items()}
    at_hosts = {h: drops.get(p, 0) for h, p in host_port.items()}
    print(f"captures: lost towards each host (packets, data segments) {lost}; the report names {named}; "
          f"tc: total {total}, at worker host ports {at_hosts}, elsewhere "
          f"{ {p: n for p, n in drops.items() if n and p not in host_port.values()} }")  # fmt: skip
    assert sum(1 for n in data.values() if n > 0) >= 4, data
    assert max(data.values()) < sum(data.values()) / 2, data
    fig = json.loads((splits_run / "summary.json").read_text())["strategies"]["moe"]["fabric_drops_pcap"]
    assert abs(fig - sum(data.values())) <= max(2, 0.02 * sum(data.values())), (fig, data)
    assert set(named) == set(host_port), (named, host_port)
    for h, (port, n) in named.items():
        assert port == host_port[h], (h, port)
        assert n <= lost[h][0], (h, n, lost[h])
    assert sum(at_hosts.values()) >= total / 5, (at_hosts, total)
    assert max(drops.values()) < total / 2, drops
