"""Faults a long run meets on a real machine: a controller port another process holds, ovs-vswitchd
dying mid-strategy, the results disk filling during capture, a worker killed by its container's
memory limit.

Each test asserts the exit code, the one line that names the cause, what stays on disk (readable by
`incastlab report`, its status saying it is not complete) and that the host is clean afterwards
(the clean_host fixture, and find_leftovers() right after the run).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from incastlab.cleanup import find_leftovers
from incastlab.session import restart_vswitchd, vswitchd_pid
from tests.conftest import run_cli
from tests.running import Running
from tests.test_containers_integration import token, worker_image  # noqa: F401 - a fixture
from tests.test_faults_integration import assert_readable_incomplete_run, run_dir
from topologies.containers import docker_bin

pytestmark = pytest.mark.integration
SHORT = ["--workers", "3", "--capture", "ps-port"]
# A dead ovs-vswitchd is noticed at once (hostwatch polls every 0.1 s), well inside gloo's 60 s.
SAID_WITHIN_S, EXITED_WITHIN_S = 5, 30


def error_lines(stderr: str, command: str = "compare") -> list[str]:
    """The lines in which the command says why it ended (`incastlab COMMAND: ...`), after checking
    that no traceback came with them. Progress lines and library warnings are not counted."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [ln for ln in stderr.strip().splitlines() if ln.startswith(f"incastlab {command}:")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("taken", ["of", "api"])
