"""Shared fixtures: root/tool checks, a host guard around every integration test, strict skips in CI.

- `require(reason)`: skip when `reason` is not None (no root, a missing tool, no browser).
- With the environment variable CI=true every skip, from `require`, `pytest.skip`, a skipif
  mark or `pytest.importorskip`, fails the run instead: CI must not go green by running nothing.
- `guarded_host()` / the `clean_host` fixture: refuse to start when the host holds anyone's
  fabric or marked processes (never delete them: another experiment may be running); afterwards
  remove what the test left and fail it if it left anything.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


# -- skips that CI does not accept ---------------------------------------------------------------
def ci_strict() -> bool:
    """True when CI=true (or 1/yes/on): skipping a test then fails the run."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}


def require(reason: str | None) -> None:
    """Skip the test when `reason` (why it cannot run here) is not None; under CI=true that fails."""
    if reason:
        pytest.skip(reason)


def _skip_reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_skip(report: Any) -> None:
    report.outcome = "failed"
    report.longrepr = f"skipped, and CI=true does not allow skips: {_skip_reason(report.longrepr)}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Under CI=true a skipped test (setup or call) is reported as failed; xfail stays xfail."""
    report = yield
    if ci_strict() and report.skipped and not hasattr(report, "wasxfail"):
        _fail_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """Under CI=true a module skipped at import (importorskip, allow_module_level) is an error."""
    report = yield
    if ci_strict() and report.skipped:
        _fail_skip(report)
    return report


# -- the VM test: only when asked ---------------------------------------------------------------
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `vm` boot the Vagrant VM under QEMU (tens of minutes): they run only when the
    marker expression names them (pytest -m vm), and are deselected, not skipped, otherwise."""
    if "vm" in (config.getoption("markexpr") or "").replace("not vm", ""):
        return
    chosen = [i for i in items if i.get_closest_marker("vm") is None]
    if len(chosen) < len(items):
        vm = [i for i in items if i.get_closest_marker("vm")]
        config.hook.pytest_deselected(items=vm)
        items[:] = chosen
        config.stash[_NOT_RUN] = {"vm": len(vm)}


_NOT_RUN = pytest.StashKey[dict[str, int]]()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line naming the marked suites this run left out, so a green run says what it did not test."""
    left = config.stash.get(_NOT_RUN, {})
    if left:
        said = ", ".join(f"{mark} ({n} tests: pytest -m {mark}, see README)" for mark, n in left.items())
        terminalreporter.write_line(f"not run: {said}")


# -- randomness that can be replayed ------------------------------------------------------------
@pytest.fixture
def rng() -> random.Random:
    """A random.Random whose seed is printed (pytest shows it for a failing test).

    INCASTLAB_TEST_SEED=N replays the run that printed seed=N.
    """
    given = os.environ.get("INCASTLAB_TEST_SEED")
    seed = int(given) if given else random.SystemRandom().randrange(2**32)
    print(f"seed={seed} (replay with INCASTLAB_TEST_SEED={seed})")
    return random.Random(seed)


# -- what a capture may miss of its host's timeouts -----------------------------------------------
def timeout_bounds(kernel: int, ps_host: bool) -> tuple[int, int]:
    """(floor, ceiling) for the timeouts a host's own capture finds, given its kernel's count.

    A worker: within one (10 % from ten on). A PS host: its timeouts fire in SACK recovery while its
    own 1000-packet queue drains, and the wire cannot always tell them from recovery's
    retransmissions; eight runs found 26 of its kernel's 34, from half to one more than the kernel
    (docs/RESULTS.md), so at least half and at most two more.
    """
    if ps_host:
        return kernel // 2, kernel + 2
    slack = max(1, int(0.1 * kernel))
    return kernel - slack, kernel + slack


# -- running the command -------------------------------------------------------------------------
def incastlab_cmd() -> list[str]:
    """How to run the `incastlab` command of this checkout."""
    exe = VENV_BIN / "incastlab"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "incastlab.cli"]


def have_network_tools() -> str | None:
    """Why integration tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ovs-vsctl", "mnexec", "tc", "ip", "iperf3"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (make deps)"
    return None


def run_cli(args: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    """Run `incastlab ARGS` from the checkout, capturing its output."""
    return subprocess.run(
        incastlab_cmd() + args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw
    )


def one_line(stderr: str) -> str:
    """The one non-blank line of a refusal on stderr (asserted: one line, no traceback)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    assert "Traceback" not in stderr
    return lines[0]


def config_refusal(**config: Any) -> str:
    """The message with which `ExperimentConfig(**config).validate()` refuses the configuration,
    checked to be one line (a refusal is said before any fabric is built, in one line)."""
    from runmodel.config import ExperimentConfig
    from runmodel.params import ParamError

    with pytest.raises(ParamError) as err:
        ExperimentConfig(**config).validate()
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


# -- the host guard -------------------------------------------------------------------------------
_GUARDS = itertools.count(1)


def _after_guard(token: str, what: str) -> str | None:
    """Remove what the guarded block left; return one line naming it (None if it left nothing).

    The host was clean when the block started, so bridges, veths and QoS rows found now are the
    block's, unless marked processes of another run appeared meanwhile: then only the block's
    own processes (those carrying its marker value) are removed, and nothing of the other run.
    """
    from incastlab.cleanup import find_leftovers, kill_pids, remove, run_pids

    left = find_leftovers()
    if left.empty():
        return None
    ours = set(run_pids(token))
    foreign = [p for p in left.pids if p not in ours]
    if foreign:
        kill_pids(sorted(ours))
        return (
            f"{what} left {left.describe()}; processes {' '.join(map(str, foreign))} are another "
            f"run's, so only the test's own processes were removed"
        )
    remove(left)
    return f"{what} left {left.describe()}"


