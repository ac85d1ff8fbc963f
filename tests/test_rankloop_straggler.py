"""Every kind on workloads.rankloop's one loop honours a straggler, in its own step records: each kind's
ranks as real processes on loopback (`python -m MODULE --job job.json --rank R`, the job.json a run's
config writes, its stragglers in it), rank 1's emulated accelerator 3 times slower (compute_factor=3)
and rank 0's every 2nd step 2 times slower (slow_every=2, slow_factor=2); and the registry's contract.

Issue #37: before this loop pp and tp never read either knob (rank 1 computed 1.00x the others)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from runmodel.config import ExperimentConfig, Straggler
from runmodel.folder import RunFolder
from runmodel.job import JobSpec, job_for
from runmodel.records import StepRecord
from runmodel.strategy import KINDS, WORKER_MODULES
from tests.procs import free_port

COMPUTE_MS = 100.0  # large beside the tiny model's real CPU time, so compute_s is mostly the accelerator
FACTOR, EVERY, SLOW = 3.0, 2, 2.0
STEPS = 5  # step 0 (torch's first passes) is left out of every ratio; slow steps 1 and 3
TOLERANCE = 0.15

# variant, worker hosts: every kind on the fewest ranks that show a straggler beside a plain rank
VARIANTS = [
    ("pp:micro=1", 2),
    ("tp", 3),
    ("hybrid:dp=2:pp=2:micro=1", 4),
    ("moe", 3),
    ("fsdp", 3),
]


def straggler_job(variant: str, workers: int, tmp: Path) -> JobSpec:
    """The job.json of `variant` with rank 1 (compute_factor) and rank 0 (slow_every) slowed, as
    job_for writes it from a run's config, moved to loopback (logs in `tmp`)."""
    base = ExperimentConfig(strategies=(variant,), workers=workers)
    base.validate()
    h0, h1 = base.worker_hosts[:2]
    cfg = dataclasses.replace(
        base,
        steps=STEPS,
        grad_mb=0.05,
        batch=16,
        compute_ms=COMPUTE_MS,
        timeout=60,
        stragglers=(
            Straggler(h1, compute_factor=FACTOR),
            Straggler(h0, slow_every=EVERY, slow_factor=SLOW),
        ),
    )
    cfg.validate()
    spec = cfg.strategy_specs[0]
    job = job_for(cfg, cfg.plan(), spec, 0, RunFolder(tmp).strategy(spec.name))
    ranks = tuple(
        dataclasses.replace(r, ifname="lo", log=str(tmp / f"rank{r.rank}.jsonl")) for r in job.ranks
    )
    return dataclasses.replace(job, ranks=ranks, master_addr="127.0.0.1", master_port=free_port())


