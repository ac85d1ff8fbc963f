"""load_run: a run folder read from Python as the run model's dataclasses, checked against the files'
plain JSON; and README's snippet runs as written. No root."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from incastlab import load_run
from runmodel.config import ExperimentConfig, Provenance
from runmodel.params import ParamError
from runmodel.records import StepRecord
from runmodel.summary import RunSummary, StrategySummary

ROOT = Path(__file__).resolve().parent.parent
RUN_SMALL = ROOT / "tests" / "data" / "run-small"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_run_reads_as_the_run_models_dataclasses():
    config = json.loads((RUN_SMALL / "config.json").read_text())
    summary = json.loads((RUN_SMALL / "summary.json").read_text())
    run = load_run(RUN_SMALL)
    assert isinstance(run.config, ExperimentConfig) and isinstance(run.summary, RunSummary)
    assert run.config.steps == config["steps"] and run.config.worker_hosts == config["worker_hosts"]
    assert run.summary.schema == summary["schema"]
    assert (run.provenance is None) == ("provenance" not in config)
    assert run.environment is not None and run.environment.kernel == config["environment"]["kernel"]
    assert list(run.strategies) == config["strategies"] and run.problems == []
    for name, s in run.strategies.items():
        assert isinstance(s.summary, StrategySummary)
        assert s.summary.iter_time_s == summary["strategies"][name]["iter_time_s"]
        assert s.summary.iter_time_p90_s == summary["strategies"][name].get("iter_time_p90_s")
        state = json.loads((RUN_SMALL / name / "status.json").read_text())["state"]
        assert s.status is not None and s.status.state == state
        raw = [r for log in sorted((RUN_SMALL / name).glob("worker-*.jsonl")) for r in jsonl(log)]
        raw = sorted((r for r in raw if "event" not in r), key=lambda r: (r["step"], r["rank"]))
        assert all(isinstance(r, StepRecord) for r in s.steps)
        assert [(r.step, r.rank, r.loss) for r in s.steps] == [(r["step"], r["rank"], r["loss"]) for r in raw]
        assert sorted(s.workers) == sorted({r["rank"] for r in raw})


def test_an_older_run_reads_without_the_newer_fields(tmp_path):
    """A schema-2 folder: its real config.json (tests/data/config-schema2.json) and a summary without
    the fields added since (provenance, the p10/p90 spread)."""
    run_dir = tmp_path / "run"
    shutil.copytree(RUN_SMALL, run_dir)
    shutil.copy(ROOT / "tests" / "data" / "config-schema2.json", run_dir / "config.json")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["schema"] = 2
    for fig in summary["strategies"].values():
        for key in [k for k in fig if "_p10_" in k or "_p90_" in k]:
            del fig[key]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    run = load_run(run_dir)
    assert run.provenance is None and run.summary is not None and run.summary.schema == 2
    ps = run.strategies["ps"].summary
    assert ps.iter_time_p90_s is None and ps.iter_time_s == summary["strategies"]["ps"]["iter_time_s"]


def test_a_run_with_provenance_gives_it(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(RUN_SMALL, run_dir)
    doc = json.loads((run_dir / "config.json").read_text())
    doc["provenance"] = {
        "version": "9.9",
        "commit": "ab" * 20,
        "dirty": False,
        "command": ["incastlab", "compare"],
    }
    doc["schema"] = 4
    (run_dir / "config.json").write_text(json.dumps(doc))
    (run_dir / "summary.json").unlink()
    run = load_run(run_dir)
    assert run.provenance == Provenance("9.9", "ab" * 20, False, ("incastlab", "compare"), "")
    assert run.summary is None and run.strategies["ps"].summary == StrategySummary()
    assert len(run.strategies["ps"].steps) > 0  # the records are there without a summary


def test_no_run_folder_is_one_line(tmp_path):
    with pytest.raises(ParamError, match="no readable config.json") as err:
        load_run(tmp_path / "missing")
    assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps({"schema": "incastlab.incast/1", "kind": "incast"}))
    with pytest.raises(ParamError, match="incast sweep"):
        load_run(tmp_path)


def test_the_readme_snippet_runs_as_written():
    text = (ROOT / "README.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "load_run" in b)
    assert len(code.strip().splitlines()) <= 5, "README shows it in five lines"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code.replace('"results/latest"', repr(str(RUN_SMALL))), {})
    lines = out.getvalue().splitlines()
    config = json.loads((RUN_SMALL / "config.json").read_text())
    ps = json.loads((RUN_SMALL / "summary.json").read_text())["strategies"]["ps"]
    steps = sum(
        len([r for r in jsonl(p) if "event" not in r]) for p in (RUN_SMALL / "ps").glob("worker-*.jsonl")
    )
    assert lines[0].startswith(f"{config['steps']} "), lines
    assert lines[1] == f"ps {ps['state']} {ps['iter_time_s']} {ps.get('iter_time_p90_s')} {steps}", lines
