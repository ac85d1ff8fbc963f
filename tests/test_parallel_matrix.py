"""The traffic matrix against a strategy's theory, and the report's `parallel` section, on the recorded
run tests/data/run-small (a real 3-worker ring, 3 steps, 0.5 MiB gradient, every host captured).

The theory is a small module of this test's (the ring's rank r -> r + 1, a hand-worked byte count per
step): what is checked is how analysis/matrix.py puts it on the hosts (job.json's ranks), over the steps
run, and against the captures, whose bytes per host pair tshark counts independently."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from analysis import matrix
from analysis.summary import summarize
from report.run import RunView
from report.sections import SECTIONS
from report.sections.parallel import INCAST_FAN_IN, parallel, section, strategy_sentence
from tests.tshark import tshark_host_matrix

FIXTURE = Path(__file__).resolve().parent / "data" / "run-small"
RING_HOSTS = ["h2", "h3", "h4"]  # ranks 0, 1, 2 (job.json)
IP = {"h2": "10.0.0.2", "h3": "10.0.0.3", "h4": "10.0.0.4"}
STEPS = 3
# a ring all-reduce of S = 0.5 MiB over N = 3: each rank sends 2 (N - 1) / N x S = 699050.67 bytes a
# step to the next; 699051 here, worked by hand
PER_STEP = 699051
FAKE = f"""
def traffic_theory(job):
    return {{(r, (r + 1) % job.world): {PER_STEP} for r in range(job.world)}}
"""


@pytest.fixture
def ring_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of run-small whose ring takes its theory from a module of this test."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "ring_theory_fake.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setitem(matrix.THEORY_MODULES, "ring", "ring_theory_fake")
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    yield run
    sys.modules.pop("ring_theory_fake", None)


def tshark_matrix(run: Path) -> dict[str, int]:
    """Unique payload bytes host to host among the ring's hosts, from each receiver's capture."""
    return tshark_host_matrix({h: run / "ring" / "pcap" / f"{h}.pcap" for h in RING_HOSTS}, IP)


def test_matrix_against_theory_and_tshark(ring_run: Path) -> None:
    """The theory on the hosts x 3 steps; each ring cell's error against tshark's bytes; the other
    cells' bytes (rendezvous) apart; bytes per worker per step both ways; the PS has no theory."""
    s = summarize(ring_run).strategies
    ring = s["ring"]
    want = {"h2->h3": 3 * PER_STEP, "h3->h4": 3 * PER_STEP, "h4->h2": 3 * PER_STEP}
    assert ring.traffic_matrix_theory == want
    seen = tshark_matrix(ring_run)
    for key, theory in want.items():
        assert ring.traffic_matrix_error[key] == pytest.approx((seen[key] - theory) / theory, abs=0.002)
    assert ring.traffic_matrix_error_max == max(abs(v) for v in ring.traffic_matrix_error.values())
    assert ring.traffic_matrix_error_max < 0.05  # the ring's chunks, within 5 % of 2 (N - 1) / N x S
    off = {k: v for k, v in seen.items() if k not in want and v}
    assert set(ring.traffic_matrix_off_theory) == set(off)
    for key, n in off.items():
        assert abs(ring.traffic_matrix_off_theory[key] - n) <= max(0.01 * n, 64)
        assert n < 0.01 * PER_STEP  # the rendezvous: small beside a step's chunks
    assert ring.bytes_per_worker_step_theory == pytest.approx(PER_STEP, abs=0.1)
    assert ring.bytes_per_worker_step_pcap == pytest.approx(sum(seen.values()) / (3 * STEPS), rel=1e-3)
    ps = s["ps"]
    assert ps.traffic_matrix_theory == {} and ps.traffic_matrix_error_max is None
    on_disk = json.loads((ring_run / "summary.json").read_text())["strategies"]["ring"]
    assert on_disk["traffic_matrix_theory"] == want


