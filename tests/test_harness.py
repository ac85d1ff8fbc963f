"""The test harness itself: skips fail under CI=true, the host guard, the polling helper."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, guarded_host, have_network_tools, require
from tests.waiting import WaitTimeout, wait_for

# -- CI=true: a skip fails the run -----------------------------------------------------------------
SKIPPING = {  # how a test can skip -> a tiny test module doing it (plus one passing test)
    "pytest.skip": """
        import pytest
        def test_skips():
            pytest.skip("no frobnicator here")
    """,
    "skipif mark": """
        import pytest
        @pytest.mark.skipif(True, reason="no frobnicator here")
        def test_skips():
            pass
    """,
    "fixture": """
        import pytest
        @pytest.fixture
        def frobnicator():
            pytest.skip("no frobnicator here")
        def test_skips(frobnicator):
            pass
    """,
    "require()": """
        from tests.conftest import require
        def test_skips():
            require("no frobnicator here")
    """,
    "module level": """
        import pytest
        pytest.skip("no frobnicator here", allow_module_level=True)
        def test_skips():
            pass
    """,
    "importorskip": """
        import pytest
        pytest.importorskip("no_frobnicator_here")
        def test_skips():
            pass
    """,
}


def run_tiny(tmp_path: Path, source: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    """pytest in a subprocess on a generated test file and a passing one, with our conftest as plugin."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent(source))
    (tmp_path / "test_other.py").write_text("def test_passes():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-rA",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("how", list(SKIPPING))
def test_a_skip_fails_the_run_under_ci(tmp_path: Path, how: str) -> None:
    proc = run_tiny(tmp_path, SKIPPING[how], ci="true")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "CI=true does not allow skips" in out and "frobnicator" in out, out
    assert " skipped" not in out.splitlines()[-1], out


@pytest.mark.parametrize("how", list(SKIPPING))
@pytest.mark.parametrize("ci", [None, "false", ""])
def test_a_skip_is_a_skip_without_ci(tmp_path: Path, how: str, ci: str | None) -> None:
    proc = run_tiny(tmp_path, SKIPPING[how], ci=ci)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "skipped" in out.splitlines()[-1] and "failed" not in out.splitlines()[-1], out
    assert "CI=true" not in out


def test_xfail_stays_xfail_under_ci(tmp_path: Path) -> None:
    proc = run_tiny(
        tmp_path,
        """
        import pytest
        @pytest.mark.xfail(reason="known")
        def test_known():
            assert False
    """,
        ci="true",
    )
    assert proc.returncode == 0 and "1 xfailed" in proc.stdout, proc.stdout + proc.stderr


def test_under_ci_the_real_suite_cannot_skip_for_lack_of_root(tmp_path: Path) -> None:
    """The fixture every integration test uses goes through require(): under CI it fails."""
    proc = run_tiny(
        tmp_path,
        """
        import os
        from tests.conftest import guarded_host
        def test_guarded():
            os.environ["PATH"] = "/nonexistent"  # no ovs-vsctl: have_network_tools() says why
            with guarded_host():
                pass
    """,
        ci="true",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "CI=true does not allow skips" in out, out


# -- the host guard ----------------------------------------------------------------------------
def sleeper(marker: str | None) -> subprocess.Popen[bytes]:
    """A process carrying the run marker `marker` (or this process's environment, if None)."""
    from incastlab.cleanup import MARKER

    env = dict(os.environ) if marker is None else dict(os.environ, **{MARKER: marker})
    proc = subprocess.Popen(["sleep", "120"], env=env)
    wait_for(
        lambda: Path(f"/proc/{proc.pid}/environ").read_bytes().count(b"INCASTLAB_RUN="),
        5,
        "the sleeper to run",
    )
    return proc


def reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.integration
def test_the_guard_refuses_another_runs_processes_and_leaves_them_alone() -> None:
    require(have_network_tools())
    other = sleeper("someone-else")
    try:
        with pytest.raises(pytest.fail.Exception) as refused:
            with guarded_host("the probe"):
                raise AssertionError("the guarded block must not run")
        msg = str(refused.value)
        assert "\n" not in msg and "refusing to start the probe" in msg and str(other.pid) in msg, msg
        assert other.poll() is None, "the guard must not touch another run's process"
    finally:
        reap(other)


@pytest.mark.integration
def test_the_guard_removes_what_the_test_left_and_fails_it() -> None:
    require(have_network_tools())
    with pytest.raises(pytest.fail.Exception) as failed:
        with guarded_host("the probe"):
            mine = sleeper(None)  # inherits the guard's marker, as every process of the test does
    try:
        msg = str(failed.value)
        assert "the probe left processes" in msg and str(mine.pid) in msg, msg
        wait_for(lambda: mine.poll() is not None, 10, "the left-behind process to be removed")
    finally:
        reap(mine)


@pytest.mark.integration
def test_the_guard_spares_a_run_that_started_during_the_test() -> None:
    require(have_network_tools())
    mine = other = None
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            with guarded_host("the probe"):
                mine = sleeper(None)
                other = sleeper("someone-else")
        msg = str(failed.value)
        assert str(other.pid) in msg and "another run's" in msg, msg
        wait_for(lambda: mine.poll() is not None, 10, "the test's own process to be removed")
        assert other.poll() is None, "another run's process must survive"
    finally:
        for p in (mine, other):
            if p is not None:
                reap(p)


# -- wait_for ----------------------------------------------------------------------------------
def test_wait_for_returns_the_value_and_names_what_timed_out() -> None:
    t0 = time.monotonic()
    assert wait_for(lambda: time.monotonic() - t0 > 0.2 and "done", 5, "0.2 s") == "done"
    with pytest.raises(WaitTimeout, match=r"after 0.3 s waiting for the impossible \(last: 0\)"):
        wait_for(lambda: 0, 0.3, "the impossible")
