"""The pipeline worker (workloads.pipeline) without a fabric: S real processes on loopback, gloo
point-to-point between them, against the unsplit model trained in this process."""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import config_refusal
from tests.procs import free_port
from workloads.pipeline import PipeJob, PipeSpec, run_stage, unsplit_losses

if TYPE_CHECKING:
    from runmodel.job import JobSpec


def _rank_main(run: Callable[..., None], job: Any, rank: int, master: str, path: str) -> None:
    import torch

    torch.set_num_threads(1)
    with open(path, "w", encoding="utf-8") as f:
        run(job, rank, master, lambda rec: print(json.dumps(rec.to_dict()), file=f, flush=True))


def run_ranks(run: Callable[..., None], job: Any, world: int, tmp: Path) -> list[list[dict]]:
    """`run(job, rank, master, write)` (a module-level function: spawned; `write` takes a typed step
    record) in a process per rank on loopback; each rank's step lines."""
    master = f"127.0.0.1:{free_port()}"
    ctx = mp.get_context("spawn")
    paths = [tmp / f"rank{r}.jsonl" for r in range(world)]
    procs = [ctx.Process(target=_rank_main, args=(run, job, r, master, str(p))) for r, p in enumerate(paths)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * world
    return [[json.loads(x) for x in p.read_text().splitlines()] for p in paths]


def run_pipeline(job: PipeJob, tmp: Path) -> list[list[dict]]:
    """Every stage in a process of its own; each stage's step lines."""
    return run_ranks(run_stage, job, job.stages, tmp)


def test_spec_shapes() -> None:
    """The hidden width puts the whole model's gradient near grad_mb; stages cut it contiguously."""
    spec = PipeSpec.from_grad_mb(0.5)
    assert abs(spec.nparams * 4 - 0.5 * 2**20) < 0.01 * 2**20
    cuts = [spec.stage_layers(s, 3) for s in range(3)]
    assert [list(r) for r in cuts] == [[0, 1], [2, 3, 4], [5, 6, 7]]


@pytest.mark.parametrize(
    ("stages", "micro", "schedule"), [(2, 4, "gpipe"), (3, 4, "1f1b"), (3, 1, "gpipe"), (3, 8, "1f1b")]
)
def test_same_loss_as_unsplit(tmp_path: Path, stages: int, micro: int, schedule: str) -> None:
    """The last stage's losses are the unsplit model's, step by step (relative 1e-5: the
    micro-batches sum the gradients in another order than one full-batch backward), and the
    stage boundaries carry batch x hidden x 4 bytes each way per step."""
    job = PipeJob(stages, micro, schedule, steps=6, grad_mb=0.05, batch=32, lr=0.5, seed=11)
    lines = run_pipeline(job, tmp_path)
    want = unsplit_losses(job.spec, job.seed, job.steps, job.batch, job.lr)
    got = [line["loss"] for line in lines[-1]]
    print(f"pp {stages}x{micro} {schedule}: {got}\nunsplit: {want}")
    assert got == pytest.approx(want, rel=1e-5)
    assert want[-1] < want[0]  # it trains: a test of equal losses must not pass on a frozen model
    per_dir = job.batch * job.spec.hidden * 4
    for s, stage in enumerate(lines):
        assert [line["step"] for line in stage] == list(range(job.steps))
        links = (s > 0) + (s < stages - 1)
        assert {line["bytes_sent"] for line in stage} == {links * per_dir}
        assert {line["bytes_recv"] for line in stage} == {links * per_dir}
        held = micro if schedule == "gpipe" else min(stages - s, micro)
        assert {line["in_flight"] for line in stage} == {held}


@pytest.mark.parametrize(
    ("strategies", "words"),
    [
        (("pp:schedule=zb",), "schedule must be one of gpipe, 1f1b"),
        (("pp:micro=0",), "micro must be a whole number >= 1"),
        (("pp:stages=1",), "stages must be 2..8"),
        (("pp:stages=9",), "stages must be 2..8"),
        (("ring:micro=2",), "micro and schedule are pp and hybrid options"),
        (("pp:micro=5",), "micro (5) must divide the batch (32)"),
        (("pp:stages=3",), "needs 3 worker hosts, have 2"),
    ],
)
def test_bad_pp_options_refused_in_one_line(strategies: tuple[str, ...], words: str) -> None:
    """Refused by the config's validate, before any fabric is built, in one line naming the variant."""
    msg = config_refusal(strategies=strategies, workers=2)
    assert words in msg and strategies[0] in msg, msg


def test_pp_job_runs_the_pipeline_on_the_first_hosts() -> None:
    """The name keeps the options typed; job.json gives the stages, one per the first worker hosts."""
    from runmodel.config import ExperimentConfig
    from runmodel.folder import RunFolder
    from runmodel.job import JobSpec, job_for

    cfg = ExperimentConfig(strategies=("ring", "pp:stages=3:micro=8:schedule=1f1b"))
    cfg.validate()
    spec = cfg.strategy_specs[1]
    assert spec.name == "pp:stages=3:micro=8:schedule=1f1b" and cfg.strategy_specs[0].name == "ring"
    folder = RunFolder(Path("/nonexistent")).strategy(spec.name)
    job = JobSpec.from_dict(job_for(cfg, cfg.plan(), spec, 1, folder).to_dict())
    assert (job.world, job.stages, job.micro, job.schedule) == (3, 3, 8, "1f1b")
    assert [r.host for r in job.ranks] == cfg.worker_hosts[:3] and cfg.n_workers > 3


def test_pp_bound_is_one_boundary_each_way() -> None:
    """A stage boundary of the 0.5 MiB model at batch 32 carries 32 x 144 x 4 = 18432 payload bytes
    each way per step; at 20 Mbit/s in 1514-byte frames of 1448 payload: 18432 x 1514/1448 x 8 /
    20e6 s (the links are full duplex, so forward and backward do not add)."""
    from analysis.bounds import comm_bound_s
    from runmodel.strategy import StrategySpec
    from workloads.pipeline import stage_bytes_theory

    assert stage_bytes_theory(0.5, 32) == 18432
    got = comm_bound_s(StrategySpec.parse("pp:stages=3"), 3, 18432, 20.0)
    assert got == pytest.approx(18432 * 1514 / 1448 * 8 / 20e6)


def job_of(variant: str, **cfg: Any) -> JobSpec:
    """The job.json of `variant` in a run of the default fabric with `cfg`, read back as a rank does."""
    from runmodel.config import ExperimentConfig
    from runmodel.folder import RunFolder
    from runmodel.job import JobSpec, job_for

    config = ExperimentConfig(strategies=(variant,), **cfg)
    config.validate()
    spec = config.strategy_specs[0]
    folder = RunFolder(Path("/nonexistent")).strategy(spec.name)
    return JobSpec.from_dict(job_for(config, config.plan(), spec, 0, folder).to_dict())


def test_traffic_theory_by_hand() -> None:
    """pp:stages=3 of the 0.5 MiB model at batch 32: 32 x 144 x 4 = 18432 bytes each way between
    consecutive stages per step (activations forward, their gradients back), none from 0 to 2."""
    from workloads.pipeline import traffic_theory

    got = traffic_theory(job_of("pp:stages=3", grad_mb=0.5, batch=32))
    assert got == {(0, 1): 18432, (1, 0): 18432, (1, 2): 18432, (2, 1): 18432}
    assert traffic_theory(job_of("pp:stages=2:micro=8", grad_mb=0.5, batch=64)) == {
        (0, 1): 36864,
        (1, 0): 36864,
    }
