"""Inputs checked before a run (issue #30): `incastlab check` and `--check`, the root refusal before any
run folder, `report` of an incast folder and of a read-only one (--out), and Ctrl-C in a command that
builds no fabric.

The oracle of a check's refusal is the run command's own line for the same input: the check must print
exactly what `incastlab compare --scenario FILE` (or `incast`) prints, exit 2. The non-root cases run as
the user `nobody` (runuser), since root ignores file permissions and may do what a user may not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, incastlab_cmd, one_line, require, run_cli
from tests.running import Running

DATA = ROOT / "tests" / "data"

# (scenario JSON, the start of the one line both the run and the check must print)
BAD_SCENARIOS = [
    ({"strategies": ["ps:shard=2"]}, "incastlab compare: strategies: 'ps:shard=2': unknown option 'shard'"),
    ({"steps": "5"}, "incastlab compare: steps must be a whole number, got '5'"),
    ({"stepz": 5}, "incastlab compare: scenario"),
    (
        {"faults": ["link-down:lf9-eth1@5s"]},
        "incastlab compare: fault 'link-down:lf9-eth1@5s': no switch port",
    ),
    ({"stragglers": [{"host": "h3", "cpu": 2}]}, "incastlab compare: stragglers: h3: cpu share"),
    ({"client": "h1", "senders": [1, 99]}, "incastlab incast: senders: 99 senders need 100 hosts"),
    ({"client": "h1", "controller": 1.5}, "incastlab incast: scenario s.json: controller must be an object"),
    ({"client": "h1", "lines": ["base", "cc=vegas"]}, "incastlab incast: lines: cc=vegas: cc must be one of"),
]


def as_nobody() -> list[str]:
    """The prefix that runs a command without root: as the user nobody (HOME for matplotlib's cache)
    when the tests run as root, as ourselves otherwise."""
    if os.geteuid() != 0:
        return []
    require(None if shutil.which("runuser") else "runuser not installed")
    return ["runuser", "-u", "nobody", "--", "env", "HOME=/tmp", "MPLCONFIGDIR=/tmp"]


def world_readable(path: Path) -> Path:
    """As root, make `path` (a file or tree under a pytest tmp dir) and its parents readable by nobody."""
    if os.geteuid() != 0:
        return path
    for p in [path, *path.parents]:
        if p == Path("/"):
            break
        p.chmod(p.stat().st_mode | 0o555 if p.is_dir() else p.stat().st_mode | 0o444)
    for sub in path.rglob("*") if path.is_dir() else []:
        sub.chmod(sub.stat().st_mode | (0o555 if sub.is_dir() else 0o444))
    return path


def run_as(prefix: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        prefix + incastlab_cmd() + args, capture_output=True, text=True, timeout=120, cwd=cwd
    )


@pytest.mark.parametrize(("doc", "start"), BAD_SCENARIOS, ids=[s for _d, s in BAD_SCENARIOS])
def test_a_bad_scenario_is_refused_by_check_with_the_runs_own_line(tmp_path, doc, start):
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(doc))
    command = "incast" if "client" in doc else "compare"
    results = tmp_path / "results"
    run = run_cli([command, "--scenario", str(scenario), "--results", str(results)])
    check = run_cli(["check", str(scenario), "--results", str(results)])
    flag = run_cli([command, "--scenario", str(scenario), "--check", "--results", str(results)])
    assert run.returncode == check.returncode == flag.returncode == 2
    assert one_line(check.stderr) == one_line(run.stderr) == one_line(flag.stderr)
    assert one_line(check.stderr).startswith(start)
    assert not results.exists()


def test_check_without_root_refuses_the_issues_typos_and_passes_a_good_file(tmp_path):
    nobody = as_nobody()
    typo, good = tmp_path / "typo.json", tmp_path / "good.json"
    typo.write_text(json.dumps({"strategies": "ps:shard=2,ring", "steps": "5"}))
    good.write_text(
        json.dumps({"strategies": "ps:shards=2,ring", "steps": 5, "faults": ["kill-worker:1@step2"]})
    )
    world_readable(tmp_path)
    bad = run_as(nobody, ["check", str(typo)], tmp_path)
    assert bad.returncode == 2
    assert one_line(bad.stderr).startswith("incastlab compare: strategies: 'ps:shard=2': unknown option")
    steps = run_as(nobody, ["check", str(good), "--steps", "five"], tmp_path)
    assert steps.returncode == 2 and "--steps" in one_line(steps.stderr)
    ok = run_as(nobody, ["check", str(good), "--straggler", "h3:cpu=0.5"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    line = ok.stdout.strip()
    # what the file and flags say, read back: the strategies, 5 steps, one fault, one straggler
    assert line.startswith(f"{good}: ok (ps:shards=2, ring;") and "5 steps" in line
    assert "1 fault(s)" in line and "1 straggler(s)" in line and "need root" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.json", "typo.json"]  # nothing made


@pytest.mark.parametrize(
    ("flags", "start"),
    [
        (["--straggler", "h3:slow_factor=nan"], "incastlab compare: stragglers: h3: slow_every must be >= 0"),
        (["--straggler", "h3:compute_factor=inf"], "incastlab compare: stragglers: h3: slow_every must be"),
        (["--straggler", "h3:link_mbit=inf"], "incastlab compare: stragglers: h3: link_mbit must be > 0"),
        (["--straggler", "h3:mem_mb=inf"], "incastlab compare: stragglers: h3: mem_mb must be >= 6"),
        (["--timeout", "inf"], "incastlab compare: timeout must be a finite number, got inf"),
        (["--run-timeout", "1e999"], "incastlab compare: run_timeout must be a finite number, got inf"),
        (["--compute-ms", "inf"], "incastlab compare: compute_ms must be a finite number"),
    ],
)
def test_an_infinite_or_nan_number_is_refused_as_config_json_cannot_hold_it(tmp_path, flags, start):
    """config.json is strict JSON: a NaN or an infinity the check let through would end the run in a
    traceback when it writes the file (found by tests/test_fuzz_inputs.py)."""
    done = run_cli(["check", "compare", *flags, "--results", str(tmp_path / "r")])
    assert done.returncode == 2 and one_line(done.stderr).startswith(start)
    doc = {"run_timeout": float("inf")}  # json.dumps writes Infinity, which json.loads reads back
    (tmp_path / "s.json").write_text(json.dumps(doc))
    done = run_cli(["check", str(tmp_path / "s.json")])
    assert done.returncode == 2
    assert one_line(done.stderr) == "incastlab compare: run_timeout must be a finite number, got inf"


@pytest.mark.parametrize(
    ("doc", "line"),
    [
        (
            {"fabric": {"delay_ms": float("inf")}},
            "incastlab compare: delay_ms must be a finite number",
        ),
        ({"client": "h1", "timeout": float("inf")}, "incastlab incast: timeout must be a finite number"),
        (
            {"client": "h1", "senders": [1, 2], "fabric": {"loss_pct": -0.0, "delay_ms": 1e999}},
            "incastlab incast: delay_ms must be a finite number",
        ),
    ],
)
def test_an_infinity_is_refused_by_the_fields_own_check(tmp_path, doc, line):
    """params.number refuses an infinity as it refuses NaN, in the words of the field's other checks,
    before a run would die writing config.json (strict JSON)."""
    (tmp_path / "s.json").write_text(json.dumps(doc))
    done = run_cli(["check", str(tmp_path / "s.json"), "--results", str(tmp_path / "r")])
    assert done.returncode == 2 and one_line(done.stderr).startswith(line)


def test_check_of_the_shipped_scenarios_passes_as_root_and_makes_nothing(tmp_path):
    """As root the check also asks the kernel (congestion controls, minimum RTO) as the run does."""
    require(None if os.geteuid() == 0 else "needs root (the kernel checks)")
    for name in ("compare", "mitigate", "incast"):
        done = run_cli(["check", name, "--results", str(tmp_path / "r")])
        assert done.returncode == 0, done.stderr  # another run's fabric (ports, leftovers) is no matter
        assert done.stdout.startswith(str(ROOT / "incastlab" / "scenarios" / f"{name}.json") + ": ok (")
    assert not (tmp_path / "r").exists()


def test_a_run_without_root_is_refused_before_it_makes_a_run_folder(tmp_path):
    nobody = as_nobody()
    results = tmp_path / "results"
    world_readable(tmp_path)
    tmp_path.chmod(0o777)
    for command in ("compare", "incast"):
        done = run_as(nobody, [command, "--results", str(results)], tmp_path)
        assert done.returncode == 2
        assert one_line(done.stderr) == f"incastlab {command}: incastlab needs root to build the network " + (
            "(try: sudo make ...)"
        )
    assert not results.exists()


# -- report -------------------------------------------------------------------------------------------
def copy_fixture(name: str, dest: Path) -> Path:
    run = dest / name
    shutil.copytree(DATA / name, run)
    return run


def test_report_of_an_incast_folder_builds_the_incast_report(tmp_path):
    run = copy_fixture("incast-small", tmp_path)
    (run / "report.html").unlink(missing_ok=True)
    done = run_cli(["report", str(run)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "report.html")
    html = (run / "report.html").read_text()
    cfg = json.loads((run / "config.json").read_text())
    for line in cfg["lines"]:  # every curve of the sweep's config is on the page
        assert line in html
    assert {p.name for p in (run / "figures").glob("*.png")} >= {"incast-curve.png"}
    table = run_cli(["report", str(run), "--json"])
    assert table.returncode == 0, table.stderr
    rows = json.loads(table.stdout)["rows"]  # one row per curve and sender count the config names
    assert sorted((r["line"], r["senders"]) for r in rows) == sorted(
        (line, n) for line in cfg["lines"] for n in cfg["senders"]
    )


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


@pytest.mark.parametrize("fixture", ["run-small", "incast-small"])
def test_report_of_a_read_only_folder_says_so_and_writes_to_out(tmp_path, fixture):
    nobody = as_nobody()
    run = copy_fixture(fixture, tmp_path)
    world_readable(tmp_path)
    for p in [run, *run.rglob("*")]:  # root's folder, read-only for everyone else
        p.chmod(p.stat().st_mode & ~0o222)
    out_root = tmp_path / "out"
    out_root.mkdir(mode=0o777)
    out_root.chmod(0o777)
    before = snapshot(run)
    refused = run_as(nobody, ["report", str(run)], tmp_path)
    assert refused.returncode == 2
    assert one_line(refused.stderr) == (
        f"incastlab report: cannot write the report into {run} (not writable here); give --out DIR"
    )
    done = run_as(nobody, ["report", str(run), "--out", str(out_root / "rep")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out_root / "rep" / "report.html")
    assert (out_root / "rep" / "report.md").stat().st_size > 0
    assert list((out_root / "rep" / "figures").glob("*.png"))
    assert snapshot(run) == before  # the run folder untouched


def test_report_needing_a_summary_in_a_read_only_folder_is_one_line(tmp_path):
    nobody = as_nobody()
    run = copy_fixture("run-small", tmp_path)
    (run / "summary.json").unlink()
    world_readable(tmp_path)
    for p in [run, *run.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    done = run_as(nobody, ["report", str(run), "--out", str(out)], tmp_path)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith(f"incastlab report: cannot write {run}/") and "Permission denied" in line


# -- Ctrl-C in a command that builds no fabric -----------------------------------------------------
def test_ctrl_c_during_analyze_says_interrupted_and_nothing_of_a_fabric():
    """analyze of the same capture thousands of times: its first result on stdout says it is reading,
    then Ctrl-C (SIGINT to its process group) must end it with exit 130 and one line."""
    pcap = str(DATA / "run-small" / "ps" / "pcap" / "h1.pcap")
    run = Running(["analyze", "--json", *[pcap] * 5000])
    with run.killed_on_error():
        run.wait_line(r'^\{"file"', timeout=60)
        run.send(signal.SIGINT)
        code, _ = run.wait_exit(guard=30)
    assert code == 130, run.tail()
    assert one_line(run.text("stderr")) == "incastlab analyze: interrupted"


@pytest.mark.parametrize("typed", ["--bogus=a\nb", "--steps=\x0c", "--strategies=ps\u2028x", "--name=a\rb"])
def test_an_error_quoting_a_line_break_the_user_typed_stays_one_line(tmp_path, typed):
    """argparse quotes unknown arguments as given: a newline in one split the message (found by
    tests/test_fuzz_inputs.py); every such character is now written as its escape."""
    done = run_cli(["check", "compare", typed, "--results", str(tmp_path / "r")])
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("incastlab") and repr(typed.split("=", 1)[1])[1:-1] in line
