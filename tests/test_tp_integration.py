"""Tensor parallelism (tp) beside pp on a real fabric: both on the first three worker hosts of the
layer splits' run (tests.conftest.layers_run), every packet captured. Each strategy's final loss
is the unsplit model's, and the payload bytes host to host in the captures are its traffic_theory
x steps (within 5 %).

How the bytes are counted (test_pp_integration.pair_bytes): in each rank host's own capture, the
unique TCP payload bytes (tshark's sequence ranges, so a retransmission counts once) it sent to
another rank host, without the rendezvous store's connections (the master port). What remains is
gloo's: the messages (tensor bytes plus a header each) and the receivers' ready-to-receive notes."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from runmodel.job import JobSpec
from runmodel.records import read_jsonl
from tests.conftest import LAYER_STEPS
from tests.test_pp_integration import pair_bytes
from workloads.pipeline import PipeSpec, unsplit_losses

pytestmark = pytest.mark.integration

STEPS = LAYER_STEPS
VARIANTS = ("tp:size=3", "pp:stages=3")  # of tests.conftest.layers_run


def _job(run: Path, name: str) -> JobSpec:
    return JobSpec.load(RunFolder(run).strategy(name).job_file)


def test_losses_are_the_unsplit_models(layers_run: Path) -> None:
    """Every tp rank's and pp's last stage's losses, step by step, are pipeline.unsplit_losses for the
    run's seed, data and learning rate (relative 1e-5: the splits sum in another order), and the
    summary's final loss is the unsplit model's last."""
    rows = json.loads((layers_run / "summary.json").read_text())["strategies"]
    for name in VARIANTS:
        job = _job(layers_run, name)
        want = unsplit_losses(PipeSpec.from_grad_mb(job.grad_mb), job.seed, job.steps, job.batch, job.lr)
        sf = RunFolder(layers_run).strategy(name)
        ranks = range(job.world) if job.strategy == "tp" else [job.world - 1]
        for r in ranks:
            got = [d["loss"] for d in read_jsonl(sf.worker_log(r)) if "step" in d and "event" not in d]
            print(f"{name} rank {r}: {got}; unsplit (seed {job.seed}): {want}")
            assert got == pytest.approx(want, rel=1e-5), (name, r)
        assert rows[name]["final_loss"] == pytest.approx(want[-1], rel=1e-5), name


def assert_pair_bytes(run: Path, name: str, steps: int) -> None:
    """Each ordered host pair's captured payload is the strategy's traffic_theory x steps within 5 %
    (gloo's headers and notes on top); a pair the theory gives nothing carries under 2 % of the
    least loaded pair: connections, goodbyes and gloo's ready-to-receive notes, some 50 bytes per
    message the other way."""
    job = _job(run, name)
    theory = importlib.import_module(job.spec.module).traffic_theory(job)
    hosts = [r.host for r in job.ranks]
    got = pair_bytes(run, name)
    print(f"{name}: theory per step {theory}; captured over {steps} steps {dict(got)}")
    least = min(theory.values()) * steps
    for a in range(job.world):
        for b in range(job.world):
            if a == b:
                continue
            want, seen = theory.get((a, b), 0) * steps, got[(hosts[a], hosts[b])]
            if want:
                assert abs(seen - want) <= 0.05 * want, (name, a, b, seen, want)
            else:
                assert seen < 0.02 * least, (name, a, b, seen, least)


@pytest.mark.parametrize("name", VARIANTS)
def test_pair_bytes_match_theory(layers_run: Path, name: str) -> None:
    """assert_pair_bytes: the theory's cells within 5 %, the rest (tp: a rank to its left
    neighbour, which gets 24 ring messages a step; pp: stages 0 and 2) under 2 % of a loaded one."""
    assert_pair_bytes(layers_run, name, STEPS)