def run_ranks(job: JobSpec, module: str, tmp: Path) -> list[list[dict]]:
    """Every rank of `job` as `python -m module`; each rank's step lines."""
    path = tmp / "job.json"
    job.write(path)
    cmd = [sys.executable, "-m", module, "--job", str(path), "--rank"]
    procs = [subprocess.Popen([*cmd, str(r)], stderr=subprocess.PIPE, text=True) for r in range(job.world)]
    errs = [p.communicate(timeout=170)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * job.world, errs
    lines = [[json.loads(x) for x in Path(r.log).read_text().splitlines()] for r in job.ranks]
    return [[d for d in rank if "step" in d and "event" not in d] for rank in lines]


@pytest.mark.processes
@pytest.mark.parametrize(("variant", "workers"), VARIANTS, ids=[v for v, _ in VARIANTS])
def test_straggler_in_the_kinds_own_step_records(tmp_path: Path, variant: str, workers: int) -> None:
    """Rank 1's compute_s is 3x rank 0's on rank 0's plain steps (within 15 %), on every step alike;
    rank 0's compute_s on the steps slow_every names (1, 3) is 2x its plain steps' (2, 4), within
    15 %; both in the kind's own typed step records (their kind's fields there)."""
    job = straggler_job(variant, workers, tmp_path)
    assert (job.ranks[0].slow_every, job.ranks[1].compute_factor) == (EVERY, FACTOR)  # job.json has them
    lines = run_ranks(job, WORKER_MODULES[job.strategy], tmp_path)
    for rank in lines:
        assert [d["step"] for d in rank] == list(range(STEPS))
        assert {d["strategy"] for d in rank} == {job.strategy}
    c0 = [d["compute_s"] for d in lines[0]]
    c1 = [d["compute_s"] for d in lines[1]]
    print(f"{variant}: rank 0 compute_s {[round(c, 3) for c in c0]}, rank 1 {[round(c, 3) for c in c1]}")
    plain0 = statistics.median(c0[s] for s in (2, 4))
    slow0 = statistics.median(c0[s] for s in (1, 3))
    assert slow0 / plain0 == pytest.approx(SLOW, rel=TOLERANCE), (c0, "slow_every")
    later1 = c1[1:]
    assert statistics.median(later1) / plain0 == pytest.approx(FACTOR, rel=TOLERANCE), (c1, c0)
    assert max(later1) / min(later1) < 1 + TOLERANCE, (c1, "rank 1 has no slow steps")


def test_the_registry_names_every_rank_kind_once() -> None:
    """Every kind whose ranks run a module of their own has one RankStrategy in the registry, whose
    module is the one its ranks run, and which declares its kind, options, record type and theory."""
    from workloads.rankloop import REGISTRY, RankStrategy, Training, strategy_class

    assert set(REGISTRY) == set(WORKER_MODULES) and set(REGISTRY) <= set(KINDS)
    for kind in REGISTRY:
        cls = strategy_class(kind)
        assert cls.__module__ == WORKER_MODULES[kind], kind
        assert issubclass(cls, RankStrategy) and cls.kind == kind
        assert issubclass(cls.Options, Training) and dataclasses.is_dataclass(cls.Options), kind
        assert issubclass(cls.Record, StepRecord) and cls.Record is not StepRecord, kind
        assert cls.traffic_theory is not RankStrategy.traffic_theory, kind
    with pytest.raises(ValueError, match="no rank strategy for 'ring'"):
        strategy_class("ring")


@pytest.mark.parametrize(("variant", "workers"), VARIANTS, ids=[v for v, _ in VARIANTS])
def test_options_from_job_json_in_one_place(variant: str, workers: int, tmp_path: Path) -> None:
    """Each kind's options come from job.json by its class's `options`, and need as many ranks as
    the job has; its module's traffic theory is the class's."""
    from workloads.rankloop import strategy_class

    job = straggler_job(variant, workers, tmp_path)
    cls = strategy_class(job.strategy)
    opts = cls.options(job)
    assert isinstance(opts, cls.Options) and cls.world_of(opts) == job.world
    assert (opts.steps, opts.compute_ms, opts.batch) == (STEPS, COMPUTE_MS, 16)
    module = sys.modules[cls.__module__]
    assert cls.traffic_theory(job) == module.traffic_theory(job)


@pytest.mark.parametrize("knob", ["compute_factor=3", "slow_every=2,slow_factor=2"])
def test_a_knob_a_kind_cannot_honour_is_refused_in_one_line(knob: str) -> None:
    """A `job` runs the user's command: a straggler's compute_factor or slow_every would reach no step
    of it, so the config refuses them in one line naming the host, the field and the strategy; the
    fields that act from outside the ranks (cpu) it takes."""
    from tests.conftest import config_refusal

    job = {"job_command": ("python3", "train.py"), "job_image": "img", "workers": 3}
    msg = config_refusal(strategies=("ring", "job"), stragglers=(Straggler.parse(f"h3:{knob}"),), **job)
    assert msg.startswith(f"stragglers: h3: {knob.split('=')[0]} cannot slow job: its own command"), msg
    ExperimentConfig(strategies=("job",), stragglers=(Straggler.parse("h3:cpu=0.5"),), **job).validate()
