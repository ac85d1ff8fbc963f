"""When a fault is due, and what the injector logs when it cannot do what it was asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from incastlab.faults import FaultInjector
from runmodel.config import ExperimentConfig
from runmodel.fabric import FabricSpec, build_plan
from runmodel.faults import parse_fault
from runmodel.params import ParamError

PLAN = build_plan(FabricSpec())


def test_a_kill_follows_its_own_worker_and_other_faults_the_slowest():
    kill = parse_fault("kill-worker:1@step2", PLAN, 3)
    down = parse_fault("link-down:lf1-eth1@step2", PLAN, 3)
    async_drift = {0: 0, 1: 2, 2: 5}  # async workers apart: rank 1 at its step 2, rank 0 not started
    assert kill.due(0.0, async_drift) and not down.due(0.0, async_drift)
    assert not kill.due(0.0, {0: 7, 1: 1, 2: 7}) and down.due(0.0, {0: 2, 1: 2, 2: 3})
    assert not kill.due(99.0, {}), "steps unknown: a step fault is not due"
    timed = parse_fault("kill-worker:1@1.5s", PLAN, 3)
    assert not timed.due(1.4, {1: 9}) and timed.due(1.5, {})


class _Say(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def _injector(tmp_path: Path, faults: list[str], kill_ok: bool) -> tuple[FaultInjector, list[int], _Say]:
    killed: list[int] = []

    def kill(rank: int) -> bool:
        killed.append(rank)
        return kill_ok

    say = _Say()
    inj = FaultInjector([parse_fault(f, PLAN, 3) for f in faults], tmp_path / "faults.jsonl", kill, None, say)
    inj.start()
    return inj, killed, say


@pytest.mark.parametrize(("kill_ok", "event"), [(True, "fired"), (False, "missed")])
def test_a_kill_that_finds_the_worker_gone_is_logged_as_missed(tmp_path, kill_ok, event):
    inj, killed, say = _injector(tmp_path, ["kill-worker:1@step2"], kill_ok)
    inj.tick({0: 0, 1: 1, 2: 1})
    assert killed == []
    inj.tick({0: 0, 1: 2, 2: 1})
    inj.tick({0: 3, 1: 3, 2: 3})  # fires once
    inj.finish()
    assert killed == [1]
    rows = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(r["event"], r["kind"], r["target"]) for r in rows] == [(event, "kill-worker", "1")]
    assert say == [f"fault: {event} kill-worker 1"]


def test_a_job_refuses_faults_timed_by_step_in_one_line():
    job = {"strategies": ("job",), "job_image": "x", "job_command": ("python3", "t.py")}
    with pytest.raises(ParamError, match=r"'kill-worker:1@step2': a job's faults are timed in seconds"):
        ExperimentConfig(**job, faults=("link-down:lf1-eth1@3s", "kill-worker:1@step2")).validate()
    ExperimentConfig(**job, faults=("kill-worker:1@4s",)).validate()


def test_colocated_shards_beyond_the_workers_are_refused():
    with pytest.raises(ParamError, match="colocated shards must be at most the 3 workers"):
        ExperimentConfig(strategies=("ps:shards=4:placement=colocated",), workers=3).validate()
    ExperimentConfig(strategies=("ps:shards=3:placement=colocated",), workers=3).validate()