def test_run_without_captures_has_the_theory_only(ring_run: Path) -> None:
    """No host captures: the theory is there, no error figures, and the figure says why."""
    shutil.rmtree(ring_run / "ring" / "pcap")
    (ring_run / "ring" / "capture.json").unlink()
    ring = summarize(ring_run).strategies["ring"]
    assert ring.traffic_matrix_theory and ring.traffic_matrix_error_max is None
    assert ring.traffic_matrix_error == {} and ring.bytes_per_worker_step_pcap is None
    sec = section(RunView.open(ring_run))
    fig = next(b for b in sec.blocks if getattr(b, "key", "") == "traffic_matrix_ring")
    assert fig.data["measured_mb"] is None and fig.data["theory_mb"][0][1] == pytest.approx(PER_STEP / 1e6)
    assert "nothing measured to hold against it (no host captures)" in sec.blocks[2].items[0]


def test_parallel_section(ring_run: Path) -> None:
    """The section is registered (shown only with a model split: not for this ps and ring run); its
    row, sentence and figure show the summary's figures."""
    summarize(ring_run)
    run = RunView.open(ring_run)
    assert parallel in SECTIONS and parallel(run) is None
    sec = section(run)
    table = sec.blocks[0]
    f = run.strategies["ring"].summary
    assert table.cell("ring", "matrix: worst pair's error") == f"{f.traffic_matrix_error_max * 100:.1f} %"
    assert table.cell("ring", "MB per worker per step (theory)") == f"{PER_STEP / 1e6:.3f}"
    assert table.cell("ps", "matrix: worst pair's error") == "–"
    assert "ring: each host sends to one other only" in sec.blocks[1].text
    fig = next(b for b in sec.blocks if getattr(b, "key", "") == "traffic_matrix_ring")
    assert fig.data["hosts"] == RING_HOSTS
    theory = fig.data["theory_mb"]
    assert theory[0][1] == pytest.approx(PER_STEP / 1e6) and theory[1][0] == 0  # h2 -> h3 only
    seen = tshark_matrix(ring_run)
    assert fig.data["measured_mb"][2][0] == pytest.approx(seen["h4->h2"] / STEPS / 1e6, rel=0.01)
    assert fig.png.startswith(b"\x89PNG")


def test_all_to_all_names_the_receivers_incast(ring_run: Path) -> None:
    """An all-to-all over h1..h4 (every host receives from 3): the sentence names each receiver's leaf
    port (plan.json's host links) with its drops and timeouts from the summary."""
    summarize(ring_run)
    run = RunView.open(ring_run)
    f = run.strategies["ring"].summary
    hosts = ["h1", "h2", "h3", "h4"]
    f.traffic_matrix_theory = {f"{a}->{b}": 1000 for a in hosts for b in hosts if a != b}
    links = json.loads((ring_run / "plan.json").read_text())["links"]
    port = {k["b"]: f"{k['a']}-eth{k['a_port']}" for k in links if k["kind"] == "host"}
    f.drops_by_port = {port["h2"]: 17, port["h3"]: 5, "sp1-eth1": 99}
    f.tcp_timeouts_by_receiver = {"h2": 3}
    f.queue_drops_total = 121
    text = strategy_sentence(run, "ring")
    assert INCAST_FAN_IN == 3
    assert f"{port['h2']} (to h2, 3 senders: 17 drops, 3 timeouts)" in text
    assert f"{port['h3']} (to h3, 3 senders: 5 drops, 0 timeouts)" in text
    assert f"{port['h1']} (to h1, 3 senders: 0 drops, 0 timeouts)" in text
    assert "22 of the strategy's 121 queue drops" in text
    assert "every host sends to all 3 others at once" in section(run).blocks[1].text


def test_variants_named_as_the_summary_names_them(ring_run: Path) -> None:
    """A strategy given with an option at its default (ps:shards=1) is the summary's `ps`: its row in
    the report holds the summary's figures, not dashes."""
    cfg = json.loads((ring_run / "config.json").read_text())
    cfg["strategies"] = ["ps:shards=1", "ring"]
    (ring_run / "config.json").write_text(json.dumps(cfg))
    summary = json.loads((ring_run / "summary.json").read_text())["strategies"]
    run = RunView.open(ring_run)
    assert list(run.strategies) == ["ps", "ring"]
    assert run.strategies["ps"].summary.iter_time_s == summary["ps"]["iter_time_s"] is not None