@contextmanager
def guarded_host(what: str = "the test") -> Iterator[None]:
    """Skip without root and tools; refuse a host that is not clean; fail if `what` left anything.

    Every process started inside the block (in this process or by a child `incastlab`) carries
    the marker value of this block, so what it leaves can be told from another run's.
    """
    require(have_network_tools())
    from incastlab.cleanup import MARKER, find_leftovers

    found = find_leftovers()
    if not found.empty():
        pytest.fail(
            f"refusing to start {what}: the host is not clean ({found.describe()}); another "
            f"experiment may be running (wait for it), or a crashed one needs `sudo incastlab clean`",
            pytrace=False,
        )
    token = f"pytest-{os.getpid()}-{next(_GUARDS)}"
    saved = os.environ.get(MARKER)
    os.environ[MARKER] = token
    try:
        yield
    except BaseException:
        note = _after_guard(token, what)
        if note:
            print(note, file=sys.stderr)
        raise
    finally:
        if saved is None:
            os.environ.pop(MARKER, None)
        else:
            os.environ[MARKER] = saved
    note = _after_guard(token, what)
    if note:
        pytest.fail(note, pytrace=False)


@pytest.fixture
def clean_host():
    """Integration tests start on a clean host and must leave it clean."""
    with guarded_host():
        yield


def run_ok(args: list[str], results: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`incastlab ARGS --results RESULTS`, which must exit 0 (the end of its stderr in the failure)."""
    proc = run_cli([*args, "--results", str(results)], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_in_fresh_folder(
    tmp_path_factory: pytest.TempPathFactory, label: str, args: list[str], timeout: float = 600
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A module or session fixture's one `incastlab ARGS` run on a guarded host, in a fresh results
    folder; its output's end printed for the log; its run folder and the finished process."""
    results = tmp_path_factory.mktemp(label)
    with guarded_host(label):
        proc = run_ok(args, results, timeout)
    print(proc.stdout[-3000:])
    return results / "latest", proc


# One run of the data-parallel splits beside the ring, shared by the fsdp, moe and traffic-matrix
# tests: 6 workers so moe's all-to-all makes every host port an incast receiver, batch 512 so its
# buffers and pp's activations stand well above the connections' own bytes.
SPLITS = ("ring", "fsdp", "pp:stages=3", "moe")
SPLITS_STEPS, SPLITS_WORKERS, SPLITS_BATCH = 4, 6, 512


@pytest.fixture(scope="session")
def splits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The splits' compare run (every host captured): its run folder."""
    args = ["--strategies", ",".join(SPLITS), "--steps", str(SPLITS_STEPS), "--workers",
            str(SPLITS_WORKERS), "--batch", str(SPLITS_BATCH), "--capture", "all"]  # fmt: skip
    return run_in_fresh_folder(tmp_path_factory, "splits", ["compare", *args])[0]


# One run of the layer splits, shared by the tp and hybrid tests: tp and pp on the first 3 of 4
# workers, the hybrid's two 2-stage pipelines on all 4.
LAYER_SPLITS = ("tp:size=3", "pp:stages=3", "hybrid:dp=2:pp=2")
LAYER_STEPS = 4


@pytest.fixture(scope="session")
def layers_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer splits' compare run (every host captured): its run folder."""
    args = ["--strategies", ",".join(LAYER_SPLITS), "--steps", str(LAYER_STEPS), "--workers", "4",
            "--capture", "all"]  # fmt: skip
    return run_in_fresh_folder(tmp_path_factory, "layers", ["compare", *args])[0]


COMPARE_GRAD_MB = 1.0


@pytest.fixture(scope="session")
def compare_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One short default compare run (7 workers, default fabric, every capture), shared by the tests
    that check its figures against tshark and the kernel's counters. 1 MiB gradients, not the default
    0.5: the PS host's own timeouts (spurious, its 7 replies queued behind each other in its qdisc)
    grow with the reply burst; four steps at 0.5 MiB left its kernel 0-3, too few for the capture's
    floor (half of them) to bite, at 1 MiB 9 and 11 (docs/RESULTS.md)."""
    args = ["compare", "--steps", "4", "--grad-mb", str(COMPARE_GRAD_MB)]
    return run_in_fresh_folder(tmp_path_factory, "compare", args, timeout=900)


# The plain ps:shards=2 differs from ps in K alone, so its figures show what K does; the TCP
# settings ride on the colocated variant, between two variants that run with the host's own.
MITIGATE_VARIANTS = "ps,ps:shards=2,ps:shards=2:placement=colocated:rto_min_ms=1:cc=reno,ps:pull=serial,ring"


@pytest.fixture(scope="session")
def mitigate_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One short real run of PS variants (a sharded PS, colocated shards with their own TCP, serial
    replies) and the ring. The uplinks run at 5x the host links, so the only queues that overflow are
    those in front of the PS hosts and the workers: a PS port's drops then do not depend on which
    spine ECMP hashed each flow to (with 20 Mbit/s uplinks two workers of a leaf sharing one spine
    moved the drops into that uplink). Four steps: enough to tell the drops of K = 1 and K = 2 apart."""
    args = ["compare", "--strategies", MITIGATE_VARIANTS, "--workers", "3", "--steps", "4",
            "--uplink-mbit", "100", "--capture", "all"]  # fmt: skip
    return run_in_fresh_folder(tmp_path_factory, "mitigate", args, timeout=900)
