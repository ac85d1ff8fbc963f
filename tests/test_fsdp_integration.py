"""fsdp and the ring on a real fabric: the splits run (tests.conftest.splits_run), 6 workers.

fsdp trains the ring's model on the ring's data, so its final losses are the ring's; each host
pair's payload bytes in the captures are the pair bytes worked by hand at the run's size
(tests/splits_theory.py, from config.json: not the product's traffic_theory) x steps. Counted as
tests/test_pp_integration.py counts them (its pair_bytes): tshark's unique TCP payload bytes
from each rank host's own capture, what it sent, without the rendezvous store's connections (the
master port, all to rank 0's host); gloo's pair connections and their headers remain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from runmodel.job import JobSpec
from runmodel.records import read_jsonl
from tests.conftest import SPLITS_STEPS, SPLITS_WORKERS
from tests.splits_theory import RunSize, fsdp_pairs, ring_pairs
from tests.test_pp_integration import pair_bytes

pytestmark = pytest.mark.integration

STEPS, WORKERS = SPLITS_STEPS, SPLITS_WORKERS
THEORY = {"ring": ring_pairs, "fsdp": fsdp_pairs}


def _steps(run: Path, name: str) -> list[list[dict]]:
    sf = RunFolder(run).strategy(name)
    return [
        [d for d in read_jsonl(sf.worker_log(r)) if "step" in d and "event" not in d] for r in range(WORKERS)
    ]


def test_fsdp_ends_at_the_rings_loss(splits_run: Path) -> None:
    """Every rank's losses, step by step, are the ring's within relative 1e-5 (the same seed and
    batches; the sums across ranks run in another order), the first to the bit."""
    ring, fsdp = _steps(splits_run, "ring"), _steps(splits_run, "fsdp")
    for r in range(WORKERS):
        a, b = [d["loss"] for d in ring[r]], [d["loss"] for d in fsdp[r]]
        print(f"rank {r}: ring {a}\n        fsdp {b}")
        assert [d["step"] for d in fsdp[r]] == list(range(STEPS))
        assert b == pytest.approx(a, rel=1e-5) and a[0] == b[0]


@pytest.mark.parametrize("name", list(THEORY))
def test_pair_bytes_match_theory(splits_run: Path, name: str) -> None:
    """Each right-neighbour pair carries its hand-worked bytes x steps within 2 % (gloo's message
    headers); the others (the reverse direction: receive-ready notes, the handshakes, the last
    barrier) under 1 % of that. The ranks also logged exactly the hand-worked row and column each
    step, and summary.json's theory matrix is the hand-worked one, to the byte."""
    sf = RunFolder(splits_run).strategy(name)
    job = JobSpec.load(sf.job_file)
    hosts = [job.rank(r).host for r in range(WORKERS)]
    size = RunSize.of_run(splits_run)
    assert (size.workers, size.steps, size.grad_mb) == (WORKERS, STEPS, 0.5), size
    theory = THEORY[name](size)
    assert set(theory) == {(r, (r + 1) % WORKERS) for r in range(WORKERS)}
    got = pair_bytes(splits_run, name)
    print(f"{name}: theory per step {theory}; captured {dict(got)}")
    smallest = min(theory.values())
    for a in range(WORKERS):
        for b in range(WORKERS):
            if a == b:
                continue
            n = got[(hosts[a], hosts[b])]
            if (a, b) in theory:
                want = theory[(a, b)] * STEPS
                assert abs(n - want) <= 0.02 * want, (a, b, n, want)
            else:
                assert n < 0.01 * smallest * STEPS, (a, b, n)
    for r, lines in enumerate(_steps(splits_run, name)):
        row = sum(v for (a, _), v in theory.items() if a == r)
        col = sum(v for (_, b), v in theory.items() if b == r)
        assert {(d["bytes_sent"], d["bytes_recv"]) for d in lines} == {(row, col)}, (name, r)
    summary = json.loads((splits_run / "summary.json").read_text())["strategies"][name]
    assert summary["traffic_matrix_theory"] == {
        f"{hosts[a]}->{hosts[b]}": v * STEPS for (a, b), v in theory.items()
    }


def test_summary_matrix_within_5_percent(splits_run: Path) -> None:
    """summary.json's traffic matrix error (our pcap reader at the receivers, every connection,
    against the product's theory, which test_pair_bytes_match_theory holds to the hand-worked
    bytes): the worst host pair the theory names within 5 % (the issue's bar)."""
    rows = json.loads((splits_run / "summary.json").read_text())["strategies"]
    for name in THEORY:
        row = rows[name]
        print(f"{name}: error {row['traffic_matrix_error']}, off theory {row['traffic_matrix_off_theory']}")
        assert len(row["traffic_matrix_error"]) == WORKERS  # one cell per ring neighbour pair
        assert row["traffic_matrix_error_max"] is not None and row["traffic_matrix_error_max"] <= 0.05, name
