"""Every file a run writes is strict JSON (no NaN, which JSON.parse and jq refuse), and a job whose
script prints its loss on some ranks only gets the mean of those ranks' losses. No root."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from runmodel.records import JsonlWriter, StepRecord, read_worker_log, write_json, write_jsonl

RUN_SMALL = Path(__file__).resolve().parent / "data" / "run-small"


def strict_load(text: str):
    """json.loads that refuses NaN and Infinity, as JSON.parse does."""

    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def step(rank: int, loss: float | None) -> StepRecord:
    return StepRecord(rank, "job", 1, 10.0, 11.0, 0.1, 0.9, 0.0, 100, 100, loss, 32)


# -- the one writer ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nan_never_reaches_a_file_the_writer_names_its_key(tmp_path, bad):
    doc = {"strategies": {"job": {"steps": 3, "first_loss": bad}}}
    with pytest.raises(ValueError, match=r"summary\.json: strategies\.job\.first_loss is not a number"):
        write_json(tmp_path / "summary.json", doc)
    assert not (tmp_path / "summary.json").exists()
    with pytest.raises(ValueError, match=r"rows\.jsonl: x\.0 is not"):
        write_jsonl(tmp_path / "rows.jsonl", [{"x": [1]}, {"x": [bad]}])
    with JsonlWriter(tmp_path / "log.jsonl") as log, pytest.raises(ValueError, match=r"log\.jsonl: t"):
        log.write({"t": bad})


def test_a_missing_loss_is_null_and_a_diverged_one_too(tmp_path):
    with JsonlWriter(tmp_path / "worker-0.jsonl") as log:
        for loss in (2.5, None, math.nan, math.inf):
            log.write(step(0, loss))
    rows = [strict_load(line) for line in (tmp_path / "worker-0.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows] == [2.5, None, None, None]


def test_an_older_log_with_nan_losses_reads_as_none(tmp_path):
    """A job run before this change wrote `"loss": NaN` for ranks that printed none."""
    log = tmp_path / "worker-1.jsonl"
    log.write_text(json.dumps(step(1, 2.0).to_dict() | {"loss": math.nan}) + "\n")
    assert read_worker_log(log, 1).steps[0].loss is None


def test_a_job_step_without_a_printed_loss_has_none():
    from analysis.rhythm import loss_for, losses_from_output

    losses = losses_from_output("step 1 loss 2.5\nstep 2 loss 1e999\n")
    assert [loss_for(k, losses) for k in (1, 2, 3)] == [2.5, None, None]


# -- the summary of a job whose rank 0 alone prints its loss --------------------------------------------
def rank0_only(run: Path, strategy: str, missing: str) -> list[float]:
    """Rewrite the strategy's worker logs as a DDP script that prints its loss on rank 0 only leaves
    them (`missing`: how the other ranks' loss is written: 'NaN', an older run, or 'null'); returns
    rank 0's losses in step order, read from its file (the oracle)."""
    folder = run / strategy
    rank0 = []
    for log in sorted(folder.glob("worker-*.jsonl")):
        rank = int(log.stem.split("-")[1])
        lines = []
        for line in log.read_text().splitlines():
            row = json.loads(line)
            if "step" in row and "event" not in row:
                if rank == 0:
                    rank0.append((row["step"], row["loss"]))
                    lines.append(line)
                    continue
                row.pop("loss")
                line = json.dumps(row)[:-1] + f', "loss": {missing}}}'
            lines.append(line)
        log.write_text("\n".join(lines) + "\n")
    return [loss for _, loss in sorted(rank0)]


@pytest.mark.parametrize("missing", ["NaN", "null"])
def test_summary_of_a_rank0_loss_job_is_strict_json_with_rank0s_loss(tmp_path, missing):
    from analysis.summary import summarize
    from report.console import comparison_table

    run = tmp_path / "run"
    shutil.copytree(RUN_SMALL, run)
    want = rank0_only(run, "ps", missing)
    summary = summarize(run)
    doc = strict_load((run / "summary.json").read_text())
    ps = doc["strategies"]["ps"]
    assert ps["first_loss"] == pytest.approx(want[0], abs=1e-5)
    assert ps["final_loss"] == pytest.approx(want[-1], abs=1e-5)
    row = next(ln for ln in comparison_table(summary).splitlines() if ln.startswith("ps "))
    assert "nan" not in row.lower() and f"{want[-1]:.4f}" in row
    for path in run.rglob("*.json"):  # every JSON file the summary (re)wrote
        strict_load(path.read_text())


def test_the_reports_loss_series_skips_ranks_without_a_loss():
    from report.series import loss_series

    recs = {0: [step(0, 2.0)], 1: [step(1, None)], 2: [step(2, 4.0)]}
    series = loss_series(recs, t0=10.0)
    assert series == {"steps": [1], "loss": [3.0], "t": [1.0]}
    assert loss_series({1: [step(1, None)]}, t0=0.0)["steps"] == []
