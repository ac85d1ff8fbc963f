"""moe on a real fabric: every host pair's payload against traffic_theory, and the receivers' incast.

The splits run (tests.conftest.splits_run): `moe` on 6 workers (one expert each), 4 steps, batch
512: C = ceil(1.25 x 512 / 6) = 107 rows of the model's 102 floats, so every all-to-all sends
43.7 kB (30 full segments) from every host to each of the 5 others at once, into 20-packet switch
port buffers.

How the bytes are counted: tshark's unique TCP payload (tests/tshark.py: the union of each
direction's sequence ranges, so a retransmission is counted once) in each sender host's own
capture, to each other worker host, without the rendezvous store's connections (the master port).
gloo adds a small header per message, well under the 5 % allowed.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from runmodel.job import JobSpec
from tests.conftest import SPLITS_BATCH, SPLITS_STEPS, SPLITS_WORKERS
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


def test_every_pair_carries_its_theory(splits_run: Path) -> None:
    """Every ordered pair of workers: STEPS x traffic_theory within 5 % (a2a-only pairs and the
    ring's right-neighbour pairs alike); the run finished every step on every rank."""
    from workloads.moe import traffic_theory

    job = _job(splits_run)
    assert job.world == WORKERS and job.steps == STEPS
    sf = RunFolder(splits_run).strategy("moe")
    for r in range(WORKERS):
        lines = [json.loads(x) for x in sf.worker_log(r).read_text().splitlines() if x.strip()]
        assert [d["step"] for d in lines if "step" in d and "event" not in d] == list(range(STEPS))
        assert lines[-1].get("event") == "done"
    theory = traffic_theory(job)
    got = _pair_bytes(splits_run, job)
    ratio = {f"{a}->{b}": round(got[(a, b)] / (STEPS * t), 4) for (a, b), t in sorted(theory.items())}
    print(f"per pair: captured / (theory x {STEPS}): {ratio}")
    assert set(theory) == {(a, b) for a in range(WORKERS) for b in range(WORKERS) if a != b}
    for pair, per_step in theory.items():
        want = STEPS * per_step
        assert abs(got[pair] - want) <= 0.05 * want, (pair, got[pair], want)


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


def _lost_towards(run: Path, job: JobSpec) -> dict[str, int]:
    """Per worker host: packets other workers' captures show sent to it that its own capture never
    saw (each transmission told apart by its IP id), i.e. what the fabric dropped on the way."""
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
        got = seen[h]
        out[h] = sum(max(0, n - got[k]) for k, n in sent.items())
    return out


def test_receivers_incast_at_host_ports(splits_run: Path) -> None:
    """The all-to-all's incast is every receiver's: tc counts drops at the switch ports facing most
    worker hosts (at least 4 of the 6; each receives from 5 at once), a fifth of the run's drops or
    more there, and no port with half of them (a PS's incast puts three quarters on its one port).
    tshark agrees: each host port's drops are packets its host's capture misses of what the others
    sent it. The rest fall at spine ports towards a leaf (the same fan-in, one hop up) and at the
    leaves' uplinks where ECMP hashed too many flows onto one spine: how many varies run to run."""
    job = _job(splits_run)
    plan = RunFolder(splits_run).plan()
    host_port = {r.host: f"{plan.host(r.host).leaf}-eth{plan.host(r.host).port}" for r in job.ranks}
    drops = _tc_drops(splits_run)
    lost = _lost_towards(splits_run, job)
    total = sum(drops.values())
    at_hosts = {h: drops.get(p, 0) for h, p in host_port.items()}
    spines = sum(n for p, n in drops.items() if p.startswith("sp"))
    other = {p: n for p, n in drops.items() if n and p not in host_port.values()}
    print(f"tc drops: total {total}, at worker host ports {at_hosts} ({sum(at_hosts.values())}), at spine "
          f"ports {spines}, elsewhere {other}; tshark: lost towards each host {lost}")  # fmt: skip
    assert sum(1 for n in at_hosts.values() if n > 0) >= 4, at_hosts
    assert sum(at_hosts.values()) >= total / 5, (at_hosts, total)
    assert max(drops.values()) < total / 2, drops
    for h, n in at_hosts.items():
        assert n <= lost[h], (h, n, lost[h])  # a packet dropped on its last hop never reached h
        assert lost[h] > 0 or n == 0
