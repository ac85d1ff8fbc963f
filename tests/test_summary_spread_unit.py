"""Every median over steps in summary.json has its spread beside it (p10 and p90), checked against
numpy's percentiles of the worker logs read as plain JSON. No root."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.summary import spread, summarize
from runmodel.summary import StrategySummary, definitions_markdown

RUN_SMALL = Path(__file__).resolve().parent / "data" / "run-small"
MEDIANS = ("iter_time", "comm_time", "compute_time", "wait_time")


def raw_steps(strategy: Path) -> list[dict]:
    rows = []
    for log in strategy.glob("worker-*.jsonl"):
        rows += [r for r in map(json.loads, log.read_text().splitlines()) if "event" not in r]
    return rows


def oracle(values: list[float]) -> tuple[float, float, float]:
    p10, med, p90 = np.percentile(values, [10, 50, 90])  # numpy's default: linear between closest ranks
    return float(p10), float(med), float(p90)


def test_every_median_over_steps_is_declared_with_its_p10_and_p90():
    names = {f for f in StrategySummary.__dataclass_fields__}
    for m in MEDIANS:
        assert {f"{m}_s", f"{m}_p10_s", f"{m}_p90_s"} <= names, m
        assert f"`{m}_p90_s`" in definitions_markdown()


@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_summary_spread_matches_numpys_percentiles_of_the_logs(tmp_path, strategy):
    run = tmp_path / "run"
    shutil.copytree(RUN_SMALL, run)
    summarize(run)
    fig = json.loads((run / "summary.json").read_text())["strategies"][strategy]
    rows = raw_steps(run / strategy)
    per_step: dict[int, float] = {}
    for r in rows:  # a step costs the job its slowest worker's t_end - t_start
        per_step[r["step"]] = max(per_step.get(r["step"], 0.0), r["t_end"] - r["t_start"])
    want = {
        "iter_time": oracle(list(per_step.values())),
        "comm_time": oracle([r["comm_s"] for r in rows]),
        "compute_time": oracle([r["compute_s"] for r in rows]),
        "wait_time": oracle([r["wait_s"] for r in rows]),
    }
    for m, (p10, med, p90) in want.items():
        got = (fig[f"{m}_p10_s"], fig[f"{m}_s"], fig[f"{m}_p90_s"])
        assert got == pytest.approx((p10, med, p90), abs=6e-5), m
        assert got[0] <= got[1] <= got[2], m
    assert fig["iter_time_p90_s"] > fig["iter_time_p10_s"], "run-small's steps differ: a spread to see"


def test_spread_of_few_values_by_hand():
    assert spread([0.5]) == (0.5, 0.5, 0.5)
    assert spread([1.0, 2.0]) == (1.1, 1.5, 1.9)  # 1 + 0.1 x (2 - 1), 1 + 0.9 x (2 - 1)
    assert spread([3.0, 1.0, 2.0, 10.0, 4.0]) == (1.4, 3.0, 7.6)  # ranks 0.4 and 3.6 of 1,2,3,4,10
