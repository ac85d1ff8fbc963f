"""The fabric's command line as a user drives it: bad input, ports in use, Ctrl-C, kills, clean."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from incastlab.cleanup import find_leftovers
from tests.conftest import ROOT, incastlab_cmd, run_cli

pytestmark = pytest.mark.integration


# -- bad input: refused before anything is built ---------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--spines", "0"], "spines"),
    (["--leaves", "0"], "leaves"),
    (["--host-mbit", "-1"], "host_mbit"),
    (["--uplink-mbit", "0"], "uplink_mbit"),
    (["--buffer", "0"], "buffer"),
    (["--ps-host", "h99"], "h99"),
    (["--api-port", "70000"], "api-port"),
])
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
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_open_vswitch_is_named(clean_host):
    env = dict(os.environ, PATH="/nonexistent")
    proc = run_cli(["fabric", "--no-calibrate"], timeout=60, env=env)
    assert proc.returncode == 2 and "Open vSwitch is not installed" in proc.stderr


# -- nothing left behind ---------------------------------------------------------------------------
def start_hold(tmp_path: Path) -> subprocess.Popen[str]:
    argv = incastlab_cmd() + ["fabric", "--hold", "--no-calibrate", "--workdir", str(tmp_path)]
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 90
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if "fabric is up" in line:
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("fabric did not come up: " + "".join(seen))


def test_ctrl_c_leaves_nothing_behind(clean_host, tmp_path):
    proc = start_hold(tmp_path)
    assert not find_leftovers().empty()  # the fabric is really there
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert find_leftovers().empty()


def test_sigterm_leaves_nothing_behind(clean_host, tmp_path):
    proc = start_hold(tmp_path)
    proc.terminate()
    assert proc.wait(timeout=60) == 130
    assert find_leftovers().empty()


def test_killed_controller_ends_the_run_cleanly(clean_host, tmp_path):
    proc = start_hold(tmp_path)
    ctl = [p for p in find_leftovers().pids if b"controller.main" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(ctl) == 1
    os.kill(ctl[0], signal.SIGKILL)
    assert proc.wait(timeout=60) == 2
    assert "controller died" in proc.stderr.read()
    assert find_leftovers().empty()


def test_after_sigkill_the_next_run_refuses_until_clean(clean_host, tmp_path):
    proc = start_hold(tmp_path)
    proc.kill()
    proc.wait()
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
