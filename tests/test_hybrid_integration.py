"""Hybrid data and pipeline parallelism on a real fabric: hybrid:dp=2:pp=2 on four worker hosts in
the layer splits' run (tests.conftest.layers_run), every packet captured. The pipelines' mean loss
is the unsplit model's on both batches, and the payload bytes host to host in the captures are
traffic_theory x steps within 5 % (counted as tests/test_tp_integration.py says: each host's own
capture, what it sent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from runmodel.job import JobSpec
from runmodel.records import read_jsonl
from tests.conftest import LAYER_STEPS
from tests.test_tp_integration import assert_pair_bytes
from workloads.pipeline import PipeSpec, unsplit_losses

pytestmark = pytest.mark.integration

STEPS, NAME = LAYER_STEPS, "hybrid"  # dp=2 and pp=2 are the defaults: the variant's name is the kind's


def test_mean_loss_is_the_unsplit_models(layers_run: Path) -> None:
    """The two pipelines' last stages (ranks 1 and 3) log their own batch's loss; their mean, step by
    step, and the summary's final loss are the unsplit model's on both batches at once (relative
    1e-5), for the run's seed."""
    sf = RunFolder(layers_run).strategy(NAME)
    job = JobSpec.load(sf.job_file)
    want = unsplit_losses(
        PipeSpec.from_grad_mb(job.grad_mb), job.seed, job.steps, job.batch, job.lr, pipelines=2
    )
    lasts = [
        [d["loss"] for d in read_jsonl(sf.worker_log(r)) if "step" in d and "event" not in d] for r in (1, 3)
    ]
    got = [(a + b) / 2 for a, b in zip(*lasts, strict=True)]
    print(f"pipelines {lasts}; mean {got}; unsplit (seed {job.seed}) {want}")
    assert got == pytest.approx(want, rel=1e-5)
    rows = json.loads((layers_run / "summary.json").read_text())["strategies"]
    assert rows[NAME]["final_loss"] == pytest.approx(want[-1], rel=1e-5)


def test_pair_bytes_match_theory(layers_run: Path) -> None:
    """Within each pipeline batch x hidden x 4 each way, across them each stage's gradient, within
    5 %; the pairs that exchange nothing (0-3, 1-2) under 2 % of the least loaded pair."""
    assert_pair_bytes(layers_run, NAME, STEPS)
