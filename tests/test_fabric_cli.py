"""The fabric's command line as a user drives it: bad input, ports in use, Ctrl-C, kills, clean."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import urllib.request
from pathlib import Path

import pytest

from incastlab.cleanup import find_leftovers
from tests.conftest import run_cli
from tests.running import Running, assert_exit_130_soon, interrupt_at
from tests.test_controller_http import listen_addresses

pytestmark = pytest.mark.integration


# -- bad input: refused before anything is built ---------------------------------------------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--spines", "0"], "spines"),
        (["--leaves", "0"], "leaves"),
        (["--host-mbit", "-1"], "host_mbit"),
        (["--uplink-mbit", "0"], "uplink_mbit"),
        (["--buffer", "0"], "buffer"),
        (["--ps-host", "h99"], "h99"),
        (["--api-port", "70000"], "api-port"),
    ],
)
def test_bad_fabric_parameters_are_one_line_errors(clean_host, args, needle):
    proc = run_cli(["fabric", "--no-calibrate"] + args, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_api_port_in_use_is_refused(clean_host):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_cli(["fabric", "--no-calibrate", "--api-port", str(port)], timeout=60)
    assert proc.returncode == 2 and "already in use" in proc.stderr
    errors = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("[incastlab ")]  # progress
    assert errors == [f"incastlab fabric: API port 127.0.0.1:{port} is already in use (try --api-port)"]


def test_missing_open_vswitch_is_named(clean_host):
    env = dict(os.environ, PATH="/nonexistent")
    proc = run_cli(["fabric", "--no-calibrate"], timeout=60, env=env)
    assert proc.returncode == 2 and "Open vSwitch is not installed" in proc.stderr


# -- nothing left behind ---------------------------------------------------------------------------
def start_hold(tmp_path: Path) -> Running:
    """`incastlab fabric --hold`, returned once it says the fabric is up."""
    run = Running(["fabric", "--hold", "--no-calibrate", "--workdir", str(tmp_path)])
    with run.killed_on_error():
        run.wait_line("fabric is up", 120)
    return run


# Ctrl-C points of `fabric --hold`: the line saying the run got there, the line saying it has moved
# on (None: it stays there), and the largest random delay after the first that the run cannot
# outlast (bring-up takes 3-6 s here, the all-pairs ping of the default fabric as little as 0.16 s,
# holding lasts until Ctrl-C). A signal that came too late anyway fails the test as such.
HOLD_POINTS = {
    "bring-up": ("building fabric", "fabric up in", 1.0),
    "ping": ("all-pairs ping: starting", "all-pairs ping: no loss", 0.03),
    "holding": ("fabric is up", None, 1.0),
}


def fabric_is_there() -> None:
    assert not find_leftovers().empty(), "the fabric is not there to be taken down"


@pytest.mark.parametrize("point", list(HOLD_POINTS))
def test_ctrl_c_at_any_point_of_the_fabric_leaves_nothing_behind(clean_host, tmp_path, rng, point):
    at, moved_on, max_delay = HOLD_POINTS[point]
    run = Running(["fabric", "--hold", "--no-calibrate", "--workdir", str(tmp_path)])
    code, secs = interrupt_at(
        run, rng, at, moved_on, max_delay, before_signal=fabric_is_there if point == "holding" else None
    )
    assert_exit_130_soon(code, secs, run)
    assert "interrupted; the fabric was taken down" in run.text("stderr")
    assert find_leftovers().empty(), f"Ctrl-C during {point} left {find_leftovers().describe()}"


def test_openflow_listens_on_loopback_only_and_every_switch_connects(clean_host, tmp_path):
    run = start_hold(tmp_path)
    try:
        assert listen_addresses(6653) == {"127.0.0.1"}, "the OpenFlow port must listen on loopback only"
        topo = json.loads(urllib.request.urlopen("http://127.0.0.1:8080/api/topology", timeout=5).read())
        assert len(topo["switches"]) == 6 and all(s["connected"] for s in topo["switches"])
        assert "all-pairs ping: no loss" in run.text("stderr")
    finally:
        run.send(signal.SIGINT)
        code, _ = run.wait_exit()
    assert code == 130


def test_sigterm_leaves_nothing_behind(clean_host, tmp_path):
    run = start_hold(tmp_path)
    run.send(signal.SIGTERM, group=False)
    assert run.wait_exit(guard=60)[0] == 130
    assert find_leftovers().empty()


def test_killed_controller_ends_the_run_cleanly(clean_host, tmp_path):
    run = start_hold(tmp_path)
    ctl = [p for p in find_leftovers().pids if b"controller.main" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(ctl) == 1
    os.kill(ctl[0], signal.SIGKILL)
    code, _ = run.wait_exit(guard=60)
    assert code == 2
    assert "controller died" in run.text("stderr")
    assert find_leftovers().empty()


def test_after_sigkill_the_next_run_refuses_until_clean(clean_host, tmp_path):
    run = start_hold(tmp_path)
    run.send(signal.SIGKILL, group=False)
    run.wait_exit(guard=60)
    assert not find_leftovers().empty()
    refused = run_cli(["fabric", "--no-calibrate"], timeout=60)
    assert refused.returncode == 2 and "incastlab clean" in refused.stderr
    cleaned = run_cli(["clean"], timeout=120)
    assert cleaned.returncode == 0, cleaned.stderr
    assert find_leftovers().empty()


def test_fabric_command_prints_the_calibration_table(clean_host, tmp_path):
    proc = run_cli(["fabric", "--seconds", "1", "--workdir", str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"h\d+-eth0", ln)]
    assert len(rows) == 8
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert len(cal["links"]) == 8 and all(lk["alone_mbit"] > 0 for lk in cal["links"])
    assert 0 < cal["headroom"] <= 1.2
