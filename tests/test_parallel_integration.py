"""The traffic matrix against each strategy's theory on a real fabric: the splits run
(tests.conftest.splits_run: ring, fsdp, a 3-stage pipeline and moe, 6 workers, every host captured,
batch 512).

Oracles: tshark's unique payload bytes host to host in each receiver's capture (every connection,
as traffic_matrix_pcap counts them) for the measured side; for the theory, the ring's 2 (N - 1) / N x
S and a stage boundary's batch x hidden x 4 each way, worked by hand, and moe's own traffic_theory
(its unit tests hold it against hand-worked buffers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from runmodel.job import JobSpec
from tests.conftest import SPLITS, SPLITS_BATCH, SPLITS_STEPS, SPLITS_WORKERS
from tests.tshark import tshark_host_matrix

pytestmark = pytest.mark.integration

STEPS, WORKERS, BATCH, STRATEGIES = SPLITS_STEPS, SPLITS_WORKERS, SPLITS_BATCH, SPLITS
GRAD = 131074 * 4  # the 0.5 MiB model: hidden 3048, 32 x 3048 + 3048 + 3048 x 10 + 10 float32
HIDDEN = 144  # the pp model's width at 0.5 MiB (tests/test_pp_integration.py works it out)


def tshark_matrix(run: Path, name: str) -> dict[str, int]:
    """Unique payload bytes host to host among the strategy's hosts, from each receiver's capture."""
    sf = RunFolder(run).strategy(name)
    job = JobSpec.load(sf.job_file)
    plan = RunFolder(run).plan()
    hosts = [r.host for r in job.ranks]
    return tshark_host_matrix({h: sf.pcap(h) for h in hosts}, {h: plan.host(h).ip for h in hosts})


def test_matrix_errors_are_tsharks(splits_run: Path) -> None:
    """Every theory cell's error is tshark's bytes against the theory (within 0.5 %), every strategy's
    worst pair within 5 % of its theory, and the rest (off the theory) small beside a step's bytes."""
    rows = json.loads((splits_run / "summary.json").read_text())["strategies"]
    for name in STRATEGIES:
        f = rows[name]
        seen = tshark_matrix(splits_run, name)
        print(name, f["traffic_matrix_error"], f["traffic_matrix_off_theory"])
        assert f["traffic_matrix_theory"], name
        for key, theory in f["traffic_matrix_theory"].items():
            assert f["traffic_matrix_error"][key] == pytest.approx((seen[key] - theory) / theory, abs=0.005)
        assert f["traffic_matrix_error_max"] < 0.05, name
        assert sum(f["tcp_timeouts_by_receiver"].values()) == f["tcp_timeouts_pcap"], name  # each once
        step = max(f["traffic_matrix_theory"].values()) / STEPS
        assert all(v < 0.1 * step for v in f["traffic_matrix_off_theory"].values()), name


def test_theories_by_hand(splits_run: Path) -> None:
    """The ring's cells: 2 (N - 1) / N x S a step to the next rank (within the chunks' rounding); the
    pipeline's: batch x hidden x 4 each way between consecutive stages and nothing else."""
    rows = json.loads((splits_run / "summary.json").read_text())["strategies"]
    ring = rows["ring"]["traffic_matrix_theory"]
    assert len(ring) == WORKERS
    for v in ring.values():
        assert v / STEPS == pytest.approx(2 * (WORKERS - 1) / WORKERS * GRAD, abs=16)
    hosts = [
        r["host"]
        for r in json.loads(RunFolder(splits_run).strategy("pp:stages=3").job_file.read_text())["ranks"]
    ]
    want = {
        f"{hosts[s + d]}->{hosts[s + 1 - d]}": STEPS * BATCH * HIDDEN * 4 for s in range(2) for d in (0, 1)
    }
    assert rows["pp:stages=3"]["traffic_matrix_theory"] == want


def test_report_names_moe_receivers(splits_run: Path) -> None:
    """The report's parallel section: a row per strategy, a heatmap per strategy, and moe's receivers'
    host ports (fan-in: every other worker) with the drops summary.json counted at each."""
    md = (splits_run / "report.md").read_text()
    assert "## Parallel strategies: who sent what where" in md
    for name in STRATEGIES:
        key = name.replace(":", "_").replace("=", "_")
        assert (splits_run / "figures" / f"traffic_matrix_{key}.png").stat().st_size > 1000
    f = json.loads((splits_run / "summary.json").read_text())["strategies"]["moe"]
    plan = RunFolder(splits_run).plan()
    job = JobSpec.load(RunFolder(splits_run).strategy("moe").job_file)
    for r in job.ranks:
        port = plan.host(r.host).leaf_port
        drops = f["drops_by_port"].get(port, 0)
        assert f"{port} (to {r.host}, {WORKERS - 1} senders: {drops} drop" in md
