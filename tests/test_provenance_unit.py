"""What a script can rely on about a run: `incastlab --version`, the provenance in config.json and the
run's --name; checked against git and pyproject.toml themselves. No root, no fabric."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from incastlab import version
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent


def git(where: Path, *args: str) -> str:
    """A git command's stdout (the oracle: git itself, not incastlab's reading of it)."""
    return subprocess.run(
        ["git", "-c", f"safe.directory={where}", "-C", str(where), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture
def scratch_repo(tmp_path, monkeypatch):
    """A one-commit git repository standing in for the checkout."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "add", "a.py")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    monkeypatch.setattr(version, "ROOT", repo.resolve())
    version.checkout.cache_clear()
    yield repo
    version.checkout.cache_clear()


# -- incastlab --version -----------------------------------------------------------------------------
def test_version_prints_the_package_version_and_this_checkouts_commit():
    proc = run_cli(["--version"], timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    head = git(ROOT, "rev-parse", "HEAD")
    assert lines[0].startswith(f"incastlab {pyproject_version()} (commit {head[:12]}"), lines[0]
    dirty = bool(git(ROOT, "status", "--porcelain", "--untracked-files=no"))
    assert lines[0].endswith(", dirty)" if dirty else f"{head[:12]})"), lines[0]


def test_a_changed_tracked_file_makes_the_checkout_dirty_an_untracked_one_does_not(scratch_repo):
    head = git(scratch_repo, "rev-parse", "HEAD")
    assert version.checkout() == version.Checkout(head, False)
    (scratch_repo / "notes.txt").write_text("scratch")  # untracked
    version.checkout.cache_clear()
    assert version.checkout() == version.Checkout(head, False)
    (scratch_repo / "a.py").write_text("x = 2\n")
    version.checkout.cache_clear()
    assert version.checkout() == version.Checkout(head, True)
    assert version.version_line().endswith(f"(commit {head[:12]}, dirty)")


def test_a_package_inside_another_repository_is_no_checkout_of_its_own(scratch_repo, monkeypatch):
    inner = scratch_repo / "site-packages"
    inner.mkdir()
    monkeypatch.setattr(version, "ROOT", inner.resolve())
    assert version.checkout() == version.Checkout(None, None)
    assert version.version_line() == f"incastlab {pyproject_version()} (no git checkout)"


# -- config.json's provenance --------------------------------------------------------------------------
def start_run(monkeypatch, argv: list[str]) -> Path:
    """Run `incastlab ARGV` up to the fabric, which is faked to fail at once (no root): the run folder
    and its config.json are made as a real run makes them. Returns the run folder."""
    from contextlib import contextmanager

    from incastlab import cli, session
    from incastlab.follow import ExperimentError

    @contextmanager
    def no_fabric(*_a, **_kw):
        raise ExperimentError("no fabric in a unit test")
        yield

    monkeypatch.setattr(session, "fabric_session", no_fabric)
    # ports and leftovers are other tests' business (test_faults_host, test_containers_integration):
    # a fabric may be up beside this test
    monkeypatch.setattr(session.ControllerProcess, "check_ports", lambda _self: None)
    monkeypatch.setattr(session, "refuse_leftovers", lambda: None)
    monkeypatch.setattr(cli, "finish", lambda *_a, **_kw: None)
    assert cli._main(argv) == 1
    return next(p for p in (Path(argv[argv.index("--results") + 1])).iterdir() if p.name != "latest")


def test_config_json_records_the_version_commit_and_command_line(tmp_path, monkeypatch):
    import json

    from runmodel import SCHEMA
    from runmodel.config import ExperimentConfig, Provenance

    argv = ["compare", "--steps", "2", "--workers", "3", "--runtime", "netns", "--results", str(tmp_path)]
    monkeypatch.chdir(tmp_path)
    doc = json.loads((start_run(monkeypatch, argv) / "config.json").read_text())
    assert doc["schema"] == SCHEMA == 4
    prov = doc["provenance"]
    assert prov["command"] == ["incastlab", *argv] and prov["cwd"] == str(tmp_path)
    assert prov["version"] == pyproject_version()
    assert prov["commit"] == git(ROOT, "rev-parse", "HEAD")
    assert prov["dirty"] is bool(git(ROOT, "status", "--porcelain", "--untracked-files=no"))
    assert ExperimentConfig.from_dict(doc).steps == 2  # a reader of the config skips it
    assert Provenance.from_dict(prov).command[1:4] == ("compare", "--steps", "2")


def test_an_older_config_without_provenance_still_reads(tmp_path):
    """tests/data/config-schema2.json: the config.json a schema-2 run wrote (run-small's, before 4)."""
    import json

    from runmodel.config import Provenance
    from runmodel.folder import RunFolder

    old = ROOT / "tests" / "data" / "config-schema2.json"
    doc = json.loads(old.read_text())
    assert doc["schema"] == 2 and "provenance" not in doc
    (tmp_path / "config.json").write_text(old.read_text())
    assert RunFolder(tmp_path).config().strategies == tuple(doc["strategies"])
    assert Provenance.from_dict(doc.get("provenance")) is None


def start_incast(monkeypatch, argv: list[str]) -> Path:
    """Run `incastlab incast ARGV` up to the fabric, faked to fail at once (no root): config.json is
    written as a real sweep writes it. Returns the run folder."""
    from contextlib import contextmanager

    from incastlab import cli, session

    @contextmanager
    def no_fabric(*_a, **_kw):
        raise session.SessionError("no fabric in a unit test")
        yield

    monkeypatch.setattr(session, "fabric_session", no_fabric)
    # ports and leftovers are other tests' business (test_faults_host, test_containers_integration):
    # a fabric may be up beside this test
    monkeypatch.setattr(session.ControllerProcess, "check_ports", lambda _self: None)
    monkeypatch.setattr(session, "refuse_leftovers", lambda: None)
    assert cli._main(["incast", *argv]) == 2
    return next(p for p in (Path(argv[argv.index("--results") + 1])).iterdir() if p.name != "latest")


def test_an_incast_config_json_records_its_provenance_and_loads_back(tmp_path, monkeypatch):
    import json

    from runmodel.config import Provenance
    from runmodel.incast import IncastConfig, IncastFolder

    argv = ["--senders", "1,2", "--rounds", "3", "--lines", "base", "--results", str(tmp_path)]
    monkeypatch.chdir(tmp_path)
    made = start_incast(monkeypatch, argv)
    doc = json.loads((made / "config.json").read_text())
    prov = doc["provenance"]
    assert prov["command"] == ["incastlab", "incast", *argv] and prov["cwd"] == str(tmp_path)
    assert prov["version"] == pyproject_version()
    assert prov["commit"] == git(ROOT, "rev-parse", "HEAD")
    assert prov["dirty"] is bool(git(ROOT, "status", "--porcelain", "--untracked-files=no"))
    cfg = IncastFolder(made).incast_config()  # a reader of the config skips the field
    assert (cfg.senders, cfg.rounds, cfg.lines) == ((1, 2), 3, ("base",))
    assert IncastConfig.from_dict(cfg.to_dict()) == cfg
    assert Provenance.from_dict(prov).command[1:3] == ("incast", "--senders")


def test_an_older_incast_folder_without_provenance_still_loads():
    """tests/data/incast-small: a sweep written before config.json had a provenance."""
    import json

    from runmodel.incast import IncastFolder

    old = ROOT / "tests" / "data" / "incast-small"
    doc = json.loads((old / "config.json").read_text())
    assert "provenance" not in doc
    cfg = IncastFolder(old).incast_config()
    assert list(cfg.senders) == doc["senders"] and cfg.rounds == doc["rounds"]


# -- --name ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, needle",
    [
        ("a/b", "not a path"),
        ("../up", "not a path"),
        ("a\\b", "not a path"),
        ("", "give a name"),
        ("x" * 65, "at most 64"),
        ("two words", "letters, digits"),
        ("-flag", "letters, digits"),
        (".hidden", "letters, digits"),
    ],
)
@pytest.mark.parametrize("command", ["compare", "incast"])
def test_a_bad_run_name_is_refused_in_one_line_before_anything_is_made(tmp_path, command, name, needle):
    results = tmp_path / "results"
    proc = run_cli([command, "--results", str(results), f"--name={name}"], timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--name" in lines[0] and needle in lines[0], proc.stderr
    assert not results.exists(), "a folder was made for a refused name"


def test_the_run_name_ends_the_folders_name(tmp_path, monkeypatch):
    import re

    argv = ["compare", "--runtime", "netns", "--results", str(tmp_path), "--name", "v2.run_a-1"]
    made = start_run(monkeypatch, argv)
    assert made.parent == tmp_path and re.fullmatch(r"\d{8}-\d{6}-v2\.run_a-1", made.name), made.name
    assert (tmp_path / "latest").resolve() == made.resolve()


def test_the_run_name_ends_the_incast_folders_name(tmp_path, monkeypatch):
    import re

    argv = ["--senders", "1", "--lines", "base", "--results", str(tmp_path), "--name", "check"]
    made = start_incast(monkeypatch, argv)
    assert made.parent == tmp_path and re.fullmatch(r"\d{8}-\d{6}-check", made.name), made.name
    assert (tmp_path / "latest").resolve() == made.resolve()


def test_a_named_folder_that_exists_gets_a_number(tmp_path):
    from runmodel.folder import RunFolder

    a = RunFolder.create(tmp_path, name="20250101-000000", label="x")
    b = RunFolder.create(tmp_path, name="20250101-000000", label="x")
    assert (a.path.name, b.path.name) == ("20250101-000000-x", "20250101-000000-x-2")