def test_a_taken_controller_port_is_refused_before_anything_is_built(clean_host, tmp_path, taken):
    """Another process listens on the OpenFlow or API port: exit 2, one line naming the port, no run
    folder (nothing was started, so there is nothing to report), nothing left on the host."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ports = {"of": free_port(), "api": free_port(), taken: port}
        proc = run_cli(
            ["compare", "--strategies", "ring", "--steps", "2", *SHORT]
            + ["--of-port", str(ports["of"]), "--api-port", str(ports["api"]), "--results", str(tmp_path)],
            timeout=120,
        )
    what = {"of": "OpenFlow", "api": "API"}[taken]
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [
        f"incastlab compare: {what} port 127.0.0.1:{port} is already in use "
        + (
            "(another controller? try `incastlab clean` or --of-port)"
            if taken == "of"
            else "(try --api-port)"
        )
    ], proc.stderr
    assert list(tmp_path.iterdir()) == [], "refused before start: no run folder"
    assert "building fabric" not in proc.stderr


def test_a_killed_ovs_vswitchd_ends_the_run_with_its_cause(clean_host, tmp_path):
    """SIGKILL to ovs-vswitchd at step 1 of a ring (the userspace datapath dies with it): a progress
    line naming ovs-vswitchd and its pid within SAID_WITHIN_S, exit 1 within EXITED_WITHIN_S (not at
    gloo's 60 s timeout, nor the run's) with one error line naming it, the steps before it kept,
    status.json incomplete with that cause, a report that says incomplete, Open vSwitch running
    again (restarted by the run's teardown) and nothing of the fabric left."""
    run = Running(["compare", "--strategies", "ring", "--steps", "40", *SHORT, "--results", str(tmp_path)])
    killed = None
    try:
        with run.killed_on_error():
            run.wait_line(r"ring: step [1-9]", 300)
            killed = vswitchd_pid()
            assert killed is not None, "ovs-vswitchd must run during a run"
            os.kill(killed, signal.SIGKILL)
            run.t_signal, run.signal = time.monotonic(), signal.SIGKILL
            said_at, _ = run.wait_line(
                rf"stopping: ovs-vswitchd \(pid {killed}\) died mid-run", SAID_WITHIN_S
            )
            code, secs = run.wait_exit(guard=EXITED_WITHIN_S)
        restarted = vswitchd_pid()
    finally:
        if vswitchd_pid() is None:  # whatever happened, leave Open vSwitch running for the next test
            restart_vswitchd()
    said = said_at - run.t_signal
    print(f"ovs-vswitchd {killed} killed: said {said:.1f} s, exit {code} {secs:.1f} s later; now {restarted}")
    print(run.tail())
    assert code == 1, run.tail()
    assert said <= SAID_WITHIN_S and secs <= EXITED_WITHIN_S, (said, secs)
    errors = error_lines(run.text("stderr"))
    assert len(errors) == 1 and f"ovs-vswitchd (pid {killed}) died mid-run" in errors[0], errors
    assert restarted is not None and restarted != killed, "the teardown starts Open vSwitch again"
    assert find_leftovers().empty(), f"left {find_leftovers().describe()}"

    folder = run_dir(tmp_path)
    status = json.loads((folder / "ring" / "status.json").read_text())
    assert status["state"] == "incomplete" and "ovs-vswitchd" in status["error"], status
    steps = [r for r in (folder / "ring" / "worker-0.jsonl").read_text().splitlines() if '"step"' in r]
    assert 1 <= len(steps) < 40, "the steps before the fault are kept, and the run did not go on"
    assert_readable_incomplete_run(folder)


@contextmanager
def small_disk(where: Path, mib: int) -> Iterator[Path]:
    """A tmpfs of `mib` MiB mounted at `where` for the block, unmounted after it."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "incastlab-test", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=True)


def fill(path: Path) -> int:
    """Write zeros to `path` until its disk says it is full (ENOSPC), as another program would; the
    bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (bytes(2**20), bytes(4096)):  # a short write, then ENOSPC, at each size
            try:
                while True:
                    written += f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return written


def test_a_full_results_disk_stops_the_run_and_nothing_says_complete(clean_host, tmp_path):
    """The results folder on a 64 MiB tmpfs that another writer fills to the last page at step 1 of a
    ring: exit 1, one line naming the full disk, status.json incomplete with that cause although no new
    file fits any more (written in place), no summary claiming anything; once space is freed,
    `incastlab report` rebuilds a report that says incomplete; nothing of the fabric left."""
    with small_disk(tmp_path / "disk", 64) as disk:
        results = disk / "results"
        run = Running(["compare", "--strategies", "ring", "--steps", "40", *SHORT, "--results", str(results)])
        with run.killed_on_error():
            run.wait_line(r"ring: step [1-9]", 300)
            filled = fill(disk / "filler")
            code, secs = run.wait_exit(guard=120)
        print(f"filled {filled} B: exit {code} {secs:.1f} s after the start\n{run.tail()}")
        assert code == 1, run.tail()
        errors = error_lines(run.text("stderr"))
        assert len(errors) == 1 and "results disk full" in errors[0], errors
        assert find_leftovers().empty(), f"left {find_leftovers().describe()}"

        folder = run_dir(results)
        status = json.loads((folder / "ring" / "status.json").read_text())
        assert status["state"] == "incomplete" and "results disk full" in status["error"], status
        summary = folder / "summary.json"
        assert not summary.exists() or json.loads(summary.read_text())["complete"] is False
        (disk / "filler").unlink()  # the user frees space, then rebuilds the report
        assert_readable_incomplete_run(folder, summary_expected=False)


def test_a_results_disk_already_full_is_refused_before_start(clean_host, tmp_path):
    """A 4 MiB results disk has less than a run needs to write its records: exit 2 and one line before
    the run folder is made or anything built."""
    with small_disk(tmp_path / "disk", 4) as disk:
        proc = run_cli(["compare", "--strategies", "ring", "--steps", "2", *SHORT, "--results", str(disk)])
        assert proc.returncode == 2, proc.stderr
        errors = error_lines(proc.stderr)
        assert len(errors) == 1 and "results disk full" in errors[0] and "of 4 MiB" in errors[0], errors
        assert list(disk.iterdir()) == [] and "building fabric" not in proc.stderr


def test_a_worker_over_its_memory_limit_is_named_oom_killed(worker_image, clean_host, tmp_path):  # noqa: F811
    """h3 (worker 1) in a container limited to 64 MiB: PyTorch does not fit, the kernel's OOM killer
    kills it. The run ends with exit 1 and one line naming the OOM killer, the container and its
    limit, from the kernel's own count; Docker's own record (its `oom` event) agrees; status.json
    says incomplete with that cause."""
    events = subprocess.Popen(
        [docker_bin() or "docker", "events", "--format", "{{.Status}} {{.Actor.Attributes.name}}"]
        + ["--filter", "event=oom", "--filter", f"label=incastlab.run={token()}"],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "INCASTLAB_RUN"},  # not one of the run's
    )
    try:
        proc = run_cli(
            ["compare", "--runtime", "docker", "--strategies", "ring", "--steps", "4", *SHORT]
            + ["--straggler", "h3:mem_mb=64", "--results", str(tmp_path)],
            timeout=600,
        )
    finally:
        events.terminate()
        seen, _ = events.communicate(timeout=10)
    print(f"docker events: {seen!r}\n{proc.stderr[-2500:]}")
    assert proc.returncode == 1, proc.stderr[-2500:]
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, errors
    assert "OOM killer" in errors[0] and "incastlab-h3 (memory limit 64 MiB, oom_kill " in errors[0], errors
    assert "oom incastlab-h3" in seen.splitlines(), "Docker's own record names the same container"
    assert find_leftovers().empty(), f"left {find_leftovers().describe()}"
    status = json.loads((run_dir(tmp_path) / "ring" / "status.json").read_text())
    assert status["state"] == "incomplete" and "OOM killer" in status["error"], status
    assert_readable_incomplete_run(run_dir(tmp_path))


def test_clean_finds_a_crashed_runs_bridge_kept_in_a_stopped_ovs_database(clean_host):
    """A machine killed mid-run and started again: the daemons are down, but OVS's database still
    holds the run's bridge, which would come back with them at the next run and refuse it. `incastlab
    clean` must start OVS to find it, remove it, and leave OVS running."""
    from topologies.fabric import OVS_CTL

    subprocess.run(
        ["ovs-vsctl", "add-br", "lf9", "--", "set", "bridge", "lf9", "datapath_type=netdev"],
        check=True,
        timeout=30,
    )
    subprocess.run([OVS_CTL, "stop"], check=True, capture_output=True, timeout=60)
    assert subprocess.run(["ovs-vsctl", "--timeout=2", "show"], capture_output=True).returncode != 0
    proc = run_cli(["clean"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "bridges lf9" in proc.stdout, proc.stdout
    listed = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    assert listed.returncode == 0 and "lf9" not in listed.stdout.split(), listed
