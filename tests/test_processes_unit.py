"""topologies.processes.stop_processes: SIGTERM first, SIGKILL after one shared grace."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from topologies.processes import stop_processes

# prints "ready" once its SIGTERM handler is in place, then sleeps until killed
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def _stubborn() -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_a_process_that_obeys_sigterm_is_not_killed():
    p = subprocess.Popen(["sleep", "600"])
    t0 = time.monotonic()
    stop_processes([p], grace=30.0)
    assert p.returncode == -signal.SIGTERM
    assert time.monotonic() - t0 < 10.0  # it did not sit out the grace


def test_processes_that_ignore_sigterm_are_killed_after_one_shared_grace():
    stubborn = [_stubborn(), _stubborn()]
    polite = subprocess.Popen(["sleep", "600"])
    done = subprocess.Popen(["true"])
    done.wait()
    grace = 2.0
    t0 = time.monotonic()
    stop_processes([*stubborn, polite, done], grace=grace)
    took = time.monotonic() - t0
    assert [p.returncode for p in stubborn] == [-signal.SIGKILL, -signal.SIGKILL]
    assert polite.returncode == -signal.SIGTERM
    assert done.returncode == 0  # an ended process is left as it was
    # one deadline for all: two stubborn processes cost one grace, not two
    assert grace <= took < 2 * grace, took
