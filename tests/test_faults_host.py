"""Faults a long run meets on a real machine: a controller port another process holds, ovs-vswitchd
dying mid-strategy, the results disk filling during capture, a worker killed by its container's
memory limit.

Each test asserts the exit code, the one line that names the cause, what stays on disk (readable by
`incastlab report`, its status saying it is not complete) and that the host is clean afterwards
(the clean_host fixture, and find_leftovers() right after the run).
"""

from __future__ import annotations

import socket

import pytest

from tests.conftest import run_cli

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
