"""Faults a long run meets on a real machine: a controller port another process holds, ovs-vswitchd
dying mid-strategy, the results disk filling during capture, a worker killed by its container's
memory limit.

Each test asserts the exit code, the one line that names the cause, what stays on disk (readable by
`incastlab report`, its status saying it is not complete) and that the host is clean afterwards
(the clean_host fixture, and find_leftovers() right after the run).
"""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest

from incastlab.cleanup import find_leftovers
from incastlab.session import restart_vswitchd, vswitchd_pid
from tests.conftest import run_cli
from tests.running import Running
from tests.test_faults_integration import assert_readable_incomplete_run, run_dir

pytestmark = pytest.mark.integration
SHORT = ["--workers", "3", "--capture", "ps-port"]


def error_lines(stderr: str) -> list[str]:
    """stderr without the progress lines (`[incastlab HH:MM:SS] ...`): what the run says went wrong."""
    return [ln for ln in stderr.strip().splitlines() if ln and not ln.startswith("[incastlab ")]


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
    """SIGKILL to ovs-vswitchd at step 1 of a ring (the userspace datapath dies with it): exit 1 at
    once (not at the run's timeout), one line naming ovs-vswitchd and its pid, the steps before it
    kept, status.json failed with that cause, a report that says incomplete, Open vSwitch running
    again (restarted by the run's teardown) and nothing of the fabric left."""
    run = Running(["compare", "--strategies", "ring", "--steps", "40", *SHORT, "--results", str(tmp_path)])
    killed = None
    try:
        with run.killed_on_error():
            run.wait_line(r"ring: step [1-9]", 300)
            killed = vswitchd_pid()
            assert killed is not None, "ovs-vswitchd must run during a run"
            os.kill(killed, signal.SIGKILL)
            code, secs = run.wait_exit(guard=120)
        restarted = vswitchd_pid()
    finally:
        if vswitchd_pid() is None:  # whatever happened, leave Open vSwitch running for the next test
            restart_vswitchd()
    print(f"ovs-vswitchd {killed} killed: exit {code} {secs:.1f} s later; now {restarted}\n{run.tail()}")
    assert code == 1, run.tail()
    errors = error_lines(run.text("stderr"))
    assert len(errors) == 1 and f"ovs-vswitchd (pid {killed}) died mid-run" in errors[0], errors
    assert restarted is not None and restarted != killed, "the teardown starts Open vSwitch again"
    assert find_leftovers().empty(), f"left {find_leftovers().describe()}"

    folder = run_dir(tmp_path)
    status = json.loads((folder / "ring" / "status.json").read_text())
    assert status["state"] == "failed" and "ovs-vswitchd" in status["error"], status
    steps = [r for r in (folder / "ring" / "worker-0.jsonl").read_text().splitlines() if '"step"' in r]
    assert 1 <= len(steps) < 40, "the steps before the fault are kept, and the run did not go on"
    assert_readable_incomplete_run(folder)
