"""The run folder: unique names, the latest link, atomic JSON, JSON lines that survive a torn write."""

from __future__ import annotations

import json
from pathlib import Path

from runmodel.folder import RunFolder
from runmodel.records import read_jsonl, write_json


def test_latest_follows_runs_but_not_benchmarks(tmp_path):
    a = RunFolder.create(tmp_path, name="run")
    b = RunFolder.create(tmp_path, name="run")
    assert a.path != b.path and b.path.name == "run-2"
    assert (tmp_path / "latest").resolve() == b.path.resolve()
    RunFolder.create(tmp_path, name="bench-x", link_latest=False)
    assert (tmp_path / "latest").resolve() == b.path.resolve()


def test_write_json_leaves_no_temporary_file(tmp_path):
    write_json(tmp_path / "d" / "summary.json", {"a": 1})
    assert json.loads((tmp_path / "d" / "summary.json").read_text()) == {"a": 1}
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["summary.json"]


def test_a_torn_last_line_is_skipped(tmp_path):
    log = tmp_path / "worker-0.jsonl"
    log.write_text('{"step": 0}\n{"step": 1}\n{"st')
    assert read_jsonl(log) == [{"step": 0}, {"step": 1}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_a_run_folder_under_a_relative_root_is_absolute(tmp_path, monkeypatch):
    """--results results/x: the paths handed to a container's processes (another cwd) must still hold."""
    from runmodel.folder import RunFolder

    monkeypatch.chdir(tmp_path)
    folder = RunFolder.create(Path("results/soak"))
    assert folder.path.is_absolute() and folder.path.parent == tmp_path / "results" / "soak"
    assert (tmp_path / "results" / "soak" / "latest").resolve() == folder.path
